// PyTorch's caching allocator (workloads/memory/caching_allocator.h) on
// sequences worked out by hand from CUDACachingAllocator.cpp's rules, and
// its replay over a rank's memory ops.
#include "pipeline_checks.h"
#include "workloads/memory/allocator_replay.h"
#include "workloads/memory/caching_allocator.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

constexpr std::uint64_t kMiB = 1 << 20;

CachingAllocator::BlockId take(CachingAllocator& allocator, std::uint64_t bytes, int stream = 0) {
  const auto block = allocator.allocate(bytes, stream);
  REQUIRE(block);
  return *block;
}

}  // namespace

TEST_CASE("requests round to 512 bytes and small ones share a 2 MiB segment", "[allocator]") {
  CachingAllocator allocator;
  const auto a = take(allocator, 1);
  REQUIRE(allocator.stats().allocated_bytes == 512);
  REQUIRE(allocator.stats().reserved_bytes == 2 * kMiB);
  take(allocator, 1000);  // 1024, split off the same segment's rest
  REQUIRE(allocator.stats().allocated_bytes == 512 + 1024);
  REQUIRE(allocator.stats().reserved_bytes == 2 * kMiB);
  REQUIRE(allocator.stats().segments == 1);
  allocator.free(a);
  REQUIRE(allocator.stats().allocated_bytes == 1024);
  REQUIRE(allocator.stats().reserved_bytes == 2 * kMiB);  // cached, not returned
}

TEST_CASE("large requests: a 20 MiB segment under 10 MiB, their own size rounded to 2 MiB above", "[allocator]") {
  REQUIRE(CachingAllocator::allocation_size(1 * kMiB) == 2 * kMiB);
  REQUIRE(CachingAllocator::allocation_size(1 * kMiB + 512) == 20 * kMiB);
  REQUIRE(CachingAllocator::allocation_size(10 * kMiB - 512) == 20 * kMiB);
  REQUIRE(CachingAllocator::allocation_size(10 * kMiB) == 10 * kMiB);
  REQUIRE(CachingAllocator::allocation_size(11 * kMiB + 512) == 12 * kMiB);

  CachingAllocator allocator;
  take(allocator, 3 * kMiB);  // 17 MiB left: split
  take(allocator, 3 * kMiB);  // from the rest
  REQUIRE(allocator.stats().reserved_bytes == 20 * kMiB);
  REQUIRE(allocator.stats().allocated_bytes == 6 * kMiB);
  // 11 MiB + 1 byte fits the segment's 14 MiB rest (best fit before cudaMalloc).
  take(allocator, 11 * kMiB + 1);
  REQUIRE(allocator.stats().reserved_bytes == 20 * kMiB);
  REQUIRE(allocator.stats().allocated_bytes == 6 * kMiB + 11 * kMiB + 512);
  // Alone, it gets a 12 MiB segment whose rest (1 MiB - 512) is too small to
  // split, so the request holds all of it.
  CachingAllocator alone;
  take(alone, 11 * kMiB + 1);
  REQUIRE(alone.stats().reserved_bytes == 12 * kMiB);
  REQUIRE(alone.stats().allocated_bytes == 12 * kMiB);
}

TEST_CASE("a cached block serves only its own stream, and the best fit among them", "[allocator]") {
  CachingAllocator allocator;
  const auto forty = take(allocator, 40 * kMiB);
  const auto sixty = take(allocator, 60 * kMiB);
  allocator.free(forty);
  allocator.free(sixty);
  take(allocator, 100 * kMiB, 1);  // another stream: a new segment
  REQUIRE(allocator.stats().reserved_bytes == 200 * kMiB);
  // 50 MiB takes the 60 MiB block (the 40 is too small), leaving 10 cached.
  take(allocator, 50 * kMiB);
  REQUIRE(allocator.stats().reserved_bytes == 200 * kMiB);
  take(allocator, 40 * kMiB);
  take(allocator, 10 * kMiB);
  REQUIRE(allocator.stats().reserved_bytes == 200 * kMiB);
  REQUIRE(allocator.stats().allocated_bytes == 200 * kMiB);
}

TEST_CASE("freed neighbours merge back into the block they were split from", "[allocator]") {
  CachingAllocator allocator;
  allocator.free(take(allocator, 100 * kMiB));
  const auto a = take(allocator, 30 * kMiB);
  const auto b = take(allocator, 30 * kMiB);
  allocator.free(a);
  allocator.free(b);
  take(allocator, 100 * kMiB);  // the whole segment again
  REQUIRE(allocator.stats().reserved_bytes == 100 * kMiB);
  REQUIRE(allocator.stats().segments == 1);
}

