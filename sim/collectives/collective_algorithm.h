// CollectiveAlgorithm: one way of running collectives, behind one interface
// (in the spirit of nccl-tests' testColl table). Each algorithm knows
//   - which collectives it implements and on which groups,
//   - its decomposition into a TransferPlan for the flow network, and
//   - its cost: a closed form over the group's shape and the profile, fast
//     enough for a plan search, and equal to the flow result whenever
//     nothing else competes for the links.
// Both are made per byte of buffer: every byte count in a collective is
// proportional to the buffer size, so one plan or one cost serves every size.
#pragma once

#include "calib/profile.h"
#include "sim/collectives/group.h"
#include "sim/collectives/size_correction.h"
#include "sim/collectives/transfer_plan.h"
#include "topology/routing.h"

#include <optional>
#include <string>

namespace shardsim::sim {

// The buffer a call moves is nccl-tests' "size": all-reduce, broadcast,
// reduce: the buffer; all-gather: the gathered output; reduce-scatter: the
// input being scattered; all-to-all: each rank's send buffer; send/recv: what
// each rank sends.
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::all_reduce;
  int root = 0;  // rank index, for broadcast and reduce
};

// time(bytes) = alpha + beta * bytes.
struct AlphaBeta {
  double alpha_seconds = 0;
  double seconds_per_byte = 0;
  double seconds(double bytes) const { return alpha_seconds + seconds_per_byte * bytes; }
};

// A collective's time as a function of its buffer size: the sum over its
// phases of the largest of the phase's alpha-beta lines. One line is the
// textbook model, and what lockstep channels (rings, trees) give. More appear
// when independent transfers that share a link start at different latencies
// (all-to-all): the link is busy from the first start, so the time is bounded
// by each start latency plus the load of the transfers starting then or later.
// The size correction scales every alpha and the bytes the betas apply to,
// as it does the plan's latencies and link weights.
struct CollectiveCost {
  std::vector<std::vector<AlphaBeta>> phases;
  SizeCorrection size_correction;
  double seconds(double bytes) const;
};

class RingChainCache;

struct CollectiveContext {
  const topology::Cluster& cluster;
  const topology::Router& router;
  const calib::Profile& profile;
  const GroupLayout& group;
  // Optional, for the group above: lets broadcasts and reduces from many
  // roots share one routing of the ring (ring_chain.h).
  RingChainCache* ring_chains = nullptr;
};

class CollectiveAlgorithm {
 public:
  virtual ~CollectiveAlgorithm() = default;

  virtual Algorithm kind() const = 0;
  // Empty when supported; otherwise why not (shown to the user): an op the
  // algorithm does not run (workloads/ir/algorithm_support.h), or a group it
  // cannot run on.
  std::string unsupported_reason(CollectiveOp op, const GroupLayout& group) const;
  // Transfers for one byte of buffer (scale to the buffer when running it).
  virtual TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const = 0;
  virtual CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                              Protocol protocol) const = 0;
  // What NCCL's tuning model predicts, which is what NCCL chooses by
  // (enqueue.cc topoGetAlgoInfo takes the fastest entry of its cost table).
  // Empty when that is cost(): only where the profile models more of the
  // mechanism than the tuning model does (an NVLS chunk pipeline) do the two differ.
  virtual std::optional<CollectiveCost> tuning_cost(const CollectiveContext& /*context*/,
                                                    const CollectiveCall& /*call*/, Protocol /*protocol*/) const {
    return std::nullopt;
  }

 protected:
  // Empty when the algorithm can run `op`, one it runs, on `group`.
  virtual std::string group_refusal(CollectiveOp /*op*/, const GroupLayout& /*group*/) const { return ""; }
};

const CollectiveAlgorithm& collective_algorithm(Algorithm kind);

// The profile's parameters for (op, algorithm, protocol); throws InputError
// naming the profile file and the missing entry.
const calib::ProtocolParams& protocol_params(const calib::Profile& profile, CollectiveOp op, Algorithm algorithm,
                                             Protocol protocol);

// The same, with bandwidth_factor resolved for `group` (the context's, or a
// sub-group of it) on the context's cluster: what a call on that group reaches
// (calib::ProtocolParams::bandwidth_factor_for).
calib::ProtocolParams protocol_params(const CollectiveContext& context, CollectiveOp op, Algorithm algorithm,
                                      Protocol protocol, const GroupLayout& group);

}  // namespace shardsim::sim
