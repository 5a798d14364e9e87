#include "topology/routing.h"

#include <boost/graph/breadth_first_search.hpp>
#include <boost/graph/filtered_graph.hpp>
#include <boost/graph/visitors.hpp>

#include <stdexcept>
#include <string>

namespace shardsim::topology {

namespace {

// filtered_graph needs a default-constructible predicate.
struct FabricSwitchesOnly {
  const Cluster* cluster = nullptr;
  bool operator()(Graph::vertex_descriptor v) const {
    return cluster->is_fabric_switch(static_cast<int>(v));
  }
};

// SplitMix64 finaliser: a cheap, well-mixed, platform-independent hash.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Router::Router(const Cluster& cluster)
    : cluster_(cluster),
      hops_filled_(static_cast<std::size_t>(cluster.leaf_count())),
      hops_to_leaf_(static_cast<std::size_t>(cluster.leaf_count())) {}

void Router::append(Route& route, LinkId link) const {
  route.links.push_back({link, 1.0});
  route.latency += cluster_.links()[static_cast<std::size_t>(link)].latency;
}

const std::vector<int>& Router::hops_to_leaf(int leaf) const {
  const auto index = static_cast<std::size_t>(leaf);
  auto& hops = hops_to_leaf_.at(index);
  std::call_once(hops_filled_[index], [&] {
    const Graph& graph = cluster_.graph();
    boost::filtered_graph<Graph, boost::keep_all, FabricSwitchesOnly> switches(graph, boost::keep_all(),
                                                                              FabricSwitchesOnly{&cluster_});
    hops.assign(boost::num_vertices(graph), -1);
    const auto source = static_cast<Graph::vertex_descriptor>(cluster_.leaf_vertex(leaf));
    hops[source] = 0;
    // Links come in both directions, so hops from the leaf equal hops to it.
    boost::breadth_first_search(
        switches, source,
        boost::visitor(boost::make_bfs_visitor(boost::record_distances(hops.data(), boost::on_tree_edge()))));
  });
  return hops;
}

std::vector<std::vector<LinkId>> Router::leaf_paths(int src_leaf, int dst_leaf) const {
  const Graph& graph = cluster_.graph();
  const auto& hops = hops_to_leaf(dst_leaf);
  std::vector<std::vector<LinkId>> paths;
  std::vector<LinkId> path;
  // Depth-first over next hops that bring us one step closer.
  auto walk = [&](auto&& self, int vertex) -> void {
    if (vertex == cluster_.leaf_vertex(dst_leaf)) {
      paths.push_back(path);
      return;
    }
    for (auto [it, end] = boost::out_edges(static_cast<Graph::vertex_descriptor>(vertex), graph); it != end; ++it) {
      const int next = static_cast<int>(boost::target(*it, graph));
      if (!cluster_.is_fabric_switch(next) || hops[static_cast<std::size_t>(next)] != hops[static_cast<std::size_t>(vertex)] - 1) continue;
      path.push_back(graph[*it]);
      self(self, next);
      path.pop_back();
    }
  };
  if (hops[static_cast<std::size_t>(cluster_.leaf_vertex(src_leaf))] < 0) return paths;
  walk(walk, cluster_.leaf_vertex(src_leaf));
  return paths;
}

void Router::append_leaf_to_leaf(Route& route, int src_leaf, int dst_leaf, std::uint64_t hash) const {
  if (src_leaf == dst_leaf) return;
  if (cluster_.spec().fabric.ecmp == EcmpMode::split) {
    // See cluster.h: an even split over the parallel spine links is one bundle.
    append(route, cluster_.leaf_uplink_bundle(src_leaf));
    append(route, cluster_.leaf_downlink_bundle(dst_leaf));
    return;
  }
  const Graph& graph = cluster_.graph();
  const auto& hops = hops_to_leaf(dst_leaf);
  int vertex = cluster_.leaf_vertex(src_leaf);
  for (int depth = 0; vertex != cluster_.leaf_vertex(dst_leaf); ++depth) {
    std::vector<std::pair<int, LinkId>> next_hops;
    for (auto [it, end] = boost::out_edges(static_cast<Graph::vertex_descriptor>(vertex), graph); it != end; ++it) {
      const int next = static_cast<int>(boost::target(*it, graph));
      if (cluster_.is_fabric_switch(next) && hops[static_cast<std::size_t>(next)] == hops[static_cast<std::size_t>(vertex)] - 1) {
        next_hops.emplace_back(next, graph[*it]);
      }
    }
    if (next_hops.empty()) throw std::logic_error("leaf " + std::to_string(src_leaf) + " cannot reach leaf " + std::to_string(dst_leaf));
    const auto& [next, link] = next_hops[mix(hash ^ static_cast<std::uint64_t>(depth)) % next_hops.size()];
    append(route, link);
    vertex = next;
  }
}

Route Router::route(const RouteRequest& request) const {
  const Cluster& c = cluster_;
  auto check_gpu = [&](GpuId gpu, const char* what) {
    if (gpu < 0 || gpu >= c.gpu_count()) {
      throw std::invalid_argument(std::string(what) + " GPU " + std::to_string(gpu) + " is outside the cluster (" +
                                  std::to_string(c.gpu_count()) + " GPUs)");
    }
  };
  check_gpu(request.src, "source");
  check_gpu(request.dst, "destination");

  Route route;
  if (request.src == request.dst) return route;
  const int src_node = c.node_of(request.src);
  const int dst_node = c.node_of(request.dst);
  if (src_node == dst_node) {
    if (request.src_nic != kHomeNic || request.dst_nic != kHomeNic) {
      throw std::invalid_argument("a transfer inside one node does not go through NICs");
    }
    append(route, c.link_between(c.gpu_vertex(request.src), c.nvswitch_vertex(src_node)));
    append(route, c.link_between(c.nvswitch_vertex(src_node), c.gpu_vertex(request.dst)));
    return route;
  }

  auto pick_nic = [&](NicId requested, GpuId gpu, int node, const char* what) {
    if (requested == kHomeNic) return c.home_nic(gpu);
    if (requested < 0 || c.node_of_nic(requested) != node || requested >= c.nodes() * c.nics_per_node()) {
      throw std::invalid_argument(std::string(what) + " NIC " + std::to_string(requested) + " is not on node " +
                                  std::to_string(node));
    }
    return requested;
  };
  const NicId src_nic = pick_nic(request.src_nic, request.src, src_node, "source");
  const NicId dst_nic = pick_nic(request.dst_nic, request.dst, dst_node, "destination");
  route.crosses_nodes = true;
  GpuId sender = request.src;
  if (!c.is_attached(sender, src_nic)) {
    sender = c.relay_gpu(src_nic);
    append(route, c.link_between(c.gpu_vertex(request.src), c.nvswitch_vertex(src_node)));
    append(route, c.link_between(c.nvswitch_vertex(src_node), c.gpu_vertex(sender)));
  }
  const int src_switch = c.pcie_switch_vertex(src_node, c.pcie_switch_of_nic(src_nic));
  append(route, c.link_between(c.gpu_vertex(sender), src_switch));
  append(route, c.link_between(src_switch, c.nic_vertex(src_nic)));
  append(route, c.link_between(c.nic_vertex(src_nic), c.leaf_vertex(c.leaf_of(src_nic))));

  const std::uint64_t key = mix(request.flow_key) ^ (static_cast<std::uint64_t>(request.src) << 32) ^
                            static_cast<std::uint64_t>(request.dst);
  append_leaf_to_leaf(route, c.leaf_of(src_nic), c.leaf_of(dst_nic), key);

  append(route, c.link_between(c.leaf_vertex(c.leaf_of(dst_nic)), c.nic_vertex(dst_nic)));
  const GpuId receiver = c.is_attached(request.dst, dst_nic) ? request.dst : c.relay_gpu(dst_nic);
  const int dst_switch = c.pcie_switch_vertex(dst_node, c.pcie_switch_of_nic(dst_nic));
  append(route, c.link_between(c.nic_vertex(dst_nic), dst_switch));
  append(route, c.link_between(dst_switch, c.gpu_vertex(receiver)));
  if (receiver != request.dst) {
    append(route, c.link_between(c.gpu_vertex(receiver), c.nvswitch_vertex(dst_node)));
    append(route, c.link_between(c.nvswitch_vertex(dst_node), c.gpu_vertex(request.dst)));
  }
  return route;
}

}  // namespace shardsim::topology
