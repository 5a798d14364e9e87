// What the probes and the executors need from MPI_COMM_WORLD: who and where
// the ranks are, and the few calls every rank makes together. A process no
// MPI launcher started may run without MPI at all (one process driving every
// local GPU, as nccl-tests does); then it is a world of one, and the calls
// below are what they would be for one rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace shardsim {

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

}  // namespace shardsim
