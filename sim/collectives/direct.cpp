#include "sim/collectives/direct.h"

#include "sim/collectives/cost_model.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace shardsim::sim {

namespace {

struct PointToPoint {
  Hop hop;
  double bytes;
};

struct DirectSchedule {
  std::vector<PointToPoint> sends;
  int remote_peers = 0;  // network messages the busiest rank posts
};

// The NIC of `node` on the rail `dst` calls home, and whether the GPU next
// to it (the PXN relay) is part of the group; PXN only relays through members.
struct RailAlignment {
  topology::NicId nic;
  topology::GpuId relay;
  bool relay_in_group;
};

RailAlignment rail_alignment(const topology::Cluster& cluster, const std::vector<char>& in_group, int node,
                             topology::GpuId dst) {
  const topology::NicId nic = cluster.nic_at(node, cluster.rail_of(cluster.home_nic(dst)));
  const topology::GpuId relay = cluster.relay_gpu(nic);
  return {nic, relay, in_group[static_cast<std::size_t>(relay)] != 0};
}

DirectSchedule all_to_all(const topology::Cluster& cluster, const GroupLayout& group) {
  DirectSchedule schedule;
  const double per_peer = 1.0 / group.size();
  std::vector<char> in_group(static_cast<std::size_t>(cluster.gpu_count()), 0);
  for (topology::GpuId gpu : group.ranks) in_group[static_cast<std::size_t>(gpu)] = 1;

  for (std::size_t j = 0; j < group.gpus_by_node.size(); ++j) {
    const auto& local = group.gpus_by_node[j];
    const int node = group.nodes[j];
    schedule.remote_peers = std::max(schedule.remote_peers, group.size() - static_cast<int>(local.size()));
    for (topology::GpuId a : local) {
      for (topology::GpuId b : local) {
        if (a != b) schedule.sends.push_back({{a, b}, per_peer});
      }
    }
    std::map<std::pair<topology::GpuId, topology::GpuId>, double> feeds;  // (sender, relay) -> bytes
    for (std::size_t k = 0; k < group.gpus_by_node.size(); ++k) {
      if (k == j) continue;
      for (topology::GpuId b : group.gpus_by_node[k]) {
        const RailAlignment rail = rail_alignment(cluster, in_group, node, b);
        if (!rail.relay_in_group) {
          for (topology::GpuId a : local) schedule.sends.push_back({{a, b}, per_peer});
          continue;
        }
        schedule.sends.push_back({{rail.relay, b, rail.nic, cluster.home_nic(b)},
                                  per_peer * static_cast<double>(local.size())});
        for (topology::GpuId a : local) {
          if (a != rail.relay && !cluster.is_attached(a, rail.nic)) feeds[{a, rail.relay}] += per_peer;
        }
      }
    }
    for (const auto& [pair, fed] : feeds) schedule.sends.push_back({{pair.first, pair.second}, fed});
  }
  return schedule;
}

// Each (sender, receiver) pair moves the whole buffer, through the PXN relay
// when the receiver's rail NIC on the sender's node serves a group member.
DirectSchedule whole_buffer_sends(const topology::Cluster& cluster, const GroupLayout& group,
                                  const std::vector<std::pair<topology::GpuId, topology::GpuId>>& pairs) {
  DirectSchedule schedule;
  std::vector<char> in_group(static_cast<std::size_t>(cluster.gpu_count()), 0);
  for (topology::GpuId gpu : group.ranks) in_group[static_cast<std::size_t>(gpu)] = 1;
  std::map<topology::GpuId, int> remote_of_sender;
  for (const auto& [a, b] : pairs) {
    Hop hop{a, b};
    if (cluster.node_of(a) != cluster.node_of(b)) {
      schedule.remote_peers = std::max(schedule.remote_peers, ++remote_of_sender[a]);
      const RailAlignment rail = rail_alignment(cluster, in_group, cluster.node_of(a), b);
      if (rail.relay_in_group) hop = {a, b, rail.nic, cluster.home_nic(b)};
    }
    schedule.sends.push_back({hop, 1.0});
  }
  return schedule;
}

// nccl-tests' sendrecv: each rank to the next, around the group.
DirectSchedule send_recv(const topology::Cluster& cluster, const GroupLayout& group) {
  std::vector<std::pair<topology::GpuId, topology::GpuId>> pairs;
  const int n = group.size();
  for (int i = 0; i < n && n > 1; ++i) {
    pairs.emplace_back(group.ranks[static_cast<std::size_t>(i)], group.ranks[static_cast<std::size_t>((i + 1) % n)]);
  }
  return whole_buffer_sends(cluster, group, pairs);
}

// The root to each other member.
DirectSchedule one_way_send(const topology::Cluster& cluster, const GroupLayout& group, int root) {
  std::vector<std::pair<topology::GpuId, topology::GpuId>> pairs;
  const topology::GpuId a = group.ranks[static_cast<std::size_t>(root)];
  for (topology::GpuId b : group.ranks) {
    if (b != a) pairs.emplace_back(a, b);
  }
  return whole_buffer_sends(cluster, group, pairs);
}

DirectSchedule direct_schedule(const CollectiveContext& context, const CollectiveCall& call) {
  switch (call.op) {
    case CollectiveOp::all_to_all: return all_to_all(context.cluster, context.group);
    case CollectiveOp::send: return one_way_send(context.cluster, context.group, call.root);
    default: return send_recv(context.cluster, context.group);
  }
}

TimePs launch_latency(const calib::ProtocolParams& params, const DirectSchedule& schedule) {
  return picoseconds_from_seconds(params.base_latency_seconds +
                                  params.message_overhead_seconds * schedule.remote_peers);
}

}  // namespace

