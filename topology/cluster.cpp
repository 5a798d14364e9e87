#include "topology/cluster.h"

#include <stdexcept>

namespace shardsim::topology {

const char* to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::pcie: return "pcie";
    case LinkKind::network: return "network";
  }
  return "?";
}

Cluster::Cluster(ClusterSpec spec) : spec_(std::move(spec)) {
  const NodeSpec& node = spec_.node;
  const FabricSpec& fabric = spec_.fabric;
  const int groups = (spec_.nodes + fabric.nodes_per_leaf - 1) / fabric.nodes_per_leaf;
  leaves_per_plane_ = groups;
  leaf_count_ = fabric.rail_optimized ? groups * node.nics : groups;

  for (int n = 0; n < spec_.nodes; ++n) {
    for (int g = 0; g < node.gpus; ++g) add_vertex(VertexKind::gpu, n, g);
  }
  nvswitch_base_ = static_cast<int>(boost::num_vertices(graph_));
  for (int n = 0; n < spec_.nodes; ++n) add_vertex(VertexKind::nvswitch, n, 0);
  pcie_switch_base_ = static_cast<int>(boost::num_vertices(graph_));
  for (int n = 0; n < spec_.nodes; ++n) {
    for (int s = 0; s < node.pcie_switches; ++s) add_vertex(VertexKind::pcie_switch, n, s);
  }
  nic_base_ = static_cast<int>(boost::num_vertices(graph_));
  for (int n = 0; n < spec_.nodes; ++n) {
    for (int r = 0; r < node.nics; ++r) add_vertex(VertexKind::nic, n, r);
  }
  leaf_base_ = static_cast<int>(boost::num_vertices(graph_));
  for (int l = 0; l < leaf_count_; ++l) add_vertex(VertexKind::leaf, -1, l);
  spine_base_ = static_cast<int>(boost::num_vertices(graph_));
  for (int s = 0; s < fabric.spines; ++s) add_vertex(VertexKind::spine, -1, s);

  const double nvlink = per_direction_from_bidirectional(node.nvlink_bidirectional_bytes_per_second);
  const double pcie = per_direction_from_bidirectional(node.pcie_bidirectional_bytes_per_second);
  const double nic = bytes_per_second_from_bits_per_second(node.nic_bits_per_second);
  const TimePs nvlink_latency = picoseconds_from_seconds(node.nvlink_latency_seconds);
  const TimePs pcie_latency = picoseconds_from_seconds(node.pcie_latency_seconds);
  const TimePs switch_latency = picoseconds_from_seconds(fabric.switch_latency_seconds);

  for (int n = 0; n < spec_.nodes; ++n) {
    for (int g = 0; g < node.gpus; ++g) {
      const GpuId gpu = gpu_at(n, g);
      add_duplex_link(gpu_vertex(gpu), nvswitch_vertex(n), LinkKind::nvlink, nvlink, nvlink_latency,
                      nvlink_latency);
      add_duplex_link(gpu_vertex(gpu), pcie_switch_vertex(n, pcie_switch_of_gpu(gpu)), LinkKind::pcie,
                      pcie, pcie_latency, pcie_latency);
    }
    for (int r = 0; r < node.nics; ++r) {
      const NicId id = nic_at(n, r);
      add_duplex_link(pcie_switch_vertex(n, pcie_switch_of_nic(id)), nic_vertex(id), LinkKind::pcie, pcie,
                      pcie_latency, pcie_latency);
      // The latency of a link into a switch includes crossing that switch.
      add_duplex_link(nic_vertex(id), leaf_vertex(leaf_of(id)), LinkKind::network, nic, switch_latency, 0);
    }
  }

  // Uplinks are sized by the leaf's designed port count, so a partly filled
  // last leaf keeps the same uplinks as the others.
  const int downlink_ports = fabric.rail_optimized ? fabric.nodes_per_leaf : fabric.nodes_per_leaf * node.nics;
  const double uplink_total = downlink_ports * nic / fabric.oversubscription;
  const double uplink_each = uplink_total / fabric.spines;
  for (int l = 0; l < leaf_count_; ++l) {
    for (int s = 0; s < fabric.spines; ++s) {
      add_duplex_link(leaf_vertex(l), spine_vertex(s), LinkKind::network, uplink_each, switch_latency,
                      switch_latency);
    }
  }
  uplink_bundle_base_ = static_cast<LinkId>(links_.size());
  for (int l = 0; l < leaf_count_; ++l) {
    links_.push_back({LinkKind::network, leaf_vertex(l), -1, uplink_total, switch_latency, true});
  }
  for (int l = 0; l < leaf_count_; ++l) {
    links_.push_back({LinkKind::network, -1, leaf_vertex(l), uplink_total, switch_latency, true});
  }
}

