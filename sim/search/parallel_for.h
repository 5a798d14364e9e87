// parallel_for: a loop over independent items on a few threads, for the
// search's estimates and simulations (plan_search.h).
//
// Items are handed out in order from a shared counter, so one slow item (a
// deep pipeline's program) does not hold up the rest. Each call must write
// only what belongs to its item; the results are then the same for any
// number of threads. A call that throws stops the hand-out, and once every
// thread has stopped the exception of the lowest item is rethrown, the one
// a plain loop would have met first.
#pragma once

#include <cstddef>
#include <functional>

namespace shardsim::sim {

// Calls work(worker, item) for item in [0, count), worker in [0, threads)
// naming the calling thread (for per-thread state). threads <= 1, or one
// item, runs on the calling thread alone.
void parallel_for(std::size_t count, int threads, const std::function<void(int worker, std::size_t item)>& work);

// The CPUs this process may run on: its affinity mask, capped by its
// container's CPU quota (cgroups); at least 1.
int available_cpus();

}  // namespace shardsim::sim
