#include "sim/step/collective_choices.h"

namespace shardsim::sim {

CollectiveChoices::CollectiveChoices(const topology::Cluster& cluster, const topology::Router& router,
                                     const calib::Profile& profile)
    : cluster_(cluster), router_(router), profile_(profile) {}

CollectiveChoices::Group& CollectiveChoices::group(const std::vector<topology::GpuId>& gpus,
                                                   const CollectiveCall& call) {
  Group& entry = groups_[{gpus, call.op, call.root}];
  if (!entry.chooser_) {
    auto shared = by_gpus_.find(gpus);
    if (shared == by_gpus_.end()) shared = by_gpus_.emplace(gpus, SharedByGpus{make_group_layout(cluster_, gpus), {}}).first;
    entry.owner_ = this;
    entry.call_ = call;
    entry.shared_ = &shared->second;
    entry.chooser_ = std::make_unique<AlgorithmChooser>(entry.context(), call);
  }
  return entry;
}

const GroupLayout& CollectiveChoices::Group::layout() const { return shared_->layout; }

CollectiveContext CollectiveChoices::Group::context() const {
  return {owner_->cluster_, owner_->router_, owner_->profile_, shared_->layout, &shared_->ring_chains};
}

std::shared_ptr<const TransferPlan> CollectiveChoices::Group::plan(const AlgorithmCandidate& choice) {
  const auto build = [&] {
    return std::make_shared<const TransferPlan>(collective_algorithm(choice.algorithm).plan(context(), call_, choice.protocol));
  };
  if (is_chain(call_.op)) return build();
  auto& plan = plans_[{choice.algorithm, choice.protocol}];
  if (!plan) plan = build();
  return plan;
}

double CollectiveChoices::Group::spine_bytes_per_byte(const AlgorithmCandidate& choice) {
  const auto key = std::pair(choice.algorithm, choice.protocol);
  if (const auto found = spine_.find(key); found != spine_.end()) return found->second;
  double bytes = 0;
  if (layout().node_count() > 1) {
    plan(choice)->for_each_link_payload([&](topology::LinkId link, double payload_per_byte) {
      if (owner_->cluster_.is_leaf_uplink(link)) bytes += payload_per_byte;
    });
  }
  return spine_[key] = bytes;
}

}  // namespace shardsim::sim
