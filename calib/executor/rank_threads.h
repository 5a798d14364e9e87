// run_ranks_in_threads: one process runs every rank of a Program, one host
// thread per rank, each driving its own device, with no MPI (nccl-tests'
// single-process mode; `shardsim exec` on one machine's GPUs without
// mpirun). What MPI and its launcher give the one-process-per-rank mode,
// this gives the threads:
//   - a rank's local setup (buffers, GEMM plans) finishes on every rank
//     before any of them enters the collective setup (NCCL communicators),
//     so a rank that fails alone cannot leave the others waiting there;
//   - the steps start together, as MPI_Barrier starts them;
//   - the first rank to fail sets a flag that every rank's waits watch, as
//     a process watches for mpirun's SIGTERM, and its error is the run's;
//   - a rank still blocked the stall timeout after that failure (inside a
//     call that cannot watch the flag) ends the process with exit code 3
//     and that error, as mpirun ends the survivors of a dead rank.
#pragma once

#include "calib/executor/measured_run.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace shardsim::calib {

// One rank, as its thread drives it.
class RankThreadRun {
 public:
  virtual ~RankThreadRun() = default;
  // The setup the ranks do together (communicators), after each rank's own.
  virtual void connect() = 0;
  // One step from its start; `origin_ns` is that start on the host's
  // monotonic clock. `inject_fault`: this rank hangs or dies in this step as
  // ExecutionOptions::fault says.
  virtual std::vector<MeasuredOp> step(bool inject_fault, std::int64_t& origin_ns) = 0;
  virtual std::string device_name() const = 0;
};

// Makes rank `rank`'s run (its own setup); `peer_failed` turns true when
// another rank has failed, and the run's waits end on it.
using MakeRankThreadRun = std::function<std::unique_ptr<RankThreadRun>(int rank, const std::atomic<bool>& peer_failed)>;

// Warm-up and measured steps of `ranks` ranks, combined as
// combine_rank_steps does. The first rank's failure is rethrown once every
// thread has ended: ExecutionError as it is, another runtime_error as an
// ExecutionError naming the rank, anything else unchanged.
MeasuredSteps run_ranks_in_threads(int ranks, const ExecutionOptions& options, const MakeRankThreadRun& make,
                                 const std::string& backend);

}  // namespace shardsim::calib
