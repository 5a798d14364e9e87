#include "calib/executor/compute_queue.h"

namespace shardsim::calib {

ComputeQueue::ComputeQueue(std::function<void(const workloads::Op&)> run)
    : run_(std::move(run)), thread_([this] { loop(); }) {}

ComputeQueue::~ComputeQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void ComputeQueue::set_origin(Clock::time_point origin) {
  std::lock_guard lock(mutex_);
  origin_ = origin;
}

void ComputeQueue::enqueue(const workloads::Op& op, std::uint32_t index) {
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(&op, index);
  }
  ++outstanding_;
  wake_.notify_one();
}

std::vector<ComputeQueue::Finished> ComputeQueue::take_finished() {
  std::vector<Finished> taken;
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    taken.swap(finished_);
    error = std::exchange(error_, nullptr);
  }
  outstanding_ -= taken.size();
  if (error) {
    outstanding_ = 0;
    std::rethrow_exception(error);
  }
  return taken;
}

void ComputeQueue::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    if (stopping_) return;
    const auto [op, index] = queue_.front();
    queue_.pop_front();
    const Clock::time_point origin = origin_;
    lock.unlock();
    const Clock::time_point start = Clock::now();
    std::exception_ptr error;
    try {
      run_(*op);
    } catch (...) {
      error = std::current_exception();
    }
    const Clock::time_point end = Clock::now();
    lock.lock();
    if (error) {
      error_ = error;
      queue_.clear();
    } else {
      finished_.push_back({index, {seconds_between(origin, start), seconds_between(origin, end)}});
    }
  }
}

}  // namespace shardsim::calib
