// GroupLayout: the ranks of a communicator placed on the cluster's GPUs, and
// the per-node channel structure NCCL builds over them.
//
// A channel is one ring (or tree) instance. Across nodes, NCCL keeps each
// channel on one NIC per node, entering and leaving a node through it so that
// rail-optimized fabrics carry the traffic rail-locally; several channels
// spread the load over the NICs. Inside a node the channel visits the group's
// GPUs starting with a GPU attached to that NIC (the entry) and, where the
// NIC has another attached GPU, ending on it (the exit); otherwise the exit
// hands its data to the entry over NVLink (PXN).
//
// Nodes come in the order the ranks first reach them: NCCL builds the
// inter-node ring in rank order, so a placement that interleaves leaf
// switches makes every ring hop cross the spine.
#pragma once

#include "topology/cluster.h"

#include <vector>

namespace shardsim::sim {

using topology::Cluster;
using topology::GpuId;
using topology::NicId;

// One channel's path through one node.
struct NodeChannel {
  NicId nic = -1;              // -1 when the group has a single node
  std::vector<GpuId> order;    // entry first, exit last
};

struct GroupLayout {
  std::vector<GpuId> ranks;                       // rank -> GPU
  std::vector<int> nodes;                         // distinct nodes, as the ranks first reach them
  std::vector<std::vector<GpuId>> gpus_by_node;   // per entry of `nodes`, local-index order
  // channels[c][j]: channel c on node j, as build_node_channels() makes them.
  // Every collective on the group uses the same channels, as NCCL's
  // communicator sets them up once.
  std::vector<std::vector<NodeChannel>> channels;

  int size() const { return static_cast<int>(ranks.size()); }
  int node_count() const { return static_cast<int>(nodes.size()); }
  int max_gpus_per_node() const;
  bool uniform() const;  // same number of GPUs on every node
};

// Throws std::invalid_argument for an empty group, a GPU outside the cluster,
// or a GPU listed twice.
GroupLayout make_group_layout(const Cluster& cluster, std::vector<GpuId> ranks);

// channels[c][j]: channel c on node j of the layout. One channel on a single
// node (the NVSwitch is non-blocking: more would not change any load);
// otherwise as many as the fewest NICs any node's group GPUs are attached to.
std::vector<std::vector<NodeChannel>> build_node_channels(const Cluster& cluster, const GroupLayout& group);

}  // namespace shardsim::sim
