// Router: the links a transfer between two GPUs crosses, with ECMP.
//
// Inside a node a transfer goes GPU -> NVSwitch -> GPU. Between nodes it
// leaves through a NIC and enters through a NIC: by default each GPU's home
// NIC, or NICs the caller names (NCCL keeps a ring on one rail that way). A
// GPU that is not on the chosen NIC's PCIe switch first hands its data over
// NVLink to a GPU that is (NCCL's PXN); the same on the receiving side.
// Between leaf switches the equal-cost paths come from a breadth-first search
// over the switch graph (Boost.Graph), and the cluster's ECMP mode decides
// whether a flow is split over all of them or pinned to one by a hash.
// Routing is const and safe from several threads at once.
#pragma once

#include "topology/cluster.h"

#include <cstdint>
#include <mutex>
#include <vector>

namespace shardsim::topology {

// Bytes that cross `link` per byte of a transfer: below 1 when the transfer
// is split over parallel paths; above 1 when several hops of one pipelined
// transfer (a ring channel) cross the same link.
struct LinkUse {
  LinkId link = 0;
  double weight = 1.0;
  bool operator==(const LinkUse&) const = default;
};

struct Route {
  std::vector<LinkUse> links;
  TimePs latency = 0;  // sum of the link latencies along the path
  bool crosses_nodes = false;
};

inline constexpr NicId kHomeNic = -1;

struct RouteRequest {
  GpuId src = 0;
  GpuId dst = 0;
  NicId src_nic = kHomeNic;  // NIC the data leaves src's node through
  NicId dst_nic = kHomeNic;  // NIC the data enters dst's node through
  std::uint64_t flow_key = 0;  // distinguishes flows of one GPU pair for hash ECMP
};

class Router {
 public:
  explicit Router(const Cluster& cluster);

  const Cluster& cluster() const { return cluster_; }

  // Throws std::invalid_argument for GPUs or NICs outside the cluster, or NICs
  // on the wrong node.
  Route route(const RouteRequest& request) const;

  // Every shortest path between two leaf switches, as link lists (hash-mode
  // candidates; in a two-tier fabric one per spine).
  std::vector<std::vector<LinkId>> leaf_paths(int src_leaf, int dst_leaf) const;

 private:
  void append(Route& route, LinkId link) const;
  void append_leaf_to_leaf(Route& route, int src_leaf, int dst_leaf, std::uint64_t hash) const;
  const std::vector<int>& hops_to_leaf(int leaf) const;

  const Cluster& cluster_;
  // hops_to_leaf_[leaf][vertex]: switch hops from a fabric switch to `leaf`,
  // filled on first use, once even when threads route at once (a search's).
  mutable std::vector<std::once_flag> hops_filled_;
  mutable std::vector<std::vector<int>> hops_to_leaf_;
};

}  // namespace shardsim::topology
