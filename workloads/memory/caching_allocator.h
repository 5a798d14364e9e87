// PyTorch's CUDA caching allocator as a model of what a rank reserves from
// the device for what it allocates (c10/cuda/CUDACachingAllocator.cpp,
// pytorch/pytorch at 001074d2; the functions named below are its own).
// torch.cuda.max_memory_allocated() is the most the live blocks held;
// max_memory_reserved(), which torchtitan and most training logs report, is
// the most the allocator held from cudaMalloc, cached free blocks included.
//
// What it does, and so what this does:
// - round_size: every request rounds up to a multiple of 512 bytes.
// - get_pool: requests of at most 1 MiB come from the small pool, the rest
//   from the large one; a block is only reused by a request of the stream it
//   was allocated on (blocks are ordered by stream, then size).
// - get_free_block: the smallest cached block of the pool and stream that
//   is large enough (best fit; max_split_size unset, its default).
// - should_split: the rest of a block goes back to the pool as a block of
//   its own when it is at least 512 bytes (small pool, or expandable
//   segments) or more than 1 MiB (large pool); otherwise the request takes
//   the whole block.
// - get_allocation_size: without a fitting block, a new segment from
//   cudaMalloc: 2 MiB for a small request, 20 MiB for one under 10 MiB,
//   else the request rounded up to 2 MiB.
// - free_block: a freed block merges with free neighbours of its segment.
// - malloc: when cudaMalloc fails (here: the segment would take the
//   reserved bytes past the capacity), release_cached_blocks frees every
//   cached segment that is not split and the allocation is retried once;
//   if it fails again, the program is out of memory.
// - expandable_segments:True: one segment per stream and pool, which grows
//   by mapping pages (2 MiB small, 20 MiB large) at its end, so that a
//   request larger than any free block extends the free block at the end
//   instead of leaving it stranded; on a retry its free pages at the end are
//   unmapped. (PyTorch also unmaps whole free pages inside the segment and
//   fills such holes first; here only the end is unmapped.)
// Not modelled: record_stream's deferred frees, CUDA graphs' private pools,
// the garbage collection threshold, roundup_power2_divisions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

namespace shardsim::workloads {

struct CachingAllocatorOptions {
  bool expandable_segments = false;
  // What cudaMalloc can hand out (the GPU's memory less what the CUDA
  // context, NCCL and other libraries hold): beyond it a segment fails.
  std::uint64_t capacity_bytes = UINT64_MAX;
};

// torch.cuda.memory_stats' names: allocated_bytes (blocks handed out,
// rounded), reserved_bytes (segments), and their peaks.
struct AllocatorStats {
  std::uint64_t allocated_bytes = 0, reserved_bytes = 0;
  std::uint64_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::uint64_t segments = 0;            // live segments (cudaMalloc calls not yet freed)
  std::uint64_t allocation_retries = 0;  // num_alloc_retries: cached segments released to make room
};

class CachingAllocator {
 public:
  struct BlockId {
    std::uint32_t segment = 0;
    std::uint64_t offset = 0;
  };

  explicit CachingAllocator(CachingAllocatorOptions options = {});

  // A block of at least `bytes` for `stream`, or nothing when the device
  // has no room even after releasing the cached segments (PyTorch's
  // OutOfMemoryError).
  std::optional<BlockId> allocate(std::uint64_t bytes, int stream);
  void free(BlockId block);

  const AllocatorStats& stats() const { return stats_; }

  static std::uint64_t round_size(std::uint64_t bytes);
  static std::uint64_t allocation_size(std::uint64_t size);  // a new segment's, without expandable segments

 private:
  struct Block {
    std::uint64_t size = 0;
    bool allocated = false;
  };
  struct Segment {
    int stream = 0;
    bool small = false;
    bool expandable = false;
    bool released = false;
    std::uint64_t size = 0;                 // mapped bytes
    std::map<std::uint64_t, Block> blocks;  // by offset, tiling [0, size)
  };
  // A cached free block, in get_free_block's order: pool, stream, size, then address.
  using FreeKey = std::tuple<bool, int, std::uint64_t, std::uint32_t, std::uint64_t>;

  std::optional<BlockId> find_free_block(bool small, int stream, std::uint64_t size);
  std::optional<BlockId> new_segment(bool small, int stream, std::uint64_t size);
  std::optional<BlockId> grow_expandable(bool small, int stream, std::uint64_t size);
  bool fits(std::uint64_t more_bytes) const;
  void release_cached_segments();
  BlockId hand_out(BlockId block, std::uint64_t size);
  void cache(std::uint32_t segment, std::uint64_t offset);
  void uncache(std::uint32_t segment, std::uint64_t offset);

  CachingAllocatorOptions options_;
  AllocatorStats stats_;
  std::vector<Segment> segments_;
  std::set<FreeKey> free_blocks_;
  std::map<std::pair<int, bool>, std::uint32_t> expandable_of_stream_;  // (stream, small) -> segment
};

}  // namespace shardsim::workloads