int Cluster::add_vertex(VertexKind kind, int node, int index) {
  return static_cast<int>(boost::add_vertex(Vertex{kind, node, index}, graph_));
}

void Cluster::add_directed_link(int from, int to, LinkKind kind, double bytes_per_second, TimePs latency) {
  const auto id = static_cast<LinkId>(links_.size());
  links_.push_back({kind, from, to, bytes_per_second, latency, false});
  boost::add_edge(from, to, id, graph_);
}

void Cluster::add_duplex_link(int a, int b, LinkKind kind, double bytes_per_second_each_way,
                              TimePs latency_a_to_b, TimePs latency_b_to_a) {
  add_directed_link(a, b, kind, bytes_per_second_each_way, latency_a_to_b);
  add_directed_link(b, a, kind, bytes_per_second_each_way, latency_b_to_a);
}

int Cluster::pcie_switch_vertex(int node, int pcie_switch) const {
  return pcie_switch_base_ + node * spec_.node.pcie_switches + pcie_switch;
}

int Cluster::pcie_switch_of_gpu(GpuId gpu) const {
  return local_index(gpu) / (spec_.node.gpus / spec_.node.pcie_switches);
}

int Cluster::pcie_switch_of_nic(NicId nic) const {
  return rail_of(nic) / (spec_.node.nics / spec_.node.pcie_switches);
}

bool Cluster::is_attached(GpuId gpu, NicId nic) const {
  return node_of(gpu) == node_of_nic(nic) && pcie_switch_of_gpu(gpu) == pcie_switch_of_nic(nic);
}

std::vector<NicId> Cluster::attached_nics(GpuId gpu) const {
  const int per_switch = spec_.node.nics / spec_.node.pcie_switches;
  const int first = pcie_switch_of_gpu(gpu) * per_switch;
  std::vector<NicId> nics;
  for (int r = first; r < first + per_switch; ++r) nics.push_back(nic_at(node_of(gpu), r));
  return nics;
}

std::vector<GpuId> Cluster::attached_gpus(NicId nic) const {
  const int per_switch = spec_.node.gpus / spec_.node.pcie_switches;
  const int first = pcie_switch_of_nic(nic) * per_switch;
  std::vector<GpuId> gpus;
  for (int g = first; g < first + per_switch; ++g) gpus.push_back(gpu_at(node_of_nic(nic), g));
  return gpus;
}

NicId Cluster::home_nic(GpuId gpu) const {
  const int gpus_per_switch = spec_.node.gpus / spec_.node.pcie_switches;
  const int nics_per_switch = spec_.node.nics / spec_.node.pcie_switches;
  const int position = local_index(gpu) % gpus_per_switch;
  const int rail = pcie_switch_of_gpu(gpu) * nics_per_switch + position % nics_per_switch;
  return nic_at(node_of(gpu), rail);
}

GpuId Cluster::relay_gpu(NicId nic) const {
  const auto gpus = attached_gpus(nic);
  for (GpuId gpu : gpus) {
    if (home_nic(gpu) == nic) return gpu;
  }
  return gpus.front();
}

int Cluster::leaf_of(NicId nic) const {
  const int group = node_of_nic(nic) / spec_.fabric.nodes_per_leaf;
  return spec_.fabric.rail_optimized ? rail_of(nic) * leaves_per_plane_ + group : group;
}

bool Cluster::is_leaf_uplink(LinkId link) const {
  const Link& l = links_[static_cast<std::size_t>(link)];
  if (l.bundle) return l.from >= 0;
  return l.from >= leaf_base_ && l.from < spine_base_ && l.to >= spine_base_;
}

LinkId Cluster::link_between(int from_vertex, int to_vertex) const {
  const auto [edge, found] = boost::edge(from_vertex, to_vertex, graph_);
  if (!found) {
    throw std::logic_error("no link from vertex " + std::to_string(from_vertex) + " to " +
                           std::to_string(to_vertex));
  }
  return graph_[edge];
}

}  // namespace shardsim::topology
