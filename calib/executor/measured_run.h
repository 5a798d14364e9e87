// What an executor backend measures when it runs a Program for real: per
// rank and op, when the op began to occupy its stream and when it ended,
// for one representative step, plus every measured step's time. The CLI
// turns it into a Timeline in the simulator's schema (DESIGN.md, "One IR,
// two backends"), so prediction and measurement compare op by op.
#pragma once

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

struct MeasuredRun {
  std::string backend;  // "cpu" or "gpu"
  std::string device;   // what ran it, for reports
  // Every measured step's time (its slowest rank), in order.
  std::vector<double> step_seconds;
  // The step whose op timings are kept: the median by step time.
  int reported_step = 0;
  // [rank][op of the rank's program]; filled on world rank 0 only. When all
  // ranks share a host they share its monotonic clock, and every time is
  // from the earliest rank's step start (shared_clock); across hosts, each rank's times
  // are from its own step start, which a barrier aligns.
  std::vector<std::vector<MeasuredOp>> ops;
  bool shared_clock = false;
};

// A run that cannot go on (a stalled collective, a failed call): the message
// names the op and the ranks.
class ExecutionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardsim::calib
