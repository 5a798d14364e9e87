#include "calib/executor/rank_threads.h"

#include "calib/executor/measured_steps.h"

#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

namespace shardsim::calib {

namespace {

// The first failure among the ranks, and the flag the others watch.
class FirstFailure {
 public:
  void record(int rank, std::exception_ptr error) {
    const std::lock_guard lock(mutex_);
    if (!error_) {
      rank_ = rank;
      error_ = std::move(error);
      when_ = std::chrono::steady_clock::now();
    }
    failed_ = true;
  }
  const std::atomic<bool>& flag() const { return failed_; }
  bool failed() const { return failed_; }
  double seconds_since() const {
    const std::lock_guard lock(mutex_);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - when_).count();
  }

  std::string message() const {
    try {
      rethrow();
    } catch (const std::exception& e) {
      return e.what();
    }
  }

  [[noreturn]] void rethrow() const {
    try {
      std::rethrow_exception(error_);
    } catch (const ExecutionError&) {
      throw;
    } catch (const std::runtime_error& e) {
      throw ExecutionError("rank " + std::to_string(rank_) + ": " + e.what());
    }
  }

 private:
  mutable std::mutex mutex_;
  std::atomic<bool> failed_{false};
  int rank_ = -1;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point when_;
};

}  // namespace

MeasuredSteps run_ranks_in_threads(int ranks, const ExecutionOptions& options, const MakeRankThreadRun& make,
                                 const std::string& backend) {
  FirstFailure failure;
  std::barrier together(ranks);
  std::vector<RankSteps> measured(static_cast<std::size_t>(ranks));
  std::string device;
  std::mutex finished_mutex;
  std::condition_variable finished_changed;
  int finished = 0;

  const auto run_rank = [&](int rank) {
    // A failed rank leaves the barrier for good, so the others still meet;
    // they find the flag set when they do.
    const auto meet = [&] {
      together.arrive_and_wait();
      if (failure.failed()) throw ExecutionError("rank " + std::to_string(rank) + ": stopped, another rank failed");
    };
    try {
      const std::unique_ptr<RankThreadRun> run = make(rank, failure.flag());
      meet();
      run->connect();
      if (rank == 0) device = run->device_name();
      measured[static_cast<std::size_t>(rank)] = measure_steps(
          rank, options, meet, [&](bool inject, std::int64_t& origin_ns) { return run->step(inject, origin_ns); });
    } catch (...) {
      failure.record(rank, std::current_exception());
      together.arrive_and_drop();
    }
    const std::lock_guard lock(finished_mutex);
    ++finished;
    finished_changed.notify_all();
  };

  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) threads.emplace_back(run_rank, rank);
  // A thread blocked inside a library call that never watches the flag (an
  // NCCL call waiting for a peer that died before joining it) would hold
  // the join for ever; past the stall timeout after the first failure the
  // process ends instead, as mpirun ends the survivors of a dead rank.
  {
    std::unique_lock lock(finished_mutex);
    while (finished < ranks) {
      finished_changed.wait_for(lock, std::chrono::milliseconds(100));
      if (finished < ranks && failure.failed() && failure.seconds_since() > options.stall_timeout_seconds) {
        std::fprintf(stderr, "%s\n(ranks still blocked %.0f s after it; ending the process)\n", failure.message().c_str(),
                     options.stall_timeout_seconds);
        std::_Exit(3);
      }
    }
  }
  for (std::thread& thread : threads) thread.join();
  if (failure.failed()) failure.rethrow();
  return combine_rank_steps(measured, backend, device);
}

}  // namespace shardsim::calib