TEST_CASE("the loss's tensors: reserved above allocated, by hand", "[allocator]") {
  // Eager cross_entropy(logits.float()) in units of 20 MiB: the bf16 logits
  // (1), their fp32 copy (2), log_softmax's output (2, kept); the copy and
  // the logits freed; backward, nll_loss's gradient (2) takes the copy's
  // block, log_softmax's gradient (2) finds no free block of 2 and takes a
  // new segment, the downcast (1) the logits' block.
  const std::uint64_t u = 20 * kMiB;
  for (bool expandable : {false, true}) {
    INFO("expandable segments " << expandable);
    CachingAllocator allocator({expandable});
    const auto logits = take(allocator, u), copy = take(allocator, 2 * u), kept = take(allocator, 2 * u);
    allocator.free(copy);
    allocator.free(logits);
    const auto nll = take(allocator, 2 * u), grad = take(allocator, 2 * u);
    allocator.free(nll);
    const auto downcast = take(allocator, u);
    allocator.free(kept);
    allocator.free(grad);
    allocator.free(downcast);
    REQUIRE(allocator.stats().peak_allocated_bytes == 6 * u);  // kept, nll, grad
    REQUIRE(allocator.stats().peak_reserved_bytes == 7 * u);
    REQUIRE(allocator.stats().allocated_bytes == 0);
  }
}

TEST_CASE("expandable segments grow the free block at their end instead of stranding it", "[allocator]") {
  const std::uint64_t u = 20 * kMiB;
  CachingAllocator plain, expandable({true});
  for (CachingAllocator* allocator : {&plain, &expandable}) {
    const auto keep = take(*allocator, u);
    allocator->free(take(*allocator, 2 * u));
    take(*allocator, 3 * u);
    allocator->free(keep);
  }
  REQUIRE(plain.stats().reserved_bytes == 6 * u);       // 1 + 2 (cached) + 3
  REQUIRE(expandable.stats().reserved_bytes == 4 * u);  // the free 2 grown by 1 page
  // Pages are 20 MiB: a 1 MiB + 512 request maps one.
  CachingAllocator pages({true});
  take(pages, kMiB + 512);
  REQUIRE(pages.stats().reserved_bytes == 20 * kMiB);
  REQUIRE(pages.stats().allocated_bytes == kMiB + 512);
}

TEST_CASE("out of room, the cached segments go back and the request is retried once", "[allocator]") {
  CachingAllocator allocator({false, 100 * kMiB});
  allocator.free(take(allocator, 60 * kMiB));
  take(allocator, 70 * kMiB);  // 60 + 70 > 100: the cached 60 is released first
  REQUIRE(allocator.stats().allocation_retries == 1);
  REQUIRE(allocator.stats().reserved_bytes == 70 * kMiB);
  REQUIRE_FALSE(allocator.allocate(40 * kMiB, 0));  // nothing cached to release
  // A split segment stays: only wholly free ones are released.
  CachingAllocator split({false, 100 * kMiB});
  split.free(take(split, 60 * kMiB));
  take(split, 30 * kMiB);
  REQUIRE_FALSE(split.allocate(50 * kMiB, 0));  // 30 free in the split 60, 40 left
  REQUIRE(split.stats().reserved_bytes == 60 * kMiB);
}

