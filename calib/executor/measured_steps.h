// What the executor backends do around their own run: refuse a request
// that cannot run, and collect what every rank measured into one
// MeasuredSteps, over MPI_COMM_WORLD (one process per rank) or from the host
// threads of one process that runs every rank.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"

#include <cstdint>
#include <functional>
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

// What one rank measured: per measured step, its ops' timings from the
// step's start, and that start on the host's monotonic clock.
struct RankSteps {
  std::vector<std::vector<MeasuredOp>> steps;
  std::vector<std::int64_t> origins_ns;
};

// One step of a rank: its ops' timings, and its start in `origin_ns`;
// `inject_fault`: the rank hangs or dies in it as ExecutionOptions::fault says.
using RunStep = std::function<std::vector<MeasuredOp>(bool inject_fault, std::int64_t& origin_ns)>;

// The warm-up and measured steps of `rank`, each after `before_step` (the
// ranks' barrier); the fault goes into the first measured step of its rank.
RankSteps measure_steps(int rank, const ExecutionOptions& options, const std::function<void()>& before_step,
                        const RunStep& step);

// Collective. `mine`: this rank's measure_steps. Step times are the slowest
// rank's; the median step is reported; its timings are gathered at rank 0,
// shifted onto the earliest rank's start when every rank is on one host
// (one clock).
MeasuredSteps gather_measured_steps(const RankSteps& mine, std::string backend, std::string device);

// gather_measured_steps for one process that ran every rank (`ranks[r]` is
// rank r): one host, one clock, so the reported step's timings are put on
// the earliest rank's start.
MeasuredSteps combine_rank_steps(const std::vector<RankSteps>& ranks, std::string backend, std::string device);

}  // namespace shardsim::calib
