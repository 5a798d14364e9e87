#include "sim/collectives/tree.h"

#include "sim/collectives/cost_model.h"

#include <algorithm>

namespace shardsim::sim {

namespace {

struct TreeTransfer {
  std::vector<Hop> hops;
  int chain_hops = 0;  // longest chain inside a node
  int depth = 0;       // tree depth across nodes
};

// The hops of every (channel, tree) pair.
std::vector<TreeTransfer> tree_transfers(const CollectiveContext& context) {
  const auto& channels = context.group.channels;
  const int nodes = context.group.node_count();
  const auto [tree_a, tree_b] = double_binary_tree(nodes);
  std::vector<TreeTransfer> out;
  for (const auto& channel : channels) {
    for (const BinaryTree* tree : {&tree_a, &tree_b}) {
      TreeTransfer transfer;
      transfer.depth = tree->depth();
      for (const NodeChannel& node : channel) {
        const auto& order = node.order;
        transfer.chain_hops = std::max(transfer.chain_hops, static_cast<int>(order.size()) - 1);
        for (std::size_t i = 0; i + 1 < order.size(); ++i) {
          transfer.hops.push_back({order[i + 1], order[i]});  // reduce towards the head
          transfer.hops.push_back({order[i], order[i + 1]});  // broadcast back
        }
      }
      const auto edges = tree_edge_hops(*tree, channel);
      transfer.hops.insert(transfer.hops.end(), edges.begin(), edges.end());
      out.push_back(std::move(transfer));
    }
  }
  return out;
}

SizeCorrection size_correction(const calib::ProtocolParams& params) {
  SizeCorrection correction;
  correction.bandwidth = params.bandwidth_correction;
  return correction;
}

// Up and down: the chain inside a node and the tree across nodes, each step
// at the mean latency of its kind of hop. `hop_latencies` follows transfer.hops.
TimePs tree_latency(const TreeTransfer& transfer, const topology::Cluster& cluster,
                    const std::vector<TimePs>& hop_latencies) {
  TimePs intra = 0, inter = 0;
  int intra_count = 0, inter_count = 0;
  for (std::size_t i = 0; i < transfer.hops.size(); ++i) {
    const TimePs t = hop_latencies[i];
    if (TransferBuilder::crosses_nodes(cluster, transfer.hops[i])) {
      inter += t;
      ++inter_count;
    } else {
      intra += t;
      ++intra_count;
    }
  }
  const double intra_step = intra_count ? static_cast<double>(intra) / intra_count : 0.0;
  const double inter_step = inter_count ? static_cast<double>(inter) / inter_count : 0.0;
  return static_cast<TimePs>(2.0 * (transfer.chain_hops * intra_step + transfer.depth * inter_step));
}

}  // namespace

std::vector<Hop> tree_edge_hops(const BinaryTree& tree, const std::vector<NodeChannel>& channel) {
  std::vector<Hop> hops;
  for (std::size_t p = 0; p < channel.size(); ++p) {
    const int q = tree.parent[p];
    if (q < 0) continue;
    const NodeChannel& child = channel[p];
    const NodeChannel& parent = channel[static_cast<std::size_t>(q)];
    hops.push_back({child.order.front(), parent.order.front(), child.nic, parent.nic});
    hops.push_back({parent.order.front(), child.order.front(), parent.nic, child.nic});
  }
  return hops;
}

TransferPlan TreeAlgorithm::plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const {
  const calib::ProtocolParams params =
      protocol_params(context, call.op, Algorithm::tree, protocol, context.group);
  TransferPlan plan{call.op, Algorithm::tree, protocol, picoseconds_from_seconds(params.base_latency_seconds), {},
                    size_correction(params)};
  if (context.group.size() < 2) return plan;
  const auto transfers = tree_transfers(context);
  // Two trees per channel, each with half of the channel's share.
  const double bytes_per_hop = 1.0 / static_cast<double>(transfers.size());

  Phase phase;
  TransferBuilder builder(context.router, params);
  for (const TreeTransfer& transfer : transfers) {
    std::vector<TimePs> latencies;
    for (const Hop& hop : transfer.hops) latencies.push_back(builder.add_hop(hop));
    phase.transfers.push_back(builder.take(bytes_per_hop, tree_latency(transfer, context.cluster, latencies)));
  }
  plan.phases.push_back(std::move(phase));
  return plan;
}

CollectiveCost TreeAlgorithm::cost(const CollectiveContext& context, const CollectiveCall& call,
                                   Protocol protocol) const {
  const calib::ProtocolParams params =
      protocol_params(context, call.op, Algorithm::tree, protocol, context.group);
  if (context.group.size() < 2) return {{{AlphaBeta{params.base_latency_seconds, 0}}}, {}};
  const auto transfers = tree_transfers(context);
  const double bytes_per_hop = 1.0 / static_cast<double>(transfers.size());
  // As for rings: the (channel, tree) transfers move in lockstep, so the last
  // to start sets the pace.
  TimePs start = 0;
  for (const TreeTransfer& transfer : transfers) {
    std::vector<TimePs> latencies;
    for (const Hop& hop : transfer.hops) latencies.push_back(step_latency(context.cluster, params, hop));
    start = std::max(start, tree_latency(transfer, context.cluster, latencies));
  }
  LinkLoadCounter load(context.cluster);
  for (const TreeTransfer& transfer : transfers) {
    for (const Hop& hop : transfer.hops) load.add(hop, bytes_per_hop, start);
  }
  const EffectiveSpeeds speeds = effective_speeds(context.cluster, context.profile, params.bandwidth_factor);
  return {{with_launch(load.cost_lines(speeds), params.base_latency_seconds)}, size_correction(params)};
}

}  // namespace shardsim::sim
