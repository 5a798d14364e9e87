#include "sim/collectives/selection.h"

#include "topology/base/json_input.h"
#include "workloads/ir/algorithm_support.h"

#include <stdexcept>

namespace shardsim::sim {

namespace {

// Protocols the profile gives for this algorithm (for hierarchical: its
// three ring calls all need the protocol).
std::vector<Protocol> listed_protocols(const calib::Profile& profile, CollectiveOp op, Algorithm algorithm) {
  std::vector<Protocol> listed;
  for (Protocol p : workloads::all_protocols()) {
    const bool present = algorithm == Algorithm::hierarchical
                             ? profile.find(CollectiveOp::reduce_scatter, Algorithm::ring, p) &&
                                   profile.find(CollectiveOp::all_reduce, Algorithm::ring, p) &&
                                   profile.find(CollectiveOp::all_gather, Algorithm::ring, p)
                             : profile.find(op, algorithm, p) != nullptr;
    if (present) listed.push_back(p);
  }
  return listed;
}

}  // namespace

AlgorithmChooser::AlgorithmChooser(const CollectiveContext& context, const CollectiveCall& call,
                                   std::optional<Algorithm> algorithm, std::optional<Protocol> protocol) {
  if (algorithm) {
    const std::string reason = collective_algorithm(*algorithm).unsupported_reason(call.op, context.group);
    if (!reason.empty()) throw std::invalid_argument(reason);
  }
  std::string runnable;  // for the message when the profile lists none of them
  for (Algorithm a : algorithm ? std::vector<Algorithm>{*algorithm} : workloads::nccl_algorithms(call.op)) {
    const auto& implementation = collective_algorithm(a);
    if (!implementation.unsupported_reason(call.op, context.group).empty()) continue;
    runnable += (runnable.empty() ? "" : ", ") + std::string(workloads::to_string(a));
    const std::vector<Protocol> protocols =
        protocol ? std::vector<Protocol>{*protocol} : listed_protocols(context.profile, call.op, a);
    if (algorithm && protocols.empty()) {
      const bool hierarchical = a == Algorithm::hierarchical;
      const bool nvls = a == Algorithm::nvls || a == Algorithm::nvls_tree;
      throw_input_error(context.profile.file,
                        "collectives." + std::string(workloads::to_string(hierarchical ? CollectiveOp::all_reduce : call.op)) +
                            "." + std::string(workloads::to_string(hierarchical ? Algorithm::ring : a)),
                        std::string("missing: the profile has no parameters for this collective and algorithm") +
                            (nvls ? " (NVLS runs on NVLink SHARP, the in-switch reduction of third-generation NVSwitch "
                                    "in H100/H200 nodes; profiles of GPUs without it leave NVLS out)"
                                  : ""));
    }
    for (Protocol p : protocols) {
      candidates_.push_back({a, p, implementation.cost(context, call, p), implementation.tuning_cost(context, call, p)});
    }
  }
  if (candidates_.empty()) {
    throw_input_error(context.profile.file, "collectives." + std::string(workloads::to_string(call.op)),
                      "missing: the profile lists none of the algorithms that run this collective on a group of " +
                          std::to_string(context.group.size()) + " ranks" +
                          (runnable.empty() ? std::string() : " (" + runnable + ")"));
  }
}

const AlgorithmCandidate& AlgorithmChooser::choose(double bytes) const {
  const AlgorithmCandidate* best = &candidates_.front();
  for (const auto& candidate : candidates_) {
    if (candidate.tuning_seconds(bytes) < best->tuning_seconds(bytes)) best = &candidate;
  }
  return *best;
}

}  // namespace shardsim::sim
