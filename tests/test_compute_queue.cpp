// ComputeQueue, the CPU executor's stand-in for a GPU stream: ops run one at
// a time in the order enqueued, each timed from the step's origin; a failing
// op's error reaches the enqueuing thread and drops what was queued behind it.
#include "calib/executor/compute_queue.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace shardsim;
using calib::ComputeQueue;

namespace {

std::vector<ComputeQueue::Finished> drain(ComputeQueue& queue) {
  std::vector<ComputeQueue::Finished> all;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!queue.idle() && std::chrono::steady_clock::now() < give_up) {
    for (const auto& f : queue.take_finished()) all.push_back(f);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return all;
}

// A program of one op per name (the program keeps the names).
workloads::RankProgram named(const std::vector<std::string>& names) {
  workloads::RankProgram program;
  for (const std::string& name : names) program.append(workloads::Op{}, name);
  return program;
}

}  // namespace

TEST_CASE("the compute queue runs its ops one at a time, in the order enqueued", "[executor][queue]") {
  std::vector<std::string> ran;  // the queue's thread only
  std::atomic<int> running{0};
  bool overlapped = false;
  ComputeQueue queue([&](const workloads::Op& op) {
    overlapped = overlapped || running.fetch_add(1) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ran.emplace_back(op.name);
    running.fetch_sub(1);
  });
  const auto origin = ComputeQueue::Clock::now();
  queue.set_origin(origin);
  const workloads::RankProgram program = named({"op0", "op1", "op2", "op3", "op4", "op5"});
  const std::vector<workloads::Op>& ops = program.ops;
  REQUIRE(queue.idle());
  for (std::uint32_t i = 0; i < ops.size(); ++i) queue.enqueue(ops[i], i);
  REQUIRE_FALSE(queue.idle());
  const auto finished = drain(queue);
  REQUIRE(queue.idle());
  REQUIRE(finished.size() == ops.size());
  REQUIRE_FALSE(overlapped);
  for (std::uint32_t i = 0; i < finished.size(); ++i) {
    REQUIRE(finished[i].first == i);
    REQUIRE(ran[i] == ops[i].name);
    const calib::MeasuredOp& t = finished[i].second;
    REQUIRE(t.start_seconds >= 0);
    REQUIRE(t.end_seconds >= t.start_seconds + 0.002);  // it slept 2 ms
    if (i > 0) REQUIRE(t.start_seconds >= finished[i - 1].second.end_seconds);
  }
}

TEST_CASE("a failing op's error reaches the enqueuing thread, the ops behind it are dropped", "[executor][queue]") {
  std::vector<std::string> ran;
  ComputeQueue queue([&](const workloads::Op& op) {
    if (op.name == "bad") throw std::runtime_error("kernel failed: " + std::string(op.name));
    ran.emplace_back(op.name);
  });
  queue.set_origin(ComputeQueue::Clock::now());
  const workloads::RankProgram program = named({"good", "bad", "after"});
  const std::vector<workloads::Op>& ops = program.ops;
  for (std::uint32_t i = 0; i < ops.size(); ++i) queue.enqueue(ops[i], i);
  bool thrown = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!thrown && std::chrono::steady_clock::now() < give_up) {
    try {
      queue.take_finished();
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()) == "kernel failed: bad");
      thrown = true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  REQUIRE(thrown);
  REQUIRE(queue.idle());
  REQUIRE(ran == std::vector<std::string>{"good"});
}
