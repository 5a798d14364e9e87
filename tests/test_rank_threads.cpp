// One process running every rank (calib/executor/rank_threads.h): the steps'
// timings combined as the ranks measured them, and a failing rank ending
// the run with its own error and no thread left waiting. Fake ranks stand in
// for GPUs; their "collectives" wait for every rank, as NCCL's do.
#include "calib/executor/measured_steps.h"
#include "calib/executor/rank_threads.h"
#include "topology/base/mpi_world.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace shardsim;
using namespace shardsim::calib;

namespace {

// What the fake ranks share: a rendezvous every rank must reach, as a
// collective needs every member, that gives up when a peer has failed.
class Rendezvous {
 public:
  explicit Rendezvous(int ranks) : ranks_(ranks) {}
  // false when a peer failed (or 10 s passed: the test then fails instead of
  // hanging). The flag is polled, as the GPU ranks poll their events.
  bool meet(const std::atomic<bool>& peer_failed) {
    std::unique_lock lock(mutex_);
    const long round = arrived_ / ranks_;
    ++arrived_;
    changed_.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived_ < (round + 1) * ranks_) {
      if (peer_failed || std::chrono::steady_clock::now() > deadline) return false;
      changed_.wait_for(lock, std::chrono::milliseconds(1));
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int ranks_;
  long arrived_ = 0;
};

struct FakeScript {
  int ranks = 3;
  int fail_rank = -1;       // this rank throws...
  int fail_step = -1;       // ...in this step (-1: while it is made)
  int deaf_rank = -1;       // this rank blocks in that step without watching the flag...
  std::atomic<bool> deaf{false};  // ...from here on, and only then does the failing rank fail
  std::atomic<int> connects{0};
};

class FakeRank final : public RankThreadRun {
 public:
  FakeRank(int rank, const std::atomic<bool>& peer_failed, FakeScript& script, Rendezvous& rendezvous)
      : rank_(rank), peer_failed_(peer_failed), script_(script), rendezvous_(rendezvous) {
    if (script.fail_step == -1 && rank == script.fail_rank) throw std::runtime_error("out of memory making the rank");
  }
  void connect() override {
    ++script_.connects;
    if (!rendezvous_.meet(peer_failed_)) throw ExecutionError("rank " + std::to_string(rank_) + ": connect gave up");
  }
  // Op 0 ends at 1 ms x (rank + 1) x (step + 1), op 1 is a collective
  // ending at 5 ms x (step + 1); the step starts at 1 s x step + rank us.
  std::vector<MeasuredOp> step(bool, std::int64_t& origin_ns) override {
    origin_ns = 1'000'000'000LL * step_ + 1000LL * rank_;
    if (rank_ == script_.fail_rank && step_ == script_.fail_step) {
      while (script_.deaf_rank >= 0 && !script_.deaf) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      throw std::runtime_error("cudaMemcpyAsync: an illegal memory access was encountered");
    }
    if (rank_ == script_.deaf_rank && step_ == script_.fail_step) {
      script_.deaf = true;
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    if (!rendezvous_.meet(peer_failed_)) {
      throw ExecutionError("rank " + std::to_string(rank_) + ": stopped, another rank failed");
    }
    const double k = step_ + 1.0;
    ++step_;
    return {{0.0, 1e-3 * (rank_ + 1) * k}, {1e-3, 5e-3 * k}};
  }
  std::string device_name() const override { return "fake device " + std::to_string(rank_); }

 private:
  int rank_;
  const std::atomic<bool>& peer_failed_;
  FakeScript& script_;
  Rendezvous& rendezvous_;
  int step_ = 0;
};

MeasuredSteps run_fake(FakeScript& script, const ExecutionOptions& options) {
  Rendezvous rendezvous(script.ranks);
  return run_ranks_in_threads(
      script.ranks, options,
      [&](int rank, const std::atomic<bool>& peer_failed) {
        return std::make_unique<FakeRank>(rank, peer_failed, script, rendezvous);
      },
      "fake");
}

}  // namespace

TEST_CASE("the median step: the lower middle, the earliest of equal times", "[execution][threads]") {
  CHECK(median_step({3.0}) == 0);
  CHECK(median_step({3.0, 1.0, 2.0}) == 2);
  CHECK(median_step({4.0, 1.0, 3.0, 2.0}) == 3);  // sorted 1 2 3 4: the lower middle is 2.0, step 3
  CHECK(median_step({2.0, 1.0, 2.0, 2.0}) == 0);
}

TEST_CASE("without MPI the process is a world of one", "[execution][threads]") {
  REQUIRE_FALSE(mpi_running());
  CHECK(world_rank() == 0);
  CHECK(world_size() == 1);
  CHECK(node_count() == 1);
  CHECK(local_rank() == 0);
  std::vector<double> values{1.5, -2.0};
  world_max(values);
  CHECK(values == std::vector<double>{1.5, -2.0});
  CHECK(world_min(42) == 42);
  int data = 7;
  world_broadcast(&data, sizeof data);
  CHECK(data == 7);
  world_barrier();
  CHECK_FALSE(processor_name().empty());
}

TEST_CASE("ranks in threads: every step's time is its slowest rank's, timings on the first rank's clock",
          "[execution][threads]") {
  FakeScript script;
  ExecutionOptions options;
  options.warmup_steps = 1;
  options.measured_steps = 3;
  const MeasuredSteps run = run_fake(script, options);
  CHECK(script.connects == 3);
  CHECK(run.backend == "fake");
  CHECK(run.device == "fake device 0");
  CHECK(run.shared_clock);
  // Steps 1..3 after one warm-up: the slowest op of step s is rank 2's op 0
  // at 3 ms x (s + 1), beside the collective at 5 ms x (s + 1).
  REQUIRE(run.step_seconds.size() == 3);
  CHECK(run.step_seconds[0] == Approx(10e-3));
  CHECK(run.step_seconds[1] == Approx(15e-3));
  CHECK(run.step_seconds[2] == Approx(20e-3));
  CHECK(run.reported_step == 1);
  // The reported step (the third overall): rank r started r us after rank 0.
  REQUIRE(run.ops.size() == 3);
  for (int r = 0; r < 3; ++r) {
    const auto& ops = run.ops[static_cast<std::size_t>(r)];
    REQUIRE(ops.size() == 2);
    CHECK(ops[0].start_seconds == Approx(r * 1e-6));
    CHECK(ops[0].end_seconds == Approx(r * 1e-6 + 3e-3 * (r + 1)));
    CHECK(ops[1].end_seconds == Approx(r * 1e-6 + 15e-3));
  }
}

TEST_CASE("ranks in threads: a rank failing mid-step ends the run with its error, naming it", "[execution][threads]") {
  FakeScript script;
  script.fail_rank = 1;
  script.fail_step = 2;
  ExecutionOptions options;
  options.warmup_steps = 1;
  options.measured_steps = 3;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(run_fake(script, options),
                    "rank 1: cudaMemcpyAsync: an illegal memory access was encountered");
  // The others gave up at once instead of waiting out their timeouts.
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("ranks in threads: a rank failing in its own setup keeps the others out of the collective setup",
          "[execution][threads]") {
  FakeScript script;
  script.fail_rank = 2;
  script.fail_step = -1;
  ExecutionOptions options;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(run_fake(script, options), ExecutionError);
  CHECK_THROWS_WITH(run_fake(script, options), "rank 2: out of memory making the rank");
  CHECK(script.connects == 0);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("ranks in threads: a rank blocked where it cannot see the failure ends the process past the stall timeout",
          "[execution][threads]") {
  const auto start = std::chrono::steady_clock::now();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    FakeScript script;
    script.fail_rank = 1;
    script.fail_step = 1;
    script.deaf_rank = 0;
    ExecutionOptions options;
    options.warmup_steps = 0;
    options.measured_steps = 3;
    options.stall_timeout_seconds = 0.3;
    try {
      run_fake(script, options);
    } catch (...) {
    }
    std::_Exit(0);  // returning at all is the failure
  }
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(10)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL("the run still had not ended 10 s after a rank failed");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("combining ranks that measured different numbers of steps is a bug, not a result", "[execution][threads]") {
  RankSteps a{{{{0, 1}}}, {0}};
  RankSteps b{{{{0, 1}}, {{0, 2}}}, {0, 5}};
  CHECK_THROWS_AS(combine_rank_steps({a, b}, "fake", "x"), std::logic_error);
}
