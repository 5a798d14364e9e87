// What an executor backend returns when it runs a Program for real: every
// measured step's time, and one representative step as the Program's
// Timeline (workloads/ir/timeline.h), the type the simulator returns too
// (DESIGN.md, "One IR, two backends"), so prediction and measurement compare
// op by op.
#pragma once

#include "workloads/ir/timeline.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardsim::calib {

struct ExecutionOptions {
  int warmup_steps = 3;
  int measured_steps = 10;
  // A collective in flight, or a rank with nothing able to start, for this
  // long ends the run with the ops it waits on named (a peer died or the
  // program cannot make progress).
  double stall_timeout_seconds = 30;
  // Fault injection, for the tests: when world rank `rank` reaches op `op`
  // in its first measured step, it dies (kill: SIGKILL) or stops issuing
  // anything (hang), like a crashed or stuck process.
  struct Fault {
    enum class Kind { none, kill, hang };
    Kind kind = Kind::none;
    int rank = -1;
    std::uint32_t op = 0;
  };
  Fault fault;
};

struct MeasuredOp {
  double start_seconds = -1;  // issue time for a collective, from the step's start
  double end_seconds = -1;
};

// What both forms of a run below share.
struct MeasuredStepTimes {
  std::string backend;  // "cpu" or "gpu"
  std::string device;   // what ran it, for reports
  // Every measured step's time (its slowest rank), in order.
  std::vector<double> step_seconds;
  // The step whose op timings are kept: the median by step time.
  int reported_step = 0;
  // When all ranks share a host they share its monotonic clock, and every
  // time is from the earliest rank's step start; across hosts, each rank's
  // times are from its own step start, which a barrier aligns.
  bool shared_clock = false;
};

// The ranks' measurements gathered at world rank 0 (measured_steps.h), as
// the backends record them: [rank][op of the rank's program], in seconds.
struct MeasuredSteps : MeasuredStepTimes {
  std::vector<std::vector<MeasuredOp>> ops;
};

// What an executor returns: the reported step as a Timeline of the Program
// (measured_timeline.h), on world rank 0; empty on the other ranks.
struct MeasuredRun : MeasuredStepTimes {
  workloads::Timeline timeline;
};

// A run that cannot go on (a stalled collective, a failed call): the message
// names the op and the ranks.
class ExecutionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardsim::calib
