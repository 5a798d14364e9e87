// Cluster: the graph of a GPU cluster built from a ClusterSpec (Boost.Graph).
//
// Vertices are GPUs, one NVSwitch per node, PCIe switches, NICs, leaf and
// spine switches. Every physical full-duplex link is two directed edges, each
// a Link with its own capacity, so traffic in opposite directions never
// competes. Vertex ids 0..gpu_count()-1 are the GPUs themselves.
//
// Besides the physical links, every leaf has two bundle links standing for
// all of its spine uplinks (and downlinks) together. With equal-split ECMP a
// flow crosses each of the S parallel uplinks with share 1/S, so the S links
// always carry equal load and saturate together: exactly one link of S times
// the capacity. Routing in "split" mode uses the bundles, which keeps a
// cross-leaf flow at a handful of links however many spines there are;
// "hash" mode uses the individual spine links.
#pragma once

#include "topology/base/units.h"
#include "topology/cluster_spec.h"
#include "topology/link_kind.h"

#include <boost/graph/adjacency_list.hpp>

#include <string>
#include <vector>

namespace shardsim::topology {

using GpuId = int;   // node * gpus_per_node + local index
using NicId = int;   // node * nics_per_node + rail
using LinkId = int;  // index into Cluster::links()

enum class VertexKind { gpu, nvswitch, pcie_switch, nic, leaf, spine };

struct Vertex {
  VertexKind kind = VertexKind::gpu;
  int node = -1;   // owning node; -1 for fabric switches
  int index = 0;   // local GPU/NIC/PCIe-switch index, or leaf/spine number
};

struct Link {
  LinkKind kind = LinkKind::nvlink;
  int from = -1;  // vertex id; -1 for the spine side of a bundle
  int to = -1;
  double bytes_per_second = 0;  // nominal, per direction
  TimePs latency = 0;           // includes the traversal of the switch it enters
  bool bundle = false;
};

using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, Vertex, LinkId>;

class Cluster {
 public:
  explicit Cluster(ClusterSpec spec);

  const ClusterSpec& spec() const { return spec_; }
  const Graph& graph() const { return graph_; }
  const std::vector<Link>& links() const { return links_; }

  int nodes() const { return spec_.nodes; }
  int gpus_per_node() const { return spec_.node.gpus; }
  int nics_per_node() const { return spec_.node.nics; }
  int gpu_count() const { return spec_.gpu_count(); }
  int leaf_count() const { return leaf_count_; }

  int node_of(GpuId gpu) const { return gpu / gpus_per_node(); }
  int local_index(GpuId gpu) const { return gpu % gpus_per_node(); }
  GpuId gpu_at(int node, int local) const { return node * gpus_per_node() + local; }
  int node_of_nic(NicId nic) const { return nic / nics_per_node(); }
  int rail_of(NicId nic) const { return nic % nics_per_node(); }
  NicId nic_at(int node, int rail) const { return node * nics_per_node() + rail; }

  // GPU <-> NIC attachment: devices on the same PCIe switch.
  int pcie_switch_of_gpu(GpuId gpu) const;
  int pcie_switch_of_nic(NicId nic) const;
  bool is_attached(GpuId gpu, NicId nic) const;
  std::vector<NicId> attached_nics(GpuId gpu) const;  // rail order
  std::vector<GpuId> attached_gpus(NicId nic) const;  // local-index order
  // The attached NIC a GPU uses by default: GPUs and NICs of one PCIe switch
  // pair up in order (DGX-A100: GPU i -> NIC i; 2 GPUs per NIC: both -> it).
  NicId home_nic(GpuId gpu) const;
  // The GPU that forwards, over its PCIe switch, data that GPUs on other PCIe
  // switches send through `nic` (NCCL's PXN): the attached GPU that calls it home.
  GpuId relay_gpu(NicId nic) const;

  // Leaf switch number a NIC is cabled to.
  int leaf_of(NicId nic) const;

  // Vertex ids.
  int gpu_vertex(GpuId gpu) const { return gpu; }
  int nvswitch_vertex(int node) const { return nvswitch_base_ + node; }
  int pcie_switch_vertex(int node, int pcie_switch) const;
  int nic_vertex(NicId nic) const { return nic_base_ + nic; }
  int leaf_vertex(int leaf) const { return leaf_base_ + leaf; }
  int spine_vertex(int spine) const { return spine_base_ + spine; }
  bool is_fabric_switch(int vertex) const { return vertex >= leaf_base_; }

  // Directed physical link between two vertices; throws std::logic_error if none.
  LinkId link_between(int from_vertex, int to_vertex) const;
  LinkId leaf_uplink_bundle(int leaf) const { return uplink_bundle_base_ + leaf; }
  // A leaf's way up to the spines (a leaf-spine link or an uplink bundle):
  // every byte that crosses the spine crosses exactly one of them.
  bool is_leaf_uplink(LinkId link) const;
  LinkId leaf_downlink_bundle(int leaf) const { return uplink_bundle_base_ + leaf_count_ + leaf; }

 private:
  int add_vertex(VertexKind kind, int node, int index);
  void add_duplex_link(int a, int b, LinkKind kind, double bytes_per_second_each_way,
                       TimePs latency_a_to_b, TimePs latency_b_to_a);
  void add_directed_link(int from, int to, LinkKind kind, double bytes_per_second, TimePs latency);

  ClusterSpec spec_;
  Graph graph_;
  std::vector<Link> links_;
  int leaves_per_plane_ = 0;  // rail-optimized: leaves per rail
  int leaf_count_ = 0;
  int nvswitch_base_ = 0, pcie_switch_base_ = 0, nic_base_ = 0, leaf_base_ = 0, spine_base_ = 0;
  LinkId uplink_bundle_base_ = 0;
};

}  // namespace shardsim::topology
