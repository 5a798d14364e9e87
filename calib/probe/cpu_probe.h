// The CPU probe: what the CPU backend of the executor runs on, measured the
// way the GPU probe measures a GPU, so the calibrate -> simulate -> execute
// loop also runs where there is no GPU (and in CI).
//   GEMMs     Eigen, fp32 and fp64, single-threaded per rank, every rank at
//             once (as the executor runs them);
//   copies    memcpy between two host buffers (host_copy);
//   MPI       the collectives of nccl-tests on MPI_COMM_WORLD, sizes in
//             nccl-tests' convention, the time of the slowest rank;
//   interference  a GEMM alone and while a communication thread runs an
//             all-reduce loop beside it.
// Collective calls: every rank must call run_cpu_probe with the same sizes.
#pragma once

#include "calib/measurements.h"
#include "calib/probe/probe_options.h"

namespace shardsim::calib {

// Needs MPI initialised with at least MPI_THREAD_SERIALIZED for the
// interference part (skipped otherwise). Results are complete on rank 0.
Measurements run_cpu_probe(const ProbeOptions& options);

}  // namespace shardsim::calib
