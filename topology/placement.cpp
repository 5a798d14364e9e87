#include "topology/placement.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace shardsim::topology {

PlacementPolicy parse_placement_policy(const std::string& name) {
  if (name == "consecutive") return PlacementPolicy::consecutive;
  if (name == "leaf-aware") return PlacementPolicy::leaf_aware;
  if (name == "scattered") return PlacementPolicy::scattered;
  throw std::invalid_argument("unknown placement '" + name + "' (consecutive, leaf-aware or scattered)");
}

std::string_view to_string(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::consecutive: return "consecutive";
    case PlacementPolicy::leaf_aware: return "leaf-aware";
    case PlacementPolicy::scattered: return "scattered";
  }
  return "?";
}

int leaf_block_of_node(const Cluster& cluster, int node) { return node / cluster.spec().fabric.nodes_per_leaf; }

namespace {

// Free nodes of every leaf block, lowest first.
std::vector<std::vector<int>> free_nodes_by_block(const Cluster& cluster) {
  std::vector<std::vector<int>> blocks;
  for (int node = 0; node < cluster.nodes(); ++node) {
    const auto block = static_cast<std::size_t>(leaf_block_of_node(cluster, node));
    if (blocks.size() <= block) blocks.resize(block + 1);
    blocks[block].push_back(node);
  }
  return blocks;
}

// Takes `count` nodes for one group from as few blocks as possible: the
// tightest block that holds the whole group, else the fullest blocks first.
std::vector<int> take_group_nodes(std::vector<std::vector<int>>& blocks, int count) {
  std::vector<int> taken;
  while (count > 0) {
    std::size_t best = blocks.size();
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const auto free = static_cast<int>(blocks[b].size());
      if (free >= count && (best == blocks.size() || free < static_cast<int>(blocks[best].size()))) best = b;
    }
    if (best == blocks.size()) {
      best = 0;
      for (std::size_t b = 1; b < blocks.size(); ++b) {
        if (blocks[b].size() > blocks[best].size()) best = b;
      }
    }
    auto& free = blocks[best];
    const auto take = std::min(count, static_cast<int>(free.size()));
    taken.insert(taken.end(), free.begin(), free.begin() + take);
    free.erase(free.begin(), free.begin() + take);
    count -= take;
  }
  return taken;
}

std::vector<int> job_nodes(const Cluster& cluster, int nodes, PlacementPolicy policy, int group_nodes) {
  std::vector<int> chosen;
  switch (policy) {
    case PlacementPolicy::consecutive:
      for (int j = 0; j < nodes; ++j) chosen.push_back(j);
      break;
    case PlacementPolicy::leaf_aware: {
      auto blocks = free_nodes_by_block(cluster);
      const int per_group = std::max(group_nodes, 1);
      for (int placed = 0; placed < nodes; placed += per_group) {
        const auto group = take_group_nodes(blocks, std::min(per_group, nodes - placed));
        chosen.insert(chosen.end(), group.begin(), group.end());
      }
      break;
    }
    case PlacementPolicy::scattered: {
      const auto blocks = free_nodes_by_block(cluster);
      for (std::size_t position = 0; static_cast<int>(chosen.size()) < nodes; ++position) {
        for (const auto& block : blocks) {
          if (position < block.size() && static_cast<int>(chosen.size()) < nodes) chosen.push_back(block[position]);
        }
      }
      break;
    }
  }
  return chosen;
}

}  // namespace

Placement place_ranks(const Cluster& cluster, int ranks, PlacementPolicy policy, int group_ranks) {
  const int per_node = cluster.gpus_per_node();
  if (ranks < 1 || ranks > cluster.gpu_count()) {
    throw std::invalid_argument(std::to_string(ranks) + " GPUs: cluster " + cluster.spec().name + " has 1 to " +
                                std::to_string(cluster.gpu_count()) + " GPUs");
  }
  if (ranks > per_node && ranks % per_node != 0) {
    throw std::invalid_argument(std::to_string(ranks) + " GPUs: a job larger than one node takes whole nodes of " +
                                std::to_string(per_node) + " GPUs");
  }
  Placement placement;
  placement.policy = policy;
  if (ranks <= per_node) {
    for (int r = 0; r < ranks; ++r) placement.gpu_of_rank.push_back(r);
    return placement;
  }
  const auto nodes = job_nodes(cluster, ranks / per_node, policy, group_ranks / per_node);
  for (int r = 0; r < ranks; ++r) {
    placement.gpu_of_rank.push_back(cluster.gpu_at(nodes[static_cast<std::size_t>(r / per_node)], r % per_node));
  }
  return placement;
}

int leaf_blocks_spanned(const Cluster& cluster, const Placement& placement, const std::vector<int>& ranks) {
  std::set<int> blocks;
  for (int rank : ranks) {
    blocks.insert(leaf_block_of_node(cluster, cluster.node_of(placement.gpu_of_rank.at(static_cast<std::size_t>(rank)))));
  }
  return static_cast<int>(blocks.size());
}

namespace {

void check_moe_layout(int ranks, int experts) {
  if (experts < 1 || ranks % experts != 0) {
    throw std::invalid_argument(std::to_string(experts) + " experts do not divide " + std::to_string(ranks) + " ranks");
  }
}

}  // namespace

MoeLayout parse_moe_layout(const std::string& name) {
  if (name == "E+D") return MoeLayout::expert_data;
  if (name == "D+E") return MoeLayout::data_expert;
  throw std::invalid_argument("MoE layout '" + name + "': use E+D or D+E");
}

std::string_view to_string(MoeLayout layout) { return layout == MoeLayout::expert_data ? "E+D" : "D+E"; }

MoeSlot moe_slot(int rank, int ranks, int experts, MoeLayout layout) {
  check_moe_layout(ranks, experts);
  // E+D: rank = replica * E + expert; D+E: rank = expert * D + replica.
  if (layout == MoeLayout::expert_data) return {rank % experts, rank / experts};
  const int replicas = ranks / experts;
  return {rank / replicas, rank % replicas};
}

MoeGroups moe_groups(int ranks, int experts, MoeLayout layout) {
  check_moe_layout(ranks, experts);
  MoeGroups groups;
  groups.expert_parallel.resize(static_cast<std::size_t>(ranks / experts));
  groups.expert_data_parallel.resize(static_cast<std::size_t>(experts));
  for (int r = 0; r < ranks; ++r) {
    const MoeSlot slot = moe_slot(r, ranks, experts, layout);
    groups.expert_parallel[static_cast<std::size_t>(slot.replica)].push_back(r);
    groups.expert_data_parallel[static_cast<std::size_t>(slot.expert)].push_back(r);
  }
  return groups;
}

}  // namespace shardsim::topology
