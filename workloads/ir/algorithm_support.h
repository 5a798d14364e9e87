// Which algorithm runs which collective: one table, read by calibration
// profiles (which collectives.<op>.<algorithm> entries a profile may hold),
// NCCL's selection (the algorithms it tries for a call, in table order) and
// each algorithm's refusal of a call it cannot run. An algorithm's own
// limits on the group's shape (NVLS inside one node, say) stay with the
// algorithm (sim/collectives/).
#pragma once

#include "workloads/ir/collective_kind.h"

#include <string>
#include <string_view>
#include <vector>

namespace shardsim::workloads {

struct AlgorithmSupport {
  Algorithm algorithm;
  std::vector<CollectiveOp> ops;  // what it runs
  // NCCL picks it by itself. The hierarchical scheme is not NCCL's: a
  // framework composes it from ring calls, and it runs only when asked for.
  bool chosen_by_nccl;
  // A profile holds its own parameters (the hierarchical scheme runs on
  // ring's).
  bool calibrated;
  // Why it refuses an op it does not run; "{op}" stands for that op.
  std::string_view refusal;
};

// Every algorithm, in the order NCCL's selection tries them.
const std::vector<AlgorithmSupport>& algorithm_support();

bool algorithm_runs(Algorithm algorithm, CollectiveOp op);
// Empty when `algorithm` runs `op`; otherwise why not, for the user.
std::string op_refusal(Algorithm algorithm, CollectiveOp op);
// The algorithms NCCL chooses among for `op`, in table order.
std::vector<Algorithm> nccl_algorithms(CollectiveOp op);
// Whether a profile may give parameters for `op` under `algorithm`.
bool profile_calibrates(CollectiveOp op, Algorithm algorithm);

}  // namespace shardsim::workloads
