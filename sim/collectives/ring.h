// Ring: NCCL's ring collectives over the group's channels.
//
// All-reduce is a reduce-scatter followed by an all-gather around the ring:
// 2(n-1) steps, each hop carrying 2(n-1)/n of the buffer in total.
// All-gather and reduce-scatter take n-1 steps and (n-1)/n of the buffer.
// Broadcast and reduce pipeline the whole buffer along the ring as a chain
// from (or to) the root (ring_chain.h). The buffer is split evenly over the
// channels; each channel is one lockstep Transfer.
#pragma once

#include "sim/collectives/collective_algorithm.h"

namespace shardsim::sim {

class RingAlgorithm final : public CollectiveAlgorithm {
 public:
  Algorithm kind() const override { return Algorithm::ring; }
  TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const override;
  CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                      Protocol protocol) const override;
};

// The n hops of one channel's ring, node by node: through each node's GPUs in
// channel order, then from the exit over the channel's NICs to the next
// node's entry (the last node wraps to the first).
std::vector<Hop> ring_hops(const std::vector<NodeChannel>& channel);

// What a ring all-reduce, all-gather or reduce-scatter moves: per channel
// the ring's hops, all with the same bytes, and how many algorithm steps it
// takes.
struct RingSchedule {
  std::vector<std::vector<Hop>> channel_hops;
  double bytes_per_hop = 0;  // per byte of buffer
  int steps = 0;

  // Latency of one channel given the step latency of each of its hops: a ring
  // spreads its steps evenly over its hops.
  TimePs channel_latency(const std::vector<TimePs>& hop_latencies) const;
};

// Throws std::invalid_argument for broadcast, reduce and the ops rings do
// not run.
RingSchedule ring_schedule(const GroupLayout& group, const CollectiveCall& call);

}  // namespace shardsim::sim
