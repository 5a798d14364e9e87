#include "workloads/ir/algorithm_support.h"

#include <algorithm>
#include <stdexcept>

namespace shardsim::workloads {

namespace {

using Op = CollectiveOp;

}  // namespace

const std::vector<AlgorithmSupport>& algorithm_support() {
  static const std::vector<AlgorithmSupport> table = {
      {Algorithm::ring, {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::broadcast, Op::reduce}, true, true,
       "ring does not implement {op} (use direct)"},
      {Algorithm::tree, {Op::all_reduce}, true, true, "tree only implements all_reduce (as in NCCL)"},
      {Algorithm::nvls, {Op::all_reduce}, true, true,
       "nvls only implements all_reduce: NCCL's NVLS reduce-scatter and all-gather save SMs, not time (nvls.h)"},
      {Algorithm::nvls_tree, {Op::all_reduce}, true, true,
       "nvls_tree only implements all_reduce: NCCL's NVLS reduce-scatter and all-gather save SMs, not time (nvls.h)"},
      {Algorithm::direct, {Op::all_to_all, Op::send_recv, Op::send}, true, true,
       "direct only implements all_to_all, send_recv and send"},
      {Algorithm::hierarchical, {Op::all_reduce}, false, false, "hier only implements all_reduce"},
  };
  return table;
}

namespace {

const AlgorithmSupport& support_of(Algorithm algorithm) {
  for (const auto& entry : algorithm_support()) {
    if (entry.algorithm == algorithm) return entry;
  }
  throw std::logic_error("algorithm_support: an algorithm without an entry");
}

}  // namespace

bool algorithm_runs(Algorithm algorithm, CollectiveOp op) {
  const auto& ops = support_of(algorithm).ops;
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

std::string op_refusal(Algorithm algorithm, CollectiveOp op) {
  if (algorithm_runs(algorithm, op)) return "";
  std::string why(support_of(algorithm).refusal);
  if (const auto at = why.find("{op}"); at != std::string::npos) why.replace(at, 4, to_string(op));
  return why;
}

std::vector<Algorithm> nccl_algorithms(CollectiveOp op) {
  std::vector<Algorithm> algorithms;
  for (const auto& entry : algorithm_support()) {
    if (entry.chosen_by_nccl && algorithm_runs(entry.algorithm, op)) algorithms.push_back(entry.algorithm);
  }
  return algorithms;
}

bool profile_calibrates(CollectiveOp op, Algorithm algorithm) {
  return support_of(algorithm).calibrated && algorithm_runs(algorithm, op);
}

}  // namespace shardsim::workloads
