#include "fixtures.h"
#include "topology/cluster.h"

#include <catch2/catch.hpp>

using namespace shardsim::topology;
using shardsim::test::cluster_json;
using shardsim::test::cluster_spec;

TEST_CASE("a DGX-A100 node: 4 PCIe switches of 2 GPUs and 2 NICs", "[cluster]") {
  const Cluster cluster(load_cluster_spec("dgx-a100-2node"));
  REQUIRE(cluster.gpu_count() == 16);
  REQUIRE(cluster.home_nic(cluster.gpu_at(1, 5)) == cluster.nic_at(1, 5));
  REQUIRE(cluster.attached_nics(cluster.gpu_at(0, 0)) == std::vector<NicId>{0, 1});
  REQUIRE(cluster.attached_gpus(cluster.nic_at(0, 3)) == std::vector<GpuId>{2, 3});
  REQUIRE(cluster.is_attached(cluster.gpu_at(0, 1), cluster.nic_at(0, 0)));
  REQUIRE_FALSE(cluster.is_attached(cluster.gpu_at(0, 2), cluster.nic_at(0, 0)));
  REQUIRE_FALSE(cluster.is_attached(cluster.gpu_at(1, 0), cluster.nic_at(0, 0)));  // other node
  REQUIRE(cluster.relay_gpu(cluster.nic_at(0, 3)) == 3);
}

TEST_CASE("an A800 node: 4 NICs, two GPUs behind each", "[cluster]") {
  const Cluster cluster(load_cluster_spec("a800-1024"));
  REQUIRE(cluster.home_nic(cluster.gpu_at(0, 4)) == cluster.nic_at(0, 2));
  REQUIRE(cluster.home_nic(cluster.gpu_at(0, 5)) == cluster.nic_at(0, 2));
  REQUIRE(cluster.attached_gpus(cluster.nic_at(0, 2)) == std::vector<GpuId>{4, 5});
  REQUIRE(cluster.relay_gpu(cluster.nic_at(0, 2)) == 4);
}

TEST_CASE("the graph holds every device and both directions of every link", "[cluster]") {
  auto doc = cluster_json(3, 8, 8);
  doc["fabric"]["nodes_per_leaf"] = 2;
  const Cluster cluster(cluster_spec(doc));
  const int nodes = 3, gpus = 8, nics = 8, pcie = 8, spines = 4;
  const int leaves = nics * 2;  // rail-optimized: 2 leaf groups per rail
  REQUIRE(cluster.leaf_count() == leaves);
  REQUIRE(boost::num_vertices(cluster.graph()) ==
          static_cast<std::size_t>(nodes * (gpus + 1 + pcie + nics) + leaves + spines));
  // Per node: GPU-NVSwitch, GPU-PCIe, PCIe-NIC, NIC-leaf links; then leaf-spine; each both ways.
  const std::size_t physical = 2 * (nodes * (gpus + gpus + nics + nics) + leaves * spines);
  REQUIRE(boost::num_edges(cluster.graph()) == physical);
  REQUIRE(cluster.links().size() == physical + 2 * leaves);  // plus up and down bundles
  for (auto [it, end] = boost::edges(cluster.graph()); it != end; ++it) {
    const Link& link = cluster.links()[static_cast<std::size_t>(cluster.graph()[*it])];
    REQUIRE(link.from == static_cast<int>(boost::source(*it, cluster.graph())));
    REQUIRE(link.to == static_cast<int>(boost::target(*it, cluster.graph())));
    REQUIRE(cluster.link_between(link.to, link.from) >= 0);  // the reverse direction exists
  }
}

TEST_CASE("link capacities follow the datasheet conventions", "[cluster]") {
  const Cluster cluster(load_cluster_spec("dgx-a100-2node"));
  const auto& links = cluster.links();
  const auto capacity = [&](int from, int to) { return links[static_cast<std::size_t>(cluster.link_between(from, to))].bytes_per_second; };
  // NVLink 600 GB/s bidirectional: 300 GB/s each way. HDR 200 Gb/s: 25 GB/s.
  REQUIRE(capacity(cluster.gpu_vertex(0), cluster.nvswitch_vertex(0)) == 300e9);
  REQUIRE(capacity(cluster.nvswitch_vertex(0), cluster.gpu_vertex(0)) == 300e9);
  REQUIRE(capacity(cluster.nic_vertex(0), cluster.leaf_vertex(cluster.leaf_of(0))) == 25e9);
  REQUIRE(capacity(cluster.gpu_vertex(0), cluster.pcie_switch_vertex(0, 0)) == 32e9);
}

TEST_CASE("leaf uplinks carry the downlink capacity over the oversubscription", "[cluster]") {
  for (double oversubscription : {1.0, 2.0, 4.0}) {
    auto doc = cluster_json(4, 8, 8);
    doc["fabric"]["nodes_per_leaf"] = 2;
    doc["fabric"]["oversubscription"] = oversubscription;
    const Cluster cluster(cluster_spec(doc));
    // Rail-optimized: 2 NIC ports of 25 GB/s under each leaf.
    const double uplinks = 2 * 25e9 / oversubscription;
    REQUIRE(cluster.links()[static_cast<std::size_t>(cluster.leaf_uplink_bundle(0))].bytes_per_second == Approx(uplinks));
    double sum = 0;
    for (int s = 0; s < 4; ++s) {
      sum += cluster.links()[static_cast<std::size_t>(cluster.link_between(cluster.leaf_vertex(0), cluster.spine_vertex(s)))].bytes_per_second;
    }
    REQUIRE(sum == Approx(uplinks));
  }
}

TEST_CASE("rail-optimized fabrics put each rail on its own leaves", "[cluster]") {
  auto doc = cluster_json(4, 8, 8);
  doc["fabric"]["nodes_per_leaf"] = 2;
  const Cluster rails(cluster_spec(doc));
  REQUIRE(rails.leaf_of(rails.nic_at(0, 3)) == rails.leaf_of(rails.nic_at(1, 3)));
  REQUIRE(rails.leaf_of(rails.nic_at(0, 3)) != rails.leaf_of(rails.nic_at(2, 3)));
  REQUIRE(rails.leaf_of(rails.nic_at(0, 3)) != rails.leaf_of(rails.nic_at(0, 4)));
  doc["fabric"]["rail_optimized"] = false;
  const Cluster flat(cluster_spec(doc));
  REQUIRE(flat.leaf_count() == 2);
  REQUIRE(flat.leaf_of(flat.nic_at(0, 3)) == flat.leaf_of(flat.nic_at(0, 4)));
  REQUIRE(flat.leaf_of(flat.nic_at(1, 0)) == flat.leaf_of(flat.nic_at(0, 7)));
}
