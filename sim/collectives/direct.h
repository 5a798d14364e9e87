// Direct: point-to-point collectives, all-to-all and send/recv, as NCCL runs
// them with grouped sends and receives.
//
// All-to-all: every rank sends S/n to every other rank. Inside a node over
// NVLink. Across nodes NCCL uses PXN: data for a remote GPU on rail r leaves
// through this node's rail-r NIC, handed over NVLink to the GPU next to that
// NIC, so the fabric only carries rail-aligned traffic. The node's GPUs that
// send to the same remote GPU are one network transfer from that relay GPU,
// fed by NVLink transfers (one per sender and relay). Every rank posts one
// network message per remote peer, at the profile's message overhead each.
//
// Send/recv (the nccl-tests pattern): rank i sends S to rank i+1 (mod n),
// rail-aligned in the same way.
#pragma once

#include "sim/collectives/collective_algorithm.h"

namespace shardsim::sim {

class DirectAlgorithm final : public CollectiveAlgorithm {
 public:
  Algorithm kind() const override { return Algorithm::direct; }
  TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const override;
  CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                      Protocol protocol) const override;
};

}  // namespace shardsim::sim