TEST_CASE("reserved never falls below allocated, and everything freed is allocated nothing", "[allocator]") {
  for (bool expandable : {false, true}) {
    INFO("expandable segments " << expandable);
    std::mt19937_64 random(7);
    CachingAllocator allocator({expandable, 4096 * kMiB});
    std::vector<CachingAllocator::BlockId> live;
    std::uniform_int_distribution<std::uint64_t> size(1, 64 * kMiB);
    for (int i = 0; i < 5000; ++i) {
      if (!live.empty() && random() % 2 == 0) {
        const std::size_t k = random() % live.size();
        allocator.free(live[k]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      } else if (const auto block = allocator.allocate(size(random), static_cast<int>(random() % 3))) {
        live.push_back(*block);
      }
      REQUIRE(allocator.stats().reserved_bytes >= allocator.stats().allocated_bytes);
      REQUIRE(allocator.stats().reserved_bytes <= 4096 * kMiB);
    }
    for (const auto& block : live) allocator.free(block);
    REQUIRE(allocator.stats().allocated_bytes == 0);
    REQUIRE(allocator.stats().peak_reserved_bytes >= allocator.stats().peak_allocated_bytes);
  }
}

TEST_CASE("a rank's memory ops replayed in the order they ran, two steps", "[allocator][replay]") {
  // One rank: 10 MiB resident; a step allocates 40 MiB (activations), then
  // two 20 MiB gradient buffers freed at once as one bucket, then frees the
  // activations. The ops run in the order of their start times, which is
  // not program order.
  Program program;
  program.ranks = 1;
  program.streams = {"compute", "reduce"};
  program.program_of_rank = {0};
  RankProgram& rank = program.programs.emplace_back();
  rank.resident_bytes[static_cast<std::size_t>(MemoryCategory::parameters)] = 10 * kMiB;
  const double gradient = 20 * kMiB;
  rank.append(memory_op(MemoryCategory::communication_buffers, gradient, 0), "g1.alloc");
  const double activations = 40 * kMiB;
  rank.append(memory_op(MemoryCategory::activations, activations, 0), "activations.alloc");
  rank.append(memory_op(MemoryCategory::communication_buffers, gradient, 0), "g2.alloc");
  rank.append(memory_op(MemoryCategory::communication_buffers, -2 * gradient, 1), "bucket.free");
  rank.append(memory_op(MemoryCategory::activations, -activations, 0), "activations.free");
  Timeline timeline;
  timeline.ops = {{{10, 11}, {0, 1}, {20, 21}, {30, 31}, {40, 41}}};  // activations first
  const AllocatorPeaks peaks = replay_caching_allocator(program, timeline, 0);
  REQUIRE(peaks.allocated_bytes == 90 * kMiB);
  // Segments of 10 (resident), 40, 20, 20: the second step reuses them all.
  REQUIRE(peaks.reserved_bytes == 90 * kMiB);
  REQUIRE_FALSE(peaks.out_of_memory);
  // With room for less, the replay runs out.
  REQUIRE(replay_caching_allocator(program, timeline, 0, {false, 80 * kMiB}).out_of_memory);
  timeline.ops = {{}};
  REQUIRE_THROWS_AS(replay_caching_allocator(program, timeline, 0), std::logic_error);
  // Bytes the allocator counts: whole, and saturating where a cluster file gives a GPU more than 2^64.
  REQUIRE(allocator_bytes(1.2) == 2);
  REQUIRE(allocator_bytes(1e30) == UINT64_MAX);
}

TEST_CASE("over simulated steps the allocator hands out what the timeline's peak holds, rounded, and reserves more",
          "[allocator][replay]") {
  // ZeRO-3 and FSDP2 (eager, fp32 loss) on 16 GPUs, Megatron-LM over 4
  // pipeline stages: every rank program replayed on its first rank.
  std::vector<workloads::StepConfig> configs = {test::pipeline_step("zero3", 4, 16, 2),
                                                test::pipeline_step("fsdp-full-shard", 4, 16, 2),
                                                test::pipeline_step("megatron-tp4-pp4", 8, 1, 8)};
  for (const workloads::StepConfig& config : configs) {
    INFO(config.plan.name);
    const Program program = compile(config);
    const Timeline timeline = test::simulate_on(program, test::pipeline_world(), sim::NetworkMode::analytical);
    REQUIRE_FALSE(timeline.out_of_memory);
    std::vector<bool> seen(program.programs.size(), false);
    for (int rank = 0; rank < program.ranks; ++rank) {
      const int index = program.program_of_rank[static_cast<std::size_t>(rank)];
      if (seen[static_cast<std::size_t>(index)]) continue;
      seen[static_cast<std::size_t>(index)] = true;
      INFO("rank " << rank);
      const AllocatorPeaks peaks = replay_caching_allocator(program, timeline, rank);
      const double peak = timeline.peak_memory[static_cast<std::size_t>(rank)].total_bytes;
      // Each live block rounds up by less than 512 bytes, or holds a rest of
      // at most 1 MiB it did not split off.
      std::size_t allocations = kMemoryCategoryCount;
      for (const Op& op : program.program_of(rank).ops) allocations += op.kind == OpKind::memory && op.bytes > 0;
      REQUIRE(peaks.allocated_bytes >= peak);
      REQUIRE(peaks.allocated_bytes <= peak + static_cast<double>(allocations * kMiB));
      REQUIRE(peaks.reserved_bytes >= peaks.allocated_bytes);
      REQUIRE_FALSE(peaks.out_of_memory);
    }
  }
}
