// Timing a call as the probes do: every rank runs it at once, back to back,
// and a batch takes as long as its slowest rank (what a synchronous training
// step sees of it).
#pragma once

#include "calib/probe/probe_options.h"
#include "topology/base/mpi_world.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace shardsim::calib {

template <typename F>
double seconds_of(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every rank runs `f` at once, back to back in batches of as many calls as
// last options.min_timed_seconds, `repeats` batches after warm-up; a batch
// takes as long as its slowest rank (what a synchronous step sees). The
// median batch's mean call time, on every rank. Every rank makes the same
// number of calls, so `f` may be a collective.
template <typename F>
double time_together(const ProbeOptions& options, F&& f) {
  for (int i = 0; i < options.warmup; ++i) f();
  world_barrier();
  std::vector<double> one{seconds_of(f)};
  world_max(one);
  constexpr double kMostCalls = 1 << 16;
  const auto calls = static_cast<int>(
      std::clamp(std::ceil(options.min_timed_seconds / std::max(one.front(), 1e-9)), 1.0, kMostCalls));
  std::vector<double> samples;
  for (int i = 0; i < options.repeats; ++i) {
    world_barrier();
    std::vector<double> t{seconds_of([&] {
      for (int c = 0; c < calls; ++c) f();
    })};
    world_max(t);
    samples.push_back(t.front() / calls);
  }
  return median_of(samples);
}

}  // namespace shardsim::calib
