// What both executor backends do around their own run, over
// MPI_COMM_WORLD: refuse a request that cannot run, and collect what every
// rank measured into one MeasuredRun at rank 0.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::calib {

// std::invalid_argument when the world size is not the program's ranks, the
// step counts are impossible, the fault names no op, or a collective moves
// more bytes than an MPI/NCCL int count holds.
void check_execution_request(const workloads::Program& program, const ExecutionOptions& options);

// Collective. `steps`: this rank's timings of each measured step, from that
// step's start; `origins_ns`: each step's start on this host's monotonic
// clock. Step times are the slowest rank's; the median step is reported;
// its timings are gathered at rank 0, shifted onto the earliest rank's start
// when every rank is on one host (one clock).
MeasuredRun gather_measured_steps(const std::vector<std::vector<MeasuredOp>>& steps,
                                  const std::vector<std::int64_t>& origins_ns, std::string backend, std::string device);

}  // namespace shardsim::calib