TransferPlan DirectAlgorithm::plan(const CollectiveContext& context, const CollectiveCall& call,
                                   Protocol protocol) const {
  const auto& params = protocol_params(context.profile, call.op, Algorithm::direct, protocol);
  const DirectSchedule schedule = direct_schedule(context, call);
  TransferPlan plan{call.op, Algorithm::direct, protocol, launch_latency(params, schedule), {}, {}};
  if (schedule.sends.empty()) return plan;
  // In a group with as many GPUs on every node, an all-to-all's network
  // sends from one GPU, of one size and one path latency, move as one
  // lockstep transfer: they start together and, the traffic being
  // symmetric, share the GPU's NIC evenly, as their separate flows would
  // under max-min fairness. Across 128 nodes that is a few flows per sending
  // GPU instead of one per remote peer (thousands instead of 130,000). In an
  // irregular group the peers' paths load differently, and lockstep would
  // hold the fast ones back; there, and over NVLink, each send stays a flow.
  std::vector<std::vector<Hop>> transfers;
  std::map<std::tuple<topology::GpuId, double, TimePs>, std::size_t> network_transfer;  // -> index in transfers
  std::vector<double> bytes;
  for (const auto& send : schedule.sends) {
    const bool grouped = call.op == CollectiveOp::all_to_all && context.group.uniform() &&
                         TransferBuilder::crosses_nodes(context.cluster, send.hop);
    if (grouped) {
      const auto [it, added] = network_transfer.try_emplace(
          {send.hop.src, send.bytes, step_latency(context.cluster, params, send.hop)}, transfers.size());
      if (!added) {
        transfers[it->second].push_back(send.hop);
        continue;
      }
    }
    transfers.push_back({send.hop});
    bytes.push_back(send.bytes);
  }
  Phase phase;
  phase.transfers.reserve(transfers.size());
  TransferBuilder builder(context.router, params);
  for (std::size_t t = 0; t < transfers.size(); ++t) {
    TimePs latency = 0;
    // Each hop hashed as when it was a transfer of its own (ECMP hash mode).
    for (const Hop& hop : transfers[t]) latency = std::max(latency, builder.add_hop(hop, 0));
    phase.transfers.push_back(builder.take(bytes[t], latency));
  }
  plan.phases.push_back(std::move(phase));
  return plan;
}

CollectiveCost DirectAlgorithm::cost(const CollectiveContext& context, const CollectiveCall& call,
                                     Protocol protocol) const {
  const auto& params = protocol_params(context.profile, call.op, Algorithm::direct, protocol);
  const DirectSchedule schedule = direct_schedule(context, call);
  LinkLoadCounter load(context.cluster);
  for (const auto& send : schedule.sends) load.add(send.hop, send.bytes, step_latency(context.cluster, params, send.hop));
  return {{with_launch(load.cost_lines(effective_speeds(context.cluster, context.profile, params.bandwidth_factor)),
                       seconds_from_picoseconds(launch_latency(params, schedule)))},
          {}};
}

}  // namespace shardsim::sim
