#include "workloads/memory/caching_allocator.h"

#include <iterator>
#include <stdexcept>

namespace shardsim::workloads {
namespace {

// CUDACachingAllocator.cpp's constants.
constexpr std::uint64_t kMinBlockSize = 512;            // every size rounds to a multiple
constexpr std::uint64_t kSmallSize = 1 << 20;           // the largest small request
constexpr std::uint64_t kSmallBuffer = 2 << 20;         // a small-pool segment
constexpr std::uint64_t kLargeBuffer = 20 << 20;        // a segment for a request of 1-10 MiB
constexpr std::uint64_t kMinLargeAlloc = 10 << 20;      // from here a segment is the request's own
constexpr std::uint64_t kRoundLarge = 2 << 20;          // which rounds up to 2 MiB

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t unit) { return (bytes + unit - 1) / unit * unit; }

}  // namespace

CachingAllocator::CachingAllocator(CachingAllocatorOptions options) : options_(options) {}

std::uint64_t CachingAllocator::round_size(std::uint64_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

std::uint64_t CachingAllocator::allocation_size(std::uint64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

std::optional<CachingAllocator::BlockId> CachingAllocator::allocate(std::uint64_t bytes, int stream) {
  const std::uint64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  if (auto block = find_free_block(small, stream, size)) return hand_out(*block, size);
  const auto grow = [&] {
    return options_.expandable_segments ? grow_expandable(small, stream, size) : new_segment(small, stream, size);
  };
  std::optional<BlockId> block = grow();
  if (!block) {
    release_cached_segments();
    ++stats_.allocation_retries;
    block = grow();
  }
  if (!block) return std::nullopt;
  return hand_out(*block, size);
}

std::optional<CachingAllocator::BlockId> CachingAllocator::find_free_block(bool small, int stream, std::uint64_t size) {
  const auto it = free_blocks_.lower_bound({small, stream, size, 0, 0});
  if (it == free_blocks_.end() || std::get<0>(*it) != small || std::get<1>(*it) != stream) return std::nullopt;
  const BlockId block{std::get<3>(*it), std::get<4>(*it)};
  free_blocks_.erase(it);
  return block;
}

bool CachingAllocator::fits(std::uint64_t more_bytes) const {
  return more_bytes <= options_.capacity_bytes && stats_.reserved_bytes <= options_.capacity_bytes - more_bytes;
}

std::optional<CachingAllocator::BlockId> CachingAllocator::new_segment(bool small, int stream, std::uint64_t size) {
  const std::uint64_t bytes = allocation_size(size);
  if (!fits(bytes)) return std::nullopt;
  Segment& segment = segments_.emplace_back();
  segment.stream = stream;
  segment.small = small;
  segment.size = bytes;
  segment.blocks[0] = {bytes, false};
  stats_.reserved_bytes += bytes;
  ++stats_.segments;
  return BlockId{static_cast<std::uint32_t>(segments_.size() - 1), 0};
}

// The stream's segment grows at its end by whole pages, taking in the free
// block there if there is one (find_expandable_block, map_block).
std::optional<CachingAllocator::BlockId> CachingAllocator::grow_expandable(bool small, int stream, std::uint64_t size) {
  const auto [it, created] = expandable_of_stream_.try_emplace({stream, small}, 0);
  if (created) {
    Segment& segment = segments_.emplace_back();
    segment.stream = stream;
    segment.small = small;
    segment.expandable = true;
    it->second = static_cast<std::uint32_t>(segments_.size() - 1);
    ++stats_.segments;
  }
  const std::uint32_t index = it->second;
  Segment& segment = segments_[index];
  std::uint64_t start = segment.size, have = 0;
  if (!segment.blocks.empty()) {
    const auto last = std::prev(segment.blocks.end());
    if (!last->second.allocated) {
      start = last->first;
      have = last->second.size;
    }
  }
  const std::uint64_t page = small ? kSmallBuffer : kLargeBuffer;
  const std::uint64_t mapped = round_up(size - have, page);
  if (!fits(mapped)) return std::nullopt;
  if (have > 0) uncache(index, start);
  segment.size += mapped;
  segment.blocks[start] = {have + mapped, false};
  stats_.reserved_bytes += mapped;
  return BlockId{index, start};
}

// release_cached_blocks: every segment that is one free block goes back to
// CUDA; an expandable segment unmaps the whole pages of its free end.
void CachingAllocator::release_cached_segments() {
  for (std::uint32_t index = 0; index < segments_.size(); ++index) {
    Segment& segment = segments_[index];
    if (segment.released || segment.blocks.empty()) continue;
    const auto last = std::prev(segment.blocks.end());
    if (last->second.allocated) continue;
    if (segment.expandable) {
      const std::uint64_t page = segment.small ? kSmallBuffer : kLargeBuffer;
      const std::uint64_t keep = round_up(last->first, page);  // pages the blocks before still touch
      if (keep >= segment.size) continue;
      uncache(index, last->first);
      const std::uint64_t unmapped = segment.size - keep;
      stats_.reserved_bytes -= unmapped;
      segment.size = keep;
      if (keep > last->first) {
        last->second.size = keep - last->first;
        cache(index, last->first);
      } else {
        segment.blocks.erase(last);
      }
    } else if (segment.blocks.size() == 1) {
      uncache(index, 0);
      stats_.reserved_bytes -= segment.size;
      --stats_.segments;
      segment.released = true;
      segment.blocks.clear();
    }
  }
}

// alloc_found_block: the request takes the block's front; should_split
// decides whether the rest becomes a cached block of its own.
CachingAllocator::BlockId CachingAllocator::hand_out(BlockId id, std::uint64_t size) {
  Segment& segment = segments_[id.segment];
  Block& block = segment.blocks.at(id.offset);
  const std::uint64_t remaining = block.size - size;
  const bool split = segment.small || segment.expandable ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    block.size = size;
    segment.blocks[id.offset + size] = {remaining, false};
    cache(id.segment, id.offset + size);
  }
  Block& taken = segment.blocks.at(id.offset);
  taken.allocated = true;
  stats_.allocated_bytes += taken.size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return id;
}

// free_block and try_merge_blocks.
void CachingAllocator::free(BlockId id) {
  Segment& segment = segments_.at(id.segment);
  auto it = segment.blocks.find(id.offset);
  if (it == segment.blocks.end() || !it->second.allocated) {
    throw std::logic_error("CachingAllocator: freeing a block that is not allocated");
  }
  it->second.allocated = false;
  stats_.allocated_bytes -= it->second.size;
  if (it != segment.blocks.begin()) {
    const auto before = std::prev(it);
    if (!before->second.allocated) {
      uncache(id.segment, before->first);
      before->second.size += it->second.size;
      segment.blocks.erase(it);
      it = before;
    }
  }
  if (const auto after = std::next(it); after != segment.blocks.end() && !after->second.allocated) {
    uncache(id.segment, after->first);
    it->second.size += after->second.size;
    segment.blocks.erase(after);
  }
  cache(id.segment, it->first);
}

void CachingAllocator::cache(std::uint32_t index, std::uint64_t offset) {
  const Segment& segment = segments_[index];
  free_blocks_.insert({segment.small, segment.stream, segment.blocks.at(offset).size, index, offset});
}

void CachingAllocator::uncache(std::uint32_t index, std::uint64_t offset) {
  const Segment& segment = segments_[index];
  free_blocks_.erase({segment.small, segment.stream, segment.blocks.at(offset).size, index, offset});
}

}  // namespace shardsim::workloads
