#include "sim/collectives/ring_chain.h"

#include "sim/collectives/ring.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

namespace {

// `ring` with the weights of `hop` taken off, both sorted by link. A link
// only the left-out hop crossed comes to exactly zero (x - x) and goes.
std::vector<LinkUse> links_without(const std::vector<LinkUse>& ring, const std::vector<LinkUse>& hop) {
  std::vector<LinkUse> links;
  links.reserve(ring.size());
  auto taken = hop.begin();
  for (const LinkUse& use : ring) {
    while (taken != hop.end() && taken->link < use.link) ++taken;
    if (taken == hop.end() || taken->link != use.link) {
      links.push_back(use);
      continue;
    }
    const double remaining = use.weight - taken->weight;
    if (remaining > 1e-12 * use.weight) links.push_back({use.link, remaining});
  }
  return links;
}

}  // namespace

RingChains::RingChains(const CollectiveContext& context, CollectiveOp op, Protocol protocol)
    : context_(context),
      op_(op),
      protocol_(protocol),
      params_(protocol_params(context, op, Algorithm::ring, protocol, context.group)),
      ring_load_(context.cluster),
      builder_(context.router, params_) {
  if (!is_chain(op)) {
    throw std::invalid_argument("RingChains: " + std::string(workloads::to_string(op)) + " is not broadcast or reduce");
  }
  const GroupLayout& group = context.group;
  if (group.size() < 2) return;
  std::vector<int> rank_of_gpu(static_cast<std::size_t>(context.cluster.gpu_count()), -1);
  for (int r = 0; r < group.size(); ++r) rank_of_gpu[static_cast<std::size_t>(group.ranks[static_cast<std::size_t>(r)])] = r;
  for (const auto& nodes : group.channels) {
    Channel channel;
    channel.hops = ring_hops(nodes);
    channel.leaving_by_rank.resize(channel.hops.size());
    for (std::size_t i = 0; i < channel.hops.size(); ++i) {
      const Hop& hop = channel.hops[i];
      channel.leaving_by_rank[static_cast<std::size_t>(rank_of_gpu[static_cast<std::size_t>(hop.src)])] = i;
      channel.step_latencies.push_back(step_latency(context.cluster, params_, hop));
      channel.step_latency_sum += channel.step_latencies.back();
    }
    channels_.push_back(std::move(channel));
  }
  bytes_per_hop_ = 1.0 / static_cast<double>(channels_.size());
  for (const Channel& channel : channels_) {
    for (const Hop& hop : channel.hops) ring_load_.add(hop, bytes_per_hop_, 0);
  }
}

std::size_t RingChains::left_out(const Channel& channel, int root) const {
  if (root < 0 || root >= context_.group.size()) {
    throw std::invalid_argument("root rank " + std::to_string(root) + " is outside the group of " +
                                std::to_string(context_.group.size()));
  }
  const std::size_t leaving = channel.leaving_by_rank[static_cast<std::size_t>(root)];
  // The ring is a cycle: the hop into a GPU comes just before the one out of it.
  if (op_ == CollectiveOp::reduce) return leaving;
  return (leaving + channel.hops.size() - 1) % channel.hops.size();
}

CollectiveCost RingChains::cost(int root) const {
  // Channels advance in lockstep through the links they share: the call ends
  // when the last channel to start has moved its share over the busiest link.
  TimePs start = 0;
  LinkLoadCounter load = ring_load_;
  for (const Channel& channel : channels_) {
    const std::size_t out = left_out(channel, root);
    start = std::max(start, channel.step_latency_sum - channel.step_latencies[out]);
    load.add(channel.hops[out], -bytes_per_hop_, 0);
  }
  // Every hop starts together, so there is one line, at the chain's latency.
  std::vector<AlphaBeta> lines =
      load.cost_lines(effective_speeds(context_.cluster, context_.profile, params_.bandwidth_factor));
  lines.front().alpha_seconds = seconds_from_picoseconds(start);
  return {{with_launch(std::move(lines), params_.base_latency_seconds)}, {}};
}

const std::vector<RingChains::RoutedChannel>& RingChains::routed() const {
  if (!routed_) {
    auto routed = std::make_unique<std::vector<RoutedChannel>>();
    for (const Channel& channel : channels_) {
      RoutedChannel r;
      // Each hop is routed with its ring position as ECMP flow key, the same
      // key plan() uses to take it back out.
      for (std::size_t i = 0; i < channel.hops.size(); ++i) {
        r.hop_latencies.push_back(builder_.add_hop(channel.hops[i], i));
        r.latency_sum += r.hop_latencies.back();
      }
      r.ring = builder_.take(bytes_per_hop_, 0);
      routed->push_back(std::move(r));
    }
    routed_ = std::move(routed);
  }
  return *routed_;
}

TransferPlan RingChains::plan(int root) const {
  TransferPlan plan{op_, Algorithm::ring, protocol_, picoseconds_from_seconds(params_.base_latency_seconds), {}, {}};
  if (channels_.empty()) return plan;
  const auto& routed = this->routed();
  Phase phase;
  for (std::size_t c = 0; c < channels_.size(); ++c) {
    const std::size_t out = left_out(channels_[c], root);
    builder_.add_hop(channels_[c].hops[out], out);
    const Transfer left = builder_.take(0, 0);
    Transfer transfer;
    transfer.links = links_without(routed[c].ring.links, left.links);
    transfer.bytes_per_hop = bytes_per_hop_;
    transfer.latency = routed[c].latency_sum - routed[c].hop_latencies[out];
    transfer.payload_fraction = routed[c].ring.payload_fraction;
    phase.transfers.push_back(std::move(transfer));
  }
  plan.phases.push_back(std::move(phase));
  return plan;
}

const RingChains& RingChainCache::get(const CollectiveContext& context, CollectiveOp op, Protocol protocol) {
  auto& chains = chains_[{op, protocol}];
  if (!chains) chains = std::make_unique<const RingChains>(context, op, protocol);
  return *chains;
}

}  // namespace shardsim::sim
