// CollectiveChoices: for calls on one set of GPUs, NCCL's choice of algorithm
// and protocol (selection.h), the transfer plans the choices need, and how
// many bytes each plan sends across the spine. Built on first use and kept,
// keyed by the GPUs and the call: a search that compiles hundreds of plans
// over the same groups builds each choice once. The layout (with its
// channels) is one per set of GPUs, shared by every kind and root of call:
// ZeRO-1/2 reduces to each of a group's ranks in turn.
#pragma once

#include "calib/profile.h"
#include "sim/collectives/group.h"
#include "sim/collectives/ring_chain.h"
#include "sim/collectives/selection.h"
#include "sim/collectives/transfer_plan.h"
#include "topology/cluster.h"
#include "topology/routing.h"

#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace shardsim::sim {

class CollectiveChoices {
 private:
  struct SharedByGpus;

 public:
  CollectiveChoices(const topology::Cluster& cluster, const topology::Router& router, const calib::Profile& profile);

  // Calls of one kind (and root) on one group of GPUs, in rank order.
  class Group {
   public:
    const GroupLayout& layout() const;
    const AlgorithmCandidate& choose(double bytes) const { return chooser_->choose(bytes); }
    // Kept, except a broadcast's or reduce's: a group has one per root, and
    // they come cheaply from the ring's routes (ring_chain.h).
    std::shared_ptr<const TransferPlan> plan(const AlgorithmCandidate& choice);
    // Bytes crossing the spine (leaf uplinks) per byte of the call's buffer.
    double spine_bytes_per_byte(const AlgorithmCandidate& choice);

   private:
    friend class CollectiveChoices;
    const CollectiveChoices* owner_ = nullptr;
    CollectiveContext context() const;

    CollectiveCall call_;
    SharedByGpus* shared_ = nullptr;
    std::unique_ptr<AlgorithmChooser> chooser_;
    std::map<std::pair<Algorithm, Protocol>, std::shared_ptr<const TransferPlan>> plans_;
    std::map<std::pair<Algorithm, Protocol>, double> spine_;
  };

  // Throws like make_group_layout() and AlgorithmChooser.
  Group& group(const std::vector<topology::GpuId>& gpus, const CollectiveCall& call);

 private:
  const topology::Cluster& cluster_;
  const topology::Router& router_;
  const calib::Profile& profile_;
  // What every kind and root of call on one set of GPUs shares. Groups
  // point into the map, whose entries never move.
  struct SharedByGpus {
    GroupLayout layout;
    RingChainCache ring_chains;
  };
  std::map<std::vector<topology::GpuId>, SharedByGpus> by_gpus_;
  std::map<std::tuple<std::vector<topology::GpuId>, CollectiveOp, int>, Group> groups_;
};

}  // namespace shardsim::sim
