#include "sim/collectives/collective_algorithm.h"

#include "sim/collectives/cost_model.h"
#include "sim/collectives/direct.h"
#include "sim/collectives/hierarchical.h"
#include "sim/collectives/nvls.h"
#include "sim/collectives/ring.h"
#include "sim/collectives/tree.h"
#include "topology/base/json_input.h"
#include "workloads/ir/algorithm_support.h"

#include <algorithm>
#include <stdexcept>

namespace shardsim::sim {

std::string CollectiveAlgorithm::unsupported_reason(CollectiveOp op, const GroupLayout& group) const {
  if (std::string why = workloads::op_refusal(kind(), op); !why.empty()) return why;
  return group_refusal(op, group);
}

double CollectiveCost::seconds(double bytes) const {
  const double latency_factor = size_correction.latency_factor_at(bytes);
  const double wire_bytes = size_correction.wire_scale(bytes);
  double total = 0;
  for (const auto& lines : phases) {
    double longest = 0;
    for (const AlphaBeta& line : lines) {
      longest = std::max(longest, line.alpha_seconds * latency_factor + line.seconds_per_byte * wire_bytes);
    }
    total += longest;
  }
  return total + size_correction.added_seconds(bytes);
}

const CollectiveAlgorithm& collective_algorithm(Algorithm kind) {
  static const RingAlgorithm ring;
  static const TreeAlgorithm tree;
  static const HierarchicalAlgorithm hierarchical;
  static const DirectAlgorithm direct;
  static const NvlsAlgorithm nvls;
  static const NvlsTreeAlgorithm nvls_tree;
  switch (kind) {
    case Algorithm::ring: return ring;
    case Algorithm::tree: return tree;
    case Algorithm::hierarchical: return hierarchical;
    case Algorithm::direct: return direct;
    case Algorithm::nvls: return nvls;
    case Algorithm::nvls_tree: return nvls_tree;
  }
  throw std::logic_error("unknown algorithm");
}

const calib::ProtocolParams& protocol_params(const calib::Profile& profile, CollectiveOp op, Algorithm algorithm,
                                             Protocol protocol) {
  if (const calib::ProtocolParams* params = profile.find(op, algorithm, protocol)) return *params;
  throw_input_error(profile.file, "collectives." + std::string(workloads::to_string(op)) + "." +
                                      std::string(workloads::to_string(algorithm)) + "." +
                                      std::string(workloads::to_string(protocol)),
                    "missing: the profile has no parameters for this collective, algorithm and protocol");
}

calib::ProtocolParams protocol_params(const CollectiveContext& context, CollectiveOp op, Algorithm algorithm,
                                      Protocol protocol, const GroupLayout& group) {
  calib::ProtocolParams params = protocol_params(context.profile, op, algorithm, protocol);
  // Every NIC of a cluster has the node's speed; at factor 1, what the profile's network reaches on it.
  const double nic_bytes_per_second = effective_speeds(context.cluster, context.profile, 1.0).nic;
  params.bandwidth_factor = params.bandwidth_factor_for(group.size(), group.node_count(), nic_bytes_per_second);
  return params;
}

}  // namespace shardsim::sim
