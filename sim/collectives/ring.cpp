#include "sim/collectives/ring.h"

#include "sim/collectives/cost_model.h"
#include "sim/collectives/ring_chain.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

std::vector<Hop> ring_hops(const std::vector<NodeChannel>& channel) {
  std::vector<Hop> hops;
  if (channel.size() == 1) {
    const auto& order = channel.front().order;
    if (order.size() < 2) return hops;
    for (std::size_t i = 0; i < order.size(); ++i) hops.push_back({order[i], order[(i + 1) % order.size()]});
    return hops;
  }
  for (std::size_t j = 0; j < channel.size(); ++j) {
    const auto& here = channel[j];
    const auto& next = channel[(j + 1) % channel.size()];
    for (std::size_t i = 0; i + 1 < here.order.size(); ++i) hops.push_back({here.order[i], here.order[i + 1]});
    hops.push_back({here.order.back(), next.order.front(), here.nic, next.nic});
  }
  return hops;
}

namespace {

// NCCL's tuning model prices a step of a ring that spans nodes at no less
// than the network post overhead, even where the step stays inside a node.
TimePs step_floor(const CollectiveContext& context, const calib::ProtocolParams& params) {
  return context.group.node_count() > 1 ? picoseconds_from_seconds(params.multi_node_step_floor_seconds) : 0;
}

// NCCL's plateau threshold counts bytes per rank and per channel of NCCL's
// communicator; the group's channels (group.h) stand in for those.
SizeCorrection size_correction(const CollectiveContext& context, const calib::ProtocolParams& params) {
  SizeCorrection correction;
  if (context.group.node_count() > 1) {
    const calib::LatencyPlateau& plateau = params.multi_node_plateau;
    correction.latency_factor = plateau.latency_factor;
    correction.latency_factor_from_bytes = plateau.from_bytes_per_rank_and_channel * context.group.size() *
                                           static_cast<double>(context.group.channels.size());
  }
  return correction;
}

}  // namespace

TimePs RingSchedule::channel_latency(const std::vector<TimePs>& hop_latencies) const {
  TimePs total = 0;
  for (TimePs t : hop_latencies) total += t;
  if (hop_latencies.empty()) return total;
  return static_cast<TimePs>(static_cast<double>(total) * steps / static_cast<double>(hop_latencies.size()));
}

RingSchedule ring_schedule(const GroupLayout& group, const CollectiveCall& call) {
  RingSchedule schedule;
  const int n = group.size();
  const double ranks = n;
  double bytes_per_edge = 1.0;  // all channels together, per byte of buffer
  switch (call.op) {
    case CollectiveOp::all_reduce:
      bytes_per_edge *= 2 * (ranks - 1) / ranks;
      schedule.steps = 2 * (n - 1);
      break;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
      bytes_per_edge *= (ranks - 1) / ranks;
      schedule.steps = n - 1;
      break;
    default:
      throw std::invalid_argument("ring_schedule: " + std::string(workloads::to_string(call.op)) +
                                  " is not a ring collective");
  }
  if (n < 2) return schedule;
  for (const auto& channel : group.channels) schedule.channel_hops.push_back(ring_hops(channel));
  schedule.bytes_per_hop = bytes_per_edge / static_cast<double>(schedule.channel_hops.size());
  return schedule;
}

TransferPlan RingAlgorithm::plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const {
  if (is_chain(call.op)) {
    return with_ring_chains(context, call.op, protocol, [&](const RingChains& chains) { return chains.plan(call.root); });
  }
  const calib::ProtocolParams params =
      protocol_params(context, call.op, Algorithm::ring, protocol, context.group);
  TransferPlan plan{call.op, Algorithm::ring, protocol, picoseconds_from_seconds(params.base_latency_seconds), {},
                    size_correction(context, params)};
  const RingSchedule schedule = ring_schedule(context.group, call);
  if (schedule.channel_hops.empty()) return plan;
  Phase phase;
  TransferBuilder builder(context.router, params);
  const TimePs floor = step_floor(context, params);
  for (const auto& hops : schedule.channel_hops) {
    std::vector<TimePs> latencies;
    for (const Hop& hop : hops) latencies.push_back(std::max(builder.add_hop(hop), floor));
    phase.transfers.push_back(builder.take(schedule.bytes_per_hop, schedule.channel_latency(latencies)));
  }
  plan.phases.push_back(std::move(phase));
  return plan;
}

CollectiveCost RingAlgorithm::cost(const CollectiveContext& context, const CollectiveCall& call,
                                   Protocol protocol) const {
  if (is_chain(call.op)) {
    return with_ring_chains(context, call.op, protocol, [&](const RingChains& chains) { return chains.cost(call.root); });
  }
  const calib::ProtocolParams params =
      protocol_params(context, call.op, Algorithm::ring, protocol, context.group);
  const RingSchedule schedule = ring_schedule(context.group, call);
  // Channels advance in lockstep through the links they share: the call ends
  // when the last channel to start has moved its share over the busiest link.
  TimePs start = 0;
  const TimePs floor = step_floor(context, params);
  for (const auto& hops : schedule.channel_hops) {
    std::vector<TimePs> latencies;
    for (const Hop& hop : hops) latencies.push_back(std::max(step_latency(context.cluster, params, hop), floor));
    start = std::max(start, schedule.channel_latency(latencies));
  }
  LinkLoadCounter load(context.cluster);
  for (const auto& hops : schedule.channel_hops) {
    for (const Hop& hop : hops) load.add(hop, schedule.bytes_per_hop, start);
  }
  return {{with_launch(load.cost_lines(effective_speeds(context.cluster, context.profile, params.bandwidth_factor)),
                       params.base_latency_seconds)},
          size_correction(context, params)};
}

}  // namespace shardsim::sim
