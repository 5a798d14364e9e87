#include "workloads/memory/allocator_replay.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <stdexcept>

namespace shardsim::workloads {
namespace {

struct LiveAllocation {
  CachingAllocator::BlockId block;
  double bytes = 0;
};

bool same_size(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(a, b) + 0.5; }

}  // namespace

std::uint64_t allocator_bytes(double bytes) {
  constexpr double kLimit = 18446744073709551615.0;  // 2^64, the first double past UINT64_MAX
  return bytes >= kLimit ? UINT64_MAX : static_cast<std::uint64_t>(std::ceil(std::max(bytes, 0.0)));
}

AllocatorPeaks replay_caching_allocator(const Program& program, const Timeline& timeline, int rank,
                                        const CachingAllocatorOptions& options) {
  const RankProgram& rank_program = program.program_of(rank);
  const auto& timings = timeline.ops.at(static_cast<std::size_t>(rank));
  if (timings.size() != rank_program.ops.size()) {
    throw std::logic_error("replay_caching_allocator: rank " + std::to_string(rank) + " has no timings");
  }
  const std::vector<std::size_t> order = memory_ops_in_time_order(rank_program, timings);
  CachingAllocator allocator(options);
  AllocatorPeaks peaks;
  const auto allocate = [&](double bytes, int stream) -> std::optional<CachingAllocator::BlockId> {
    const auto block = allocator.allocate(allocator_bytes(bytes), stream);
    if (!block) peaks.out_of_memory = true;
    return block;
  };
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    if (rank_program.resident_bytes[c] > 0 && !allocate(rank_program.resident_bytes[c], 0)) break;
  }
  std::array<std::deque<LiveAllocation>, kMemoryCategoryCount> live;
  for (int step = 0; step < 2 && !peaks.out_of_memory; ++step) {
    for (std::size_t i : order) {
      const Op& op = rank_program.ops[i];
      std::deque<LiveAllocation>& held = live[static_cast<std::size_t>(op.memory)];
      if (op.bytes > 0) {
        const auto block = allocate(op.bytes, op.stream);
        if (!block) break;
        held.push_back({*block, op.bytes});
        continue;
      }
      double to_free = -op.bytes;
      auto exact = held.end();
      for (auto it = held.rbegin(); it != held.rend(); ++it) {
        if (same_size(it->bytes, to_free)) {
          exact = std::prev(it.base());
          break;
        }
      }
      if (exact != held.end()) {
        allocator.free(exact->block);
        held.erase(exact);
        continue;
      }
      while (to_free > 0.5 && !held.empty()) {
        allocator.free(held.front().block);
        to_free -= held.front().bytes;
        held.pop_front();
      }
    }
    // What a step leaves allocated is not the next step's.
    for (auto& held : live) {
      for (const LiveAllocation& allocation : held) allocator.free(allocation.block);
      held.clear();
    }
  }
  peaks.allocated_bytes = static_cast<double>(allocator.stats().peak_allocated_bytes);
  peaks.reserved_bytes = static_cast<double>(allocator.stats().peak_reserved_bytes);
  peaks.allocation_retries = allocator.stats().allocation_retries;
  return peaks;
}

}  // namespace shardsim::workloads
