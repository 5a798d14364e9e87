// Broadcast and reduce on a ring: NCCL pipelines the whole buffer along the
// ring as a chain from (or to) the root, n-1 hops of the full size, each hop
// one algorithm step paid once. The buffer is split evenly over the channels.
// A chain is its channel's ring less one hop: broadcast leaves out the hop
// into the root, reduce the hop out of it.
//
// Every root's chain crosses the same connections, which NCCL sets up once
// per communicator, so RingChains routes and prices the whole ring once per
// (group, op, protocol) and gives each root's plan and cost by taking that
// root's hops back out. DeepSpeed's ZeRO-1/2 reduces to every rank of a
// data-parallel group in turn: at 1024 GPUs that is 1024 roots, each of
// which would otherwise route and tally 1023 hops per channel.
#pragma once

#include "sim/collectives/collective_algorithm.h"
#include "sim/collectives/cost_model.h"
#include "sim/collectives/transfer_plan.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace shardsim::sim {

inline bool is_chain(CollectiveOp op) { return workloads::is_rooted(op); }

class RingChains {
 public:
  // `op` is broadcast or reduce; throws like protocol_params(). The context's
  // cluster, router, profile and group must outlive this.
  RingChains(const CollectiveContext& context, CollectiveOp op, Protocol protocol);
  RingChains(const RingChains&) = delete;  // builder_ refers to params_
  RingChains& operator=(const RingChains&) = delete;

  // As RingAlgorithm documents them, for the chain from (or to) `root`.
  CollectiveCost cost(int root) const;
  TransferPlan plan(int root) const;

 private:
  struct Channel {
    std::vector<Hop> hops;                    // the whole ring, from ring_hops()
    std::vector<std::size_t> leaving_by_rank;  // index of the hop out of each rank's GPU
    std::vector<TimePs> step_latencies;       // the cost model's, per hop
    TimePs step_latency_sum = 0;
  };
  // The whole ring routed, per channel: what plan() takes hops out of.
  struct RoutedChannel {
    Transfer ring;                       // links of every hop, weights summed
    std::vector<TimePs> hop_latencies;   // TransferBuilder's, per hop
    TimePs latency_sum = 0;
  };

  std::size_t left_out(const Channel& channel, int root) const;
  const std::vector<RoutedChannel>& routed() const;

  CollectiveContext context_;
  CollectiveOp op_;
  Protocol protocol_;
  calib::ProtocolParams params_;  // resolved for the group
  double bytes_per_hop_ = 0;  // per byte of buffer: the buffer split over the channels
  std::vector<Channel> channels_;
  LinkLoadCounter ring_load_;  // every hop of every channel, starting at 0
  // Routing is for plans only, and only the chosen protocol needs them.
  mutable std::unique_ptr<const std::vector<RoutedChannel>> routed_;
  // Reused by every plan(): it holds a tally as large as the cluster's links.
  mutable TransferBuilder builder_;
};

// One group's RingChains by (op, protocol), built on first use. Give it to a
// CollectiveContext to share them across the calls and roots on that group.
class RingChainCache {
 public:
  const RingChains& get(const CollectiveContext& context, CollectiveOp op, Protocol protocol);

 private:
  std::map<std::pair<CollectiveOp, Protocol>, std::unique_ptr<const RingChains>> chains_;
};

// `use(chains)` with the context's cached RingChains, or with ones made for
// this call when the context has no cache.
template <typename F>
auto with_ring_chains(const CollectiveContext& context, CollectiveOp op, Protocol protocol, F&& use) {
  if (context.ring_chains != nullptr) return use(context.ring_chains->get(context, op, protocol));
  return use(RingChains(context, op, protocol));
}

}  // namespace shardsim::sim
