// Tree: NCCL's double-binary-tree all-reduce.
//
// Across nodes the buffer is split between the two trees of
// double_binary_tree(); each tree reduces towards its root and broadcasts
// back, pipelined, so every tree edge carries its half once up and once down.
// Inside a node a chain links the channel's GPUs, its head (the GPU at the
// channel's NIC) talking to the network. Each (channel, tree) is one lockstep
// Transfer; the latency is NCCL's: up and down the chain and the tree depth.
#pragma once

#include "sim/collectives/binary_tree.h"
#include "sim/collectives/collective_algorithm.h"

namespace shardsim::sim {

// One channel's tree edges across nodes, each both ways (up, then down),
// between the channel's heads (the GPUs at its NICs) and through its NICs.
std::vector<Hop> tree_edge_hops(const BinaryTree& tree, const std::vector<NodeChannel>& channel);

class TreeAlgorithm final : public CollectiveAlgorithm {
 public:
  Algorithm kind() const override { return Algorithm::tree; }
  TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const override;
  CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                      Protocol protocol) const override;
};

}  // namespace shardsim::sim
