// Placement: which GPU of the cluster each rank of a job runs on.
//
// A job of N ranks takes whole nodes once it outgrows one (N a multiple of
// the GPUs per node), and keeps ranks in local order inside a node, so the
// mesh filter's promise (a group up to a node's size stays inside a node)
// holds under every policy. The policies choose which nodes, in which order:
//   consecutive  job node j on cluster node j: what a scheduler hands out on
//                an empty cluster;
//   leaf_aware   consecutive blocks of `group_ranks` ranks (a sharding
//                group) each packed under as few leaf switches as possible
//                (TECHNIQUES.md section 2, communication placement), so the
//                group's traffic stays off the spine;
//   scattered    consecutive job nodes dealt round-robin over the leaf
//                switches: a what-if for a fragmented allocation.
// "Under a leaf" means a leaf block: the nodes_per_leaf nodes whose NICs share
// leaf switches (one leaf per rail on a rail-optimized fabric).
//
// MoE layouts (TECHNIQUES.md section 6) say which ranks form the expert-
// parallel groups (the all-to-all) and the expert data-parallel groups (the
// expert-gradient all-reduce) for E experts over N = E x D ranks:
//   E+D  the E experts on consecutive ranks, the whole set repeated D times:
//        all-to-all groups are blocks of E, all-reduce groups stride E;
//   D+E  each expert's D replicas on consecutive ranks: all-reduce groups are
//        blocks of D, all-to-all groups stride D.
#pragma once

#include "topology/cluster.h"

#include <string>
#include <string_view>
#include <vector>

namespace shardsim::topology {

enum class PlacementPolicy { consecutive, leaf_aware, scattered };

// "consecutive", "leaf-aware", "scattered"; std::invalid_argument otherwise.
PlacementPolicy parse_placement_policy(const std::string& name);
std::string_view to_string(PlacementPolicy policy);

struct Placement {
  PlacementPolicy policy = PlacementPolicy::consecutive;
  std::vector<GpuId> gpu_of_rank;

  bool operator==(const Placement& other) const { return gpu_of_rank == other.gpu_of_rank; }
};

// Throws std::invalid_argument naming the reason when `ranks` does not fit the
// cluster (more than its GPUs, or more than a node and not whole nodes).
// `group_ranks` matters to leaf_aware only; up to a node it changes nothing.
Placement place_ranks(const Cluster& cluster, int ranks, PlacementPolicy policy, int group_ranks = 0);

// The leaf block of a node (nodes cabled to the same leaf switches).
int leaf_block_of_node(const Cluster& cluster, int node);

// How many leaf blocks the GPUs of `ranks` sit under.
int leaf_blocks_spanned(const Cluster& cluster, const Placement& placement, const std::vector<int>& ranks);

enum class MoeLayout { expert_data, data_expert };  // E+D, D+E

// "E+D", "D+E"; std::invalid_argument otherwise.
MoeLayout parse_moe_layout(const std::string& name);
std::string_view to_string(MoeLayout layout);

// Where a rank sits in a MoE layout: which expert-parallel position (the
// expert it holds, its expert-data-parallel group) and which replica (its
// expert-parallel group, its place in the expert-data-parallel group).
struct MoeSlot {
  int expert = 0;
  int replica = 0;
};

// std::invalid_argument unless `experts` divides `ranks`.
MoeSlot moe_slot(int rank, int ranks, int experts, MoeLayout layout);

struct MoeGroups {
  std::vector<std::vector<int>> expert_parallel;       // all-to-all groups, E ranks each
  std::vector<std::vector<int>> expert_data_parallel;  // all-reduce groups, D ranks each
};

// std::invalid_argument unless `experts` divides `ranks`.
MoeGroups moe_groups(int ranks, int experts, MoeLayout layout);

}  // namespace shardsim::topology
