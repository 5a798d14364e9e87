// What the probes and the executor need from MPI_COMM_WORLD: who and where
// the ranks are, and the few calls every rank makes together. A process no
// MPI launcher started may run without MPI at all (one process driving every
// local GPU, as nccl-tests does); then it is a world of one, and the calls
// below are what they would be for one rank.
#pragma once

#include "calib/probe/probe_options.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::calib {

// MPI_Init has run and MPI_Finalize has not.
bool mpi_running();

int world_rank();
int world_size();
std::string processor_name();
// "CPU: <model name>, <n> threads", from /proc/cpuinfo.
std::string cpu_description();
// Distinct hosts among the ranks (collective).
int node_count();
// Rank within its host (collective), for picking a GPU.
int local_rank();

// Collective; nothing to do in a world of one.
void world_barrier();
// Element-wise maximum of `values` over the ranks, in place on every rank.
void world_max(std::vector<double>& values);
// Minimum of `value` over the ranks, on every rank.
std::int64_t world_min(std::int64_t value);
// Rank 0's `bytes` bytes at `data`, on every rank.
void world_broadcast(void* data, int bytes);

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
