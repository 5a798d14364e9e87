// What the executor backends do around their own run: refuse a request
// that cannot run, and collect what every rank measured into one
// MeasuredRun, over MPI_COMM_WORLD (one process per rank) or from the host
// threads of one process that runs every rank.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::calib {

// std::invalid_argument when the step counts are impossible, the fault
// names no op, or a collective moves more bytes than an MPI/NCCL int count
// holds.
void check_execution_request(const workloads::Program& program, const ExecutionOptions& options);
// std::invalid_argument unless MPI started one process per program rank.
void check_one_process_per_rank(const workloads::Program& program);

// The step reported of several measured ones: the median by step time (the
// lower middle of an even count; the earliest of equal times).
int median_step(const std::vector<double>& step_seconds);

// Collective. `steps`: this rank's timings of each measured step, from that
// step's start; `origins_ns`: each step's start on this host's monotonic
// clock. Step times are the slowest rank's; the median step is reported;
// its timings are gathered at rank 0, shifted onto the earliest rank's start
// when every rank is on one host (one clock).
MeasuredRun gather_measured_steps(const std::vector<std::vector<MeasuredOp>>& steps,
                                  const std::vector<std::int64_t>& origins_ns, std::string backend, std::string device);

// What one rank measured: per measured step, its ops' timings from the
// step's start, and that start on the host's monotonic clock.
struct RankSteps {
  std::vector<std::vector<MeasuredOp>> steps;
  std::vector<std::int64_t> origins_ns;
};

// gather_measured_steps for one process that ran every rank (`ranks[r]` is
// rank r): one host, one clock, so the reported step's timings are put on
// the earliest rank's start.
MeasuredRun combine_rank_steps(const std::vector<RankSteps>& ranks, std::string backend, std::string device);

}  // namespace shardsim::calib
