// ComputeQueue: the CPU backend's stand-in for a GPU's in-order stream. One
// thread runs the ops the rank's main thread enqueued, in the order they
// were enqueued, as a GPU runs the kernels its host enqueued ahead of it.
//
// The main thread enqueues an op as soon as each of its dependencies has
// ended or is ahead of it in the queue, so kernels that follow one another
// run back to back. Were each kernel started only once the main thread saw
// its predecessor end, every kernel would wait for that thread to be
// scheduled, which on a host with more threads than cores (4 ranks on 2
// cores in CI) takes milliseconds. No such gap exists on a GPU, and the
// simulator has none either.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace shardsim::calib {

class ComputeQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Finished = std::pair<std::uint32_t, MeasuredOp>;  // op index, its start and end

  // `run(op)` does an op's work on the queue's thread: a kernel, or the
  // allocation or free of a memory op.
  explicit ComputeQueue(std::function<void(const workloads::Op&)> run);
  ~ComputeQueue();
  ComputeQueue(const ComputeQueue&) = delete;
  ComputeQueue& operator=(const ComputeQueue&) = delete;

  // Times are measured from `origin`. Called with nothing queued.
  void set_origin(Clock::time_point origin);

  // Called by one thread (the main thread), as is take_finished.
  void enqueue(const workloads::Op& op, std::uint32_t index);

  // The ops that ended since the last call, in queue order. Rethrows what
  // `run` threw; the ops queued behind the one that threw are dropped.
  std::vector<Finished> take_finished();

  // Nothing queued or running.
  bool idle() const { return outstanding_ == 0; }

 private:
  void loop();

  std::function<void(const workloads::Op&)> run_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::pair<const workloads::Op*, std::uint32_t>> queue_;
  std::vector<Finished> finished_;
  std::exception_ptr error_;
  bool stopping_ = false;
  Clock::time_point origin_;
  std::size_t outstanding_ = 0;  // enqueued, not yet taken; the enqueuing thread's
  std::thread thread_;           // last: starts once everything above exists
};

// Seconds from `from` to `to` on the queue's clock.
inline double seconds_between(ComputeQueue::Clock::time_point from, ComputeQueue::Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace shardsim::calib
