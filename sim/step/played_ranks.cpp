#include "sim/step/played_ranks.h"

#include "topology/placement.h"

#include <algorithm>
#include <map>
#include <utility>

namespace shardsim::sim {

PlayedRanks played_ranks(const workloads::Program& program, bool mirror) {
  const auto& communicators = program.communicators;
  PlayedRanks played;
  played.arrivals_needed.resize(communicators.size());
  if (!mirror) {
    played.ranks.resize(static_cast<std::size_t>(program.ranks));
    for (int rank = 0; rank < program.ranks; ++rank) played.ranks[static_cast<std::size_t>(rank)] = rank;
    for (std::size_t c = 0; c < communicators.size(); ++c) {
      played.arrivals_needed[c].assign(communicators[c].groups.size(), communicators[c].group_size());
    }
    return played;
  }
  std::vector<char> is_played(static_cast<std::size_t>(program.ranks), 0);
  is_played[0] = 1;
  played.ranks = {0};
  for (std::size_t next = 0; next < played.ranks.size(); ++next) {
    const int rank = played.ranks[next];
    const int op_list = program.program_of_rank[static_cast<std::size_t>(rank)];
    for (const auto& communicator : communicators) {
      const int group = communicator.group_of_rank[static_cast<std::size_t>(rank)];
      if (group < 0) continue;
      const auto& members = communicator.groups[static_cast<std::size_t>(group)];
      const bool mixed = std::any_of(members.begin(), members.end(), [&](int member) {
        return program.program_of_rank[static_cast<std::size_t>(member)] != op_list;
      });
      if (!mixed) continue;
      for (int member : members) {
        if (is_played[static_cast<std::size_t>(member)]) continue;
        is_played[static_cast<std::size_t>(member)] = 1;
        played.ranks.push_back(member);
      }
    }
  }
  std::sort(played.ranks.begin(), played.ranks.end());
  for (std::size_t c = 0; c < communicators.size(); ++c) {
    played.arrivals_needed[c].assign(communicators[c].groups.size(), 0);
    for (int rank : played.ranks) {
      const int group = communicators[c].group_of_rank[static_cast<std::size_t>(rank)];
      if (group >= 0) ++played.arrivals_needed[c][static_cast<std::size_t>(group)];
    }
  }
  return played;
}

std::vector<topology::GpuId> gpus_of_ranks(const std::vector<topology::GpuId>& gpu_of_rank,
                                           const std::vector<int>& ranks) {
  if (gpu_of_rank.empty()) return {ranks.begin(), ranks.end()};
  std::vector<topology::GpuId> gpus;
  gpus.reserve(ranks.size());
  for (int rank : ranks) gpus.push_back(gpu_of_rank[static_cast<std::size_t>(rank)]);
  return gpus;
}

GroupKinds group_kinds(const workloads::Program& program, const topology::Cluster& cluster,
                       const std::vector<topology::GpuId>& gpu_of_rank, int communicator, int op_list) {
  GroupKinds kinds;
  using Shape = std::pair<std::vector<int>, int>;  // GPUs per node (sorted), leaf blocks
  std::map<Shape, std::size_t> kind_of_shape;
  for (const auto& ranks : program.communicators[static_cast<std::size_t>(communicator)].groups) {
    if (program.program_of_rank[static_cast<std::size_t>(ranks.front())] != op_list) continue;
    std::vector<topology::GpuId> gpus = gpus_of_ranks(gpu_of_rank, ranks);
    std::map<int, int> per_node;
    std::map<int, int> blocks;
    for (topology::GpuId gpu : gpus) {
      const int node = cluster.node_of(gpu);
      ++per_node[node];
      ++blocks[topology::leaf_block_of_node(cluster, node)];
    }
    Shape shape{{}, static_cast<int>(blocks.size())};
    for (const auto& [node, count] : per_node) shape.first.push_back(count);
    std::sort(shape.first.begin(), shape.first.end());
    const auto [kind, is_new] = kind_of_shape.try_emplace(std::move(shape), kinds.representatives.size());
    if (is_new) {
      kinds.representatives.push_back(std::move(gpus));
      kinds.counts.push_back(0);
    }
    ++kinds.counts[kind->second];
  }
  return kinds;
}

}  // namespace shardsim::sim
