#include "sim/collectives/group.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

int GroupLayout::max_gpus_per_node() const {
  std::size_t most = 0;
  for (const auto& gpus : gpus_by_node) most = std::max(most, gpus.size());
  return static_cast<int>(most);
}

bool GroupLayout::uniform() const {
  for (const auto& gpus : gpus_by_node) {
    if (gpus.size() != gpus_by_node.front().size()) return false;
  }
  return true;
}

GroupLayout make_group_layout(const Cluster& cluster, std::vector<GpuId> ranks) {
  if (ranks.empty()) throw std::invalid_argument("a group needs at least one GPU");
  std::map<int, std::vector<GpuId>> by_node;
  std::vector<int> node_order;  // as the ranks first reach them
  std::vector<char> seen(static_cast<std::size_t>(cluster.gpu_count()), 0);
  for (GpuId gpu : ranks) {
    if (gpu < 0 || gpu >= cluster.gpu_count()) {
      throw std::invalid_argument("GPU " + std::to_string(gpu) + " is outside the cluster (" +
                                  std::to_string(cluster.gpu_count()) + " GPUs)");
    }
    if (seen[static_cast<std::size_t>(gpu)]++) {
      throw std::invalid_argument("GPU " + std::to_string(gpu) + " appears twice in the group");
    }
    auto& on_node = by_node[cluster.node_of(gpu)];
    if (on_node.empty()) node_order.push_back(cluster.node_of(gpu));
    on_node.push_back(gpu);
  }
  GroupLayout layout;
  layout.ranks = std::move(ranks);
  for (int node : node_order) {
    auto& gpus = by_node[node];
    std::sort(gpus.begin(), gpus.end());
    layout.nodes.push_back(node);
    layout.gpus_by_node.push_back(std::move(gpus));
  }
  layout.channels = build_node_channels(cluster, layout);
  return layout;
}

namespace {

NodeChannel channel_through(const Cluster& cluster, const std::vector<GpuId>& gpus, NicId nic) {
  std::vector<GpuId> attached;
  for (GpuId gpu : gpus) {
    if (cluster.is_attached(gpu, nic)) attached.push_back(gpu);
  }
  const GpuId relay = cluster.relay_gpu(nic);
  const GpuId entry = std::find(attached.begin(), attached.end(), relay) != attached.end() ? relay : attached.front();
  GpuId exit = entry;
  if (attached.size() > 1) {
    const auto at = std::find(attached.begin(), attached.end(), entry);
    exit = (at + 1 == attached.end()) ? attached.front() : *(at + 1);
  }
  NodeChannel channel{nic, {entry}};
  for (GpuId gpu : gpus) {
    if (gpu != entry && gpu != exit) channel.order.push_back(gpu);
  }
  if (exit != entry) channel.order.push_back(exit);
  return channel;
}

}  // namespace

std::vector<std::vector<NodeChannel>> build_node_channels(const Cluster& cluster, const GroupLayout& group) {
  if (group.node_count() == 1) return {{NodeChannel{-1, group.gpus_by_node.front()}}};

  std::vector<std::vector<NicId>> nics_by_node;
  std::size_t channel_count = std::numeric_limits<std::size_t>::max();
  for (const auto& gpus : group.gpus_by_node) {
    std::vector<NicId> nics;
    for (GpuId gpu : gpus) {
      for (NicId nic : cluster.attached_nics(gpu)) nics.push_back(nic);
    }
    std::sort(nics.begin(), nics.end());
    nics.erase(std::unique(nics.begin(), nics.end()), nics.end());
    channel_count = std::min(channel_count, nics.size());
    nics_by_node.push_back(std::move(nics));
  }

  std::vector<std::vector<NodeChannel>> channels(channel_count);
  for (std::size_t c = 0; c < channel_count; ++c) {
    for (std::size_t j = 0; j < group.gpus_by_node.size(); ++j) {
      channels[c].push_back(channel_through(cluster, group.gpus_by_node[j], nics_by_node[j][c]));
    }
  }
  return channels;
}

}  // namespace shardsim::sim
