// Hierarchical all-reduce: reduce-scatter inside each node over NVLink,
// all-reduce of each 1/g shard across nodes (one ring per local GPU index,
// each over that GPU's own NICs, i.e. per rail), all-gather inside each node.
// Three NCCL calls in sequence, each paying its own launch latency. It is
// not one of NCCL's own algorithms (so `auto` never picks it); training
// systems build it from NCCL calls (MiCS' hierarchical gradient reduction,
// for one), and it is here to be compared with ring and tree.
#pragma once

#include "sim/collectives/collective_algorithm.h"

namespace shardsim::sim {

class HierarchicalAlgorithm final : public CollectiveAlgorithm {
 public:
  Algorithm kind() const override { return Algorithm::hierarchical; }
  TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const override;
  CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                      Protocol protocol) const override;

 protected:
  std::string group_refusal(CollectiveOp op, const GroupLayout& group) const override;
};

}  // namespace shardsim::sim
