// What PyTorch's caching allocator reserves for one rank's step
// (caching_allocator.h): the rank's memory ops, in the order its timeline ran
// them, as allocations and frees on the streams the ops name, its resident
// model states allocated first. The step runs twice, as a training run's
// steady state is what a log reports: the second step starts with the
// first one's cached segments.
//
// A memory op frees bytes of a category, not a named allocation, so a free
// is matched to the latest live allocation of its category of the same
// size, else to the oldest ones that add up to it (a gradient bucket freed
// at once after its modules' gradients were allocated one by one).
#pragma once

#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"
#include "workloads/memory/caching_allocator.h"

#include <cstdint>

namespace shardsim::workloads {

struct AllocatorPeaks {
  double allocated_bytes = 0;  // torch.cuda.max_memory_allocated()
  double reserved_bytes = 0;   // torch.cuda.max_memory_reserved()
  bool out_of_memory = false;  // a request failed after releasing the cached segments
  std::uint64_t allocation_retries = 0;
};

// Bytes as the allocator counts them: whole, and at most UINT64_MAX (a
// cluster file may give a GPU more).
std::uint64_t allocator_bytes(double bytes);

// Throws std::logic_error for a rank without timings.
AllocatorPeaks replay_caching_allocator(const Program& program, const Timeline& timeline, int rank,
                                        const CachingAllocatorOptions& options = {});

}  // namespace shardsim::workloads
