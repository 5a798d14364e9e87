#include "fixtures.h"
#include "topology/routing.h"

#include <catch2/catch.hpp>

#include <set>

using namespace shardsim::topology;
using shardsim::test::cluster_json;
using shardsim::test::cluster_spec;

namespace {

std::vector<int> vertices_of(const Cluster& cluster, const Route& route) {
  std::vector<int> path;
  for (const auto& use : route.links) {
    const Link& link = cluster.links()[static_cast<std::size_t>(use.link)];
    if (path.empty()) path.push_back(link.from);
    path.push_back(link.to);
  }
  return path;
}

// Consecutive physical links share their middle vertex.
bool contiguous(const Cluster& cluster, const Route& route) {
  for (std::size_t i = 1; i < route.links.size(); ++i) {
    const Link& a = cluster.links()[static_cast<std::size_t>(route.links[i - 1].link)];
    const Link& b = cluster.links()[static_cast<std::size_t>(route.links[i].link)];
    if (!a.bundle && !b.bundle && a.to != b.from) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("inside a node a transfer crosses the NVSwitch", "[routing]") {
  const Cluster cluster(load_cluster_spec("dgx-a100-2node"));
  const Router router(cluster);
  const Route route = router.route({3, 6});
  REQUIRE(vertices_of(cluster, route) == std::vector<int>{3, cluster.nvswitch_vertex(0), 6});
  REQUIRE_FALSE(route.crosses_nodes);
  REQUIRE(router.route({5, 5}).links.empty());
}

TEST_CASE("between nodes on one rail a transfer stays under one leaf", "[routing]") {
  auto doc = cluster_json(2, 8, 8);
  doc["fabric"]["switch_latency_seconds"] = 100e-9;
  doc["node"]["pcie_latency_seconds"] = 10e-9;
  const Cluster cluster(cluster_spec(doc));
  const Router router(cluster);
  const GpuId src = cluster.gpu_at(0, 2), dst = cluster.gpu_at(1, 2);
  const Route route = router.route({src, dst});
  const int leaf = cluster.leaf_vertex(cluster.leaf_of(cluster.nic_at(0, 2)));
  REQUIRE(vertices_of(cluster, route) ==
          std::vector<int>{src, cluster.pcie_switch_vertex(0, 2), cluster.nic_vertex(cluster.nic_at(0, 2)), leaf,
                           cluster.nic_vertex(cluster.nic_at(1, 2)), cluster.pcie_switch_vertex(1, 2), dst});
  REQUIRE(route.crosses_nodes);
  // Four PCIe hops and one leaf switch.
  REQUIRE(route.latency == 4 * 10'000 + 100'000);
}

TEST_CASE("across leaves, split ECMP uses the leaf bundles and hash ECMP one spine", "[routing]") {
  auto doc = cluster_json(4, 8, 8);
  doc["fabric"]["nodes_per_leaf"] = 2;
  doc["fabric"]["switch_latency_seconds"] = 100e-9;
  const GpuId src = 0;
  {
    const Cluster cluster(cluster_spec(doc));
    const Router router(cluster);
    const GpuId dst = cluster.gpu_at(3, 0);
    const Route route = router.route({src, dst});
    std::set<LinkId> links;
    for (const auto& use : route.links) links.insert(use.link);
    REQUIRE(links.count(cluster.leaf_uplink_bundle(cluster.leaf_of(cluster.nic_at(0, 0)))));
    REQUIRE(links.count(cluster.leaf_downlink_bundle(cluster.leaf_of(cluster.nic_at(3, 0)))));
    REQUIRE(route.latency == 300'000);  // leaf, spine, leaf
    REQUIRE(contiguous(cluster, route));
  }
  doc["fabric"]["ecmp"] = "hash";
  const Cluster cluster(cluster_spec(doc));
  const Router router(cluster);
  const int src_leaf = cluster.leaf_of(cluster.nic_at(0, 0));
  const int dst_leaf = cluster.leaf_of(cluster.nic_at(3, 0));
  REQUIRE(router.leaf_paths(src_leaf, dst_leaf).size() == 4);  // one per spine
  std::set<int> spines_used;
  for (std::uint64_t key = 0; key < 64; ++key) {
    const Route route = router.route({src, cluster.gpu_at(3, 0), kHomeNic, kHomeNic, key});
    REQUIRE(contiguous(cluster, route));
    const auto path = vertices_of(cluster, route);
    REQUIRE(path.size() == 9);  // GPU, PCIe, NIC, leaf, spine, leaf, NIC, PCIe, GPU
    spines_used.insert(path[4]);
    REQUIRE(route.links == router.route({src, cluster.gpu_at(3, 0), kHomeNic, kHomeNic, key}).links);  // deterministic
  }
  REQUIRE(spines_used.size() == 4);  // different flows spread over every spine
}

TEST_CASE("a GPU sending through a NIC off its PCIe switch relays over NVLink", "[routing]") {
  const Cluster cluster(load_cluster_spec("h100-8node"));
  const Router router(cluster);
  const GpuId src = cluster.gpu_at(0, 7), dst = cluster.gpu_at(1, 0);
  const NicId rail0_here = cluster.nic_at(0, 0), rail0_there = cluster.nic_at(1, 0);
  const Route route = router.route({src, dst, rail0_here, rail0_there});
  const auto path = vertices_of(cluster, route);
  REQUIRE(path[0] == src);
  REQUIRE(path[1] == cluster.nvswitch_vertex(0));
  REQUIRE(path[2] == cluster.gpu_at(0, 0));  // the GPU next to NIC 0
  REQUIRE(path[4] == cluster.nic_vertex(rail0_here));
  REQUIRE(path.back() == dst);
  REQUIRE(contiguous(cluster, route));
  REQUIRE_THROWS_AS(router.route({src, dst, cluster.nic_at(1, 0), kHomeNic}), std::invalid_argument);
  REQUIRE_THROWS_AS(router.route({src, 100000}), std::invalid_argument);
}
