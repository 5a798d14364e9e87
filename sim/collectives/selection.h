// Picking an algorithm and protocol for a collective call, as NCCL does.
//
// NCCL predicts every (algorithm, protocol) pair it can run with its
// alpha-beta tuning model and takes the fastest for the message size.
// shardsim does the same with the algorithms' tuning costs (their own costs
// where the profile models nothing the tuning model lacks) and the
// protocols the profile lists: ring, tree, nvls and nvls_tree for
// all-reduce (each where the profile has it), ring for the other reductions
// and broadcasts, direct for all-to-all and send/recv. The
// hierarchical scheme is not an NCCL algorithm, so only an explicit request
// picks it. A pinned algorithm or protocol is honoured or refused with the
// reason.
#pragma once

#include "sim/collectives/collective_algorithm.h"

#include <optional>
#include <vector>

namespace shardsim::sim {

struct AlgorithmCandidate {
  Algorithm algorithm = Algorithm::ring;
  Protocol protocol = Protocol::simple;
  CollectiveCost cost;                  // what the call takes
  std::optional<CollectiveCost> tuning;  // what NCCL's tuning model says, where not `cost`

  // NCCL chooses by its tuning model's time.
  double tuning_seconds(double bytes) const { return (tuning ? *tuning : cost).seconds(bytes); }
};

class AlgorithmChooser {
 public:
  // Throws std::invalid_argument when the pinned algorithm cannot run the
  // call on this group, and InputError when the profile lacks what is needed.
  AlgorithmChooser(const CollectiveContext& context, const CollectiveCall& call,
                   std::optional<Algorithm> algorithm = std::nullopt, std::optional<Protocol> protocol = std::nullopt);

  // The candidate NCCL's tuning model finds fastest for a buffer of `bytes`
  // (first listed on a tie).
  const AlgorithmCandidate& choose(double bytes) const;
  const std::vector<AlgorithmCandidate>& candidates() const { return candidates_; }

 private:
  std::vector<AlgorithmCandidate> candidates_;
};

}  // namespace shardsim::sim
