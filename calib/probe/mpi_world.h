// What both probes need from MPI_COMM_WORLD: who and where the ranks are,
// and timing a call every rank makes at once.
#pragma once

#include "calib/probe/probe_options.h"

#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

namespace shardsim::calib {

int world_rank();
int world_size();
std::string processor_name();
// "CPU: <model name>, <n> threads", from /proc/cpuinfo.
std::string cpu_description();
// Distinct hosts among the ranks (collective).
int node_count();
// Rank within its host (collective), for picking a GPU.
int local_rank();

template <typename F>
double seconds_of(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every rank runs `f` at once, `repeats` times after warm-up; a repeat takes
// as long as its slowest rank (what a synchronous step sees). The median
// repeat, on every rank.
template <typename F>
double time_together(const ProbeOptions& options, F&& f) {
  for (int i = 0; i < options.warmup; ++i) f();
  std::vector<double> samples;
  for (int i = 0; i < options.repeats; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = seconds_of(f);
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    samples.push_back(t);
  }
  return median_of(samples);
}

}  // namespace shardsim::calib
