#include "sim/collectives/hierarchical.h"

#include "sim/collectives/cost_model.h"
#include "sim/collectives/ring.h"

#include <algorithm>

namespace shardsim::sim {

namespace {

// One phase: a ring collective run on several disjoint sub-groups at once.
struct HierarchicalPhase {
  CollectiveOp op;
  // All of one shape (one node each, or one GPU per node), so the protocol
  // parameters resolved for the first serve them all.
  std::vector<GroupLayout> groups;
  double buffer_fraction;  // each sub-group's buffer, as a fraction of the call's
};

std::vector<HierarchicalPhase> phases(const topology::Cluster& cluster, const GroupLayout& group) {
  const int per_node = group.max_gpus_per_node();
  std::vector<HierarchicalPhase> out;
  if (per_node > 1) {
    std::vector<GroupLayout> nodes;
    for (const auto& gpus : group.gpus_by_node) nodes.push_back(make_group_layout(cluster, gpus));
    out.push_back({CollectiveOp::reduce_scatter, nodes, 1.0});
  }
  if (group.node_count() > 1) {
    std::vector<GroupLayout> rails;
    for (int i = 0; i < per_node; ++i) {
      std::vector<topology::GpuId> gpus;
      for (const auto& on_node : group.gpus_by_node) gpus.push_back(on_node[static_cast<std::size_t>(i)]);
      rails.push_back(make_group_layout(cluster, std::move(gpus)));
    }
    out.push_back({CollectiveOp::all_reduce, rails, 1.0 / per_node});
  }
  if (per_node > 1) out.push_back({CollectiveOp::all_gather, out.front().groups, 1.0});
  return out;
}

}  // namespace

std::string HierarchicalAlgorithm::group_refusal(CollectiveOp, const GroupLayout& group) const {
  if (!group.uniform()) return "hier needs the same number of GPUs on every node";
  return "";
}

TransferPlan HierarchicalAlgorithm::plan(const CollectiveContext& context, const CollectiveCall& call,
                                         Protocol protocol) const {
  TransferPlan plan{call.op, Algorithm::hierarchical, protocol, 0, {}, {}};
  bool first = true;
  for (const auto& phase : phases(context.cluster, context.group)) {
    const calib::ProtocolParams params =
        protocol_params(context, phase.op, Algorithm::ring, protocol, phase.groups.front());
    // The first call's launch is the plan's; later calls launch when the previous one ends.
    const TimePs launch = picoseconds_from_seconds(params.base_latency_seconds);
    if (first) plan.launch_latency = launch;
    Phase out;
    TransferBuilder builder(context.router, params);
    for (const GroupLayout& group : phase.groups) {
      const RingSchedule schedule = ring_schedule(group, {phase.op, 0});
      for (const auto& hops : schedule.channel_hops) {
        std::vector<TimePs> latencies;
        for (const Hop& hop : hops) latencies.push_back(builder.add_hop(hop));
        out.transfers.push_back(builder.take(schedule.bytes_per_hop * phase.buffer_fraction,
                                             schedule.channel_latency(latencies) + (first ? 0 : launch)));
      }
    }
    plan.phases.push_back(std::move(out));
    first = false;
  }
  return plan;
}

CollectiveCost HierarchicalAlgorithm::cost(const CollectiveContext& context, const CollectiveCall&,
                                           Protocol protocol) const {
  CollectiveCost cost;
  for (const auto& phase : phases(context.cluster, context.group)) {
    const calib::ProtocolParams params =
        protocol_params(context, phase.op, Algorithm::ring, protocol, phase.groups.front());
    // The rings of a phase run side by side; as in one ring, the last channel
    // to start sets the pace.
    std::vector<RingSchedule> schedules;
    TimePs start = 0;
    for (const GroupLayout& group : phase.groups) {
      schedules.push_back(ring_schedule(group, {phase.op, 0}));
      for (const auto& hops : schedules.back().channel_hops) {
        std::vector<TimePs> latencies;
        for (const Hop& hop : hops) latencies.push_back(step_latency(context.cluster, params, hop));
        start = std::max(start, schedules.back().channel_latency(latencies));
      }
    }
    LinkLoadCounter load(context.cluster);
    for (const RingSchedule& schedule : schedules) {
      for (const auto& hops : schedule.channel_hops) {
        for (const Hop& hop : hops) load.add(hop, schedule.bytes_per_hop * phase.buffer_fraction, start);
      }
    }
    cost.phases.push_back(with_launch(
        load.cost_lines(effective_speeds(context.cluster, context.profile, params.bandwidth_factor)),
        params.base_latency_seconds));
  }
  return cost;
}

}  // namespace shardsim::sim
