// parallel_for (sim/search/parallel_for.h): every item runs exactly once on a
// worker in range, at any thread count, and a failure surfaces as the one a
// plain loop would have met first.
#include "sim/search/parallel_for.h"

#include <catch2/catch.hpp>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using shardsim::sim::available_cpus;
using shardsim::sim::parallel_for;

TEST_CASE("parallel_for runs every item exactly once, on workers below the thread count", "[parallel_for]") {
  for (const int threads : {0, 1, 2, 3, 8, 64}) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1000}}) {
      std::vector<std::atomic<int>> runs(count);
      std::atomic<int> worker_out_of_range{0};
      parallel_for(count, threads, [&](int worker, std::size_t item) {
        if (worker < 0 || worker >= std::max(threads, 1)) ++worker_out_of_range;
        ++runs[item];
      });
      INFO(threads << " threads, " << count << " items");
      CHECK(worker_out_of_range == 0);
      for (std::size_t item = 0; item < count; ++item) REQUIRE(runs[item] == 1);
    }
  }
}

TEST_CASE("parallel_for uses the threads it is given", "[parallel_for]") {
  // Each item waits until all four have started: only four threads at once
  // get past that (fewer would wait for ever, so the wait gives up after a
  // minute and the check below fails instead).
  std::atomic<int> arrived{0};
  std::vector<std::atomic<int>> per_worker(4);
  parallel_for(4, 4, [&](int worker, std::size_t) {
    ++per_worker[static_cast<std::size_t>(worker)];
    ++arrived;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (arrived < 4 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  CHECK(arrived == 4);
  for (const auto& items : per_worker) CHECK(items == 1);
}

TEST_CASE("parallel_for rethrows the failure of the lowest item, after every item below it has run", "[parallel_for]") {
  for (const int threads : {1, 2, 4}) {
    std::vector<std::atomic<int>> runs(200);
    std::string message;
    try {
      parallel_for(runs.size(), threads, [&](int, std::size_t item) {
        ++runs[item];
        if (item == 37 || item == 38 || item == 150) throw std::runtime_error("item " + std::to_string(item));
      });
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    INFO(threads << " threads");
    CHECK(message == "item 37");
    for (std::size_t item = 0; item <= 37; ++item) REQUIRE(runs[item] == 1);
    // Items are handed out in order and the hand-out stops at a failure: at
    // most one item per other thread started after item 37 failed.
    int late = 0;
    for (std::size_t item = 38; item < runs.size(); ++item) late += runs[item];
    CHECK(late <= 2 * (threads - 1) + 1);
  }
}

TEST_CASE("available_cpus counts at least one CPU and no more than the process may run on", "[parallel_for]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(available_cpus() >= 1);
  CHECK(available_cpus() <= CPU_COUNT(&set));
}
