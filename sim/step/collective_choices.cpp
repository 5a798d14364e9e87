#include "sim/step/collective_choices.h"

namespace shardsim::sim {

CollectiveChoices::CollectiveChoices(const topology::Cluster& cluster, const topology::Router& router,
                                     const calib::Profile& profile)
    : cluster_(cluster), router_(router), profile_(profile) {}

CollectiveChoices::Group& CollectiveChoices::group(const std::vector<topology::GpuId>& gpus,
                                                   const CollectiveCall& call) {
  Group& entry = groups_[{gpus, call.op, call.root}];
  if (!entry.chooser_) {
    entry.owner_ = this;
    entry.call_ = call;
    entry.layout_ = std::make_unique<GroupLayout>(make_group_layout(cluster_, gpus));
    entry.chooser_ = std::make_unique<AlgorithmChooser>(CollectiveContext{cluster_, router_, profile_, *entry.layout_}, call);
  }
  return entry;
}

std::shared_ptr<const TransferPlan> CollectiveChoices::Group::plan(const AlgorithmCandidate& choice) {
  auto& plan = plans_[{choice.algorithm, choice.protocol}];
  if (!plan) {
    const CollectiveContext context{owner_->cluster_, owner_->router_, owner_->profile_, *layout_};
    plan = std::make_shared<const TransferPlan>(collective_algorithm(choice.algorithm).plan(context, call_, choice.protocol));
  }
  return plan;
}

double CollectiveChoices::Group::spine_bytes_per_byte(const AlgorithmCandidate& choice) {
  const auto key = std::pair(choice.algorithm, choice.protocol);
  if (const auto found = spine_.find(key); found != spine_.end()) return found->second;
  double bytes = 0;
  if (layout_->node_count() > 1) {
    for (const Phase& phase : plan(choice)->phases) {
      for (const Transfer& transfer : phase.transfers) {
        for (const LinkUse& use : transfer.links) {
          if (owner_->cluster_.is_leaf_uplink(use.link)) bytes += use.weight * transfer.bytes_per_hop;
        }
      }
    }
  }
  return spine_[key] = bytes;
}

}  // namespace shardsim::sim
