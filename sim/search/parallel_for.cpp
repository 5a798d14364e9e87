#include "sim/search/parallel_for.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardsim::sim {

void parallel_for(std::size_t count, int threads, const std::function<void(int worker, std::size_t item)>& work) {
  const auto workers = static_cast<int>(std::min<std::size_t>(count, static_cast<std::size_t>(std::max(threads, 1))));
  if (workers <= 1) {
    for (std::size_t item = 0; item < count; ++item) work(0, item);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex failure_mutex;
  std::size_t failed_item = std::numeric_limits<std::size_t>::max();
  std::exception_ptr failure;
  auto loop = [&](int worker) {
    while (!failed.load(std::memory_order_relaxed)) {
      const std::size_t item = next.fetch_add(1);
      if (item >= count) return;
      try {
        work(worker, item);
      } catch (...) {
        const std::lock_guard lock(failure_mutex);
        if (item < failed_item) {
          failed_item = item;
          failure = std::current_exception();
        }
        failed = true;
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    pool.reserve(static_cast<std::size_t>(workers - 1));
    for (int worker = 1; worker < workers; ++worker) pool.emplace_back(loop, worker);
    loop(0);
  }  // joined here
  if (failure) std::rethrow_exception(failure);
}

namespace {

// The CPUs a container's CPU quota allows (cgroup v2 cpu.max, else v1's
// cfs quota and period, at the container's cgroup root), rounded up; 0 when
// there is no quota. A container given 2 CPUs of a 64-core host still sees
// all 64 in its affinity mask.
int cpu_quota() {
  double quota = -1, period = 0;
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2) {
    std::string limit;
    if (v2 >> limit >> period && limit != "max") quota = std::strtod(limit.c_str(), nullptr);
  } else {
    std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    if (!(q >> quota) || !(p >> period)) quota = -1;
  }
  if (quota <= 0 || period <= 0) return 0;
  return std::max(static_cast<int>(std::ceil(quota / period)), 1);
}

}  // namespace

int available_cpus() {
  int cpus = static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(CPU_COUNT(&set), 1);
  const int quota = cpu_quota();
  return quota > 0 ? std::min(cpus, quota) : cpus;
}

}  // namespace shardsim::sim
