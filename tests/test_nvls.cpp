// NVLS and NVLS tree (NVLink SHARP all-reduce) against the traffic model
// worked by hand in nvls.h: per GPU and direction S (n+1)/n over NVLink
// inside a node; across nodes S + S/C on every head, and the tree's share on
// each NIC. Closed forms on uniform links, link bytes the flow network
// measured, and which algorithm NCCL's choice lands on.
#include "fixtures.h"

#include "sim/collectives/selection.h"

#include <catch2/catch.hpp>

using namespace shardsim;
using namespace shardsim::workloads;
using test::World;

namespace {

constexpr double kAlpha = 2e-6;  // seconds per algorithm step
constexpr double kB = 25e9;      // bytes per second on every link

// The uniform profile (full bandwidth everywhere, alpha per step) with NVLS
// and NVLS tree at bandwidth factor `factor`.
calib::Profile uniform_with_nvls(double factor) {
  auto doc = test::uniform_profile_json(kAlpha);
  nlohmann::json nvls = doc["collectives"]["all_reduce"]["ring"];
  nvls["simple"]["bandwidth_factor"] = factor;
  doc["collectives"]["all_reduce"]["nvls"] = nvls;
  doc["collectives"]["all_reduce"]["nvls_tree"] = nvls;
  return calib::parse_profile(doc, "uniform-nvls.json");
}

World uniform_nodes(int nodes, int gpus, double factor = 1.0) {
  return World(test::cluster_spec(test::uniform_nodes_json(nodes, gpus, kB)), uniform_with_nvls(factor));
}

double link_bytes(const World& world, const std::vector<double>& bytes, int from_vertex, int to_vertex) {
  return bytes[static_cast<std::size_t>(world.cluster().link_between(from_vertex, to_vertex))];
}

}  // namespace

TEST_CASE("NVLS inside a node: (n+1)/n S/B + one step", "[collectives][closed_form][nvls]") {
  for (int n : {2, 4, 8}) {
    const World world = uniform_nodes(1, n);
    for (double s : {1.0 * (1 << 20), 256.0 * (1 << 20)}) {
      INFO("n = " << n << ", S = " << s);
      const double expected = (n + 1.0) / n * s / kB + kAlpha;
      const auto all = world.all();
      REQUIRE(world.flow_seconds(all, CollectiveOp::all_reduce, Algorithm::nvls, Protocol::simple, s) ==
              Approx(expected).epsilon(1e-3));
      REQUIRE(world.analytical_seconds(all, CollectiveOp::all_reduce, Algorithm::nvls, Protocol::simple, s) ==
              Approx(expected).epsilon(1e-3));
    }
  }
}

TEST_CASE("NVLS tree on two nodes: (1 + 1/C) S/B over NVLink, three steps", "[collectives][closed_form][nvls]") {
  // Every GPU heads one of the C = g channels. Its NVLink carries S up and
  // down plus its slice S/C; its NIC carries S/(2C) per tree, and each of the
  // two trees has the one edge, so S/C each way: NVLink is the bottleneck.
  // Latency: the switch step, then up and down a tree of depth 1.
  for (int g : {2, 4, 8}) {
    const World world = uniform_nodes(2, g);
    const double s = 256.0 * (1 << 20);
    INFO("g = " << g);
    const double expected = (1.0 + 1.0 / g) * s / kB + 3 * kAlpha;
    const auto all = world.all();
    REQUIRE(world.flow_seconds(all, CollectiveOp::all_reduce, Algorithm::nvls_tree, Protocol::simple, s) ==
            Approx(expected).epsilon(1e-3));
    REQUIRE(world.analytical_seconds(all, CollectiveOp::all_reduce, Algorithm::nvls_tree, Protocol::simple, s) ==
            Approx(expected).epsilon(1e-3));

    const auto run = world.run(all, CollectiveOp::all_reduce, Algorithm::nvls_tree, Protocol::simple, s);
    const auto& cluster = world.cluster();
    for (topology::GpuId gpu = 0; gpu < cluster.gpu_count(); ++gpu) {
      const int nvswitch = cluster.nvswitch_vertex(cluster.node_of(gpu));
      REQUIRE(link_bytes(world, run.link_bytes, gpu, nvswitch) == Approx((1.0 + 1.0 / g) * s));
      REQUIRE(link_bytes(world, run.link_bytes, nvswitch, gpu) == Approx((1.0 + 1.0 / g) * s));
    }
    for (topology::NicId nic = 0; nic < cluster.nodes() * cluster.nics_per_node(); ++nic) {
      const int leaf = cluster.leaf_vertex(cluster.leaf_of(nic));
      REQUIRE(link_bytes(world, run.link_bytes, cluster.nic_vertex(nic), leaf) == Approx(s / g));
      REQUIRE(link_bytes(world, run.link_bytes, leaf, cluster.nic_vertex(nic)) == Approx(s / g));
    }
  }
}

TEST_CASE("NVLS link bytes are S (n+1)/n per GPU each way; the protocol's factor slows them, adds none",
          "[collectives][conservation][nvls]") {
  const double factor = 0.8;
  const World world = uniform_nodes(1, 8, factor);
  const World ideal = uniform_nodes(1, 8);
  const double s = 64.0 * (1 << 20), n = 8;
  const auto run = world.run(world.all(), CollectiveOp::all_reduce, Algorithm::nvls, Protocol::simple, s);
  const int nvswitch = world.cluster().nvswitch_vertex(0);
  for (topology::GpuId gpu = 0; gpu < 8; ++gpu) {
    REQUIRE(link_bytes(world, run.link_bytes, gpu, nvswitch) == Approx((n + 1) / n * s));
    REQUIRE(link_bytes(world, run.link_bytes, nvswitch, gpu) == Approx((n + 1) / n * s));
  }
  const double big = 16.0 * (1 << 30);
  const auto slowed = [&](const World& w) {
    return w.flow_seconds(w.all(), CollectiveOp::all_reduce, Algorithm::nvls, Protocol::simple, big);
  };
  REQUIRE(slowed(world) / slowed(ideal) == Approx(1 / factor).epsilon(1e-3));
  // At full switch efficiency the bus bandwidth gain over a ring on the same
  // links is 2 (n-1)/n over (n+1)/n: 14/9 on 8 GPUs.
  const double ring = ideal.flow_seconds(ideal.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, big);
  const double nvls = ideal.flow_seconds(ideal.all(), CollectiveOp::all_reduce, Algorithm::nvls, Protocol::simple, big);
  REQUIRE(ring / nvls == Approx(14.0 / 9.0).epsilon(1e-3));
}

TEST_CASE("NVLS runs only all-reduce, inside a node or as a tree over whole nodes", "[collectives][nvls]") {
  const World world("h100-8node");
  const auto node = world.group({0, 1, 2, 3, 4, 5, 6, 7});
  const auto two_nodes = world.group({0, 1, 2, 3, 8, 9, 10, 11});
  const auto one_per_node = world.group({0, 8, 16, 24});
  const auto uneven = world.group({0, 1, 2, 8});
  const auto& nvls = sim::collective_algorithm(Algorithm::nvls);
  const auto& tree = sim::collective_algorithm(Algorithm::nvls_tree);
  CHECK(nvls.unsupported_reason(CollectiveOp::all_reduce, node).empty());
  CHECK_FALSE(nvls.unsupported_reason(CollectiveOp::reduce_scatter, node).empty());
  CHECK_FALSE(nvls.unsupported_reason(CollectiveOp::all_reduce, two_nodes).empty());
  CHECK(tree.unsupported_reason(CollectiveOp::all_reduce, two_nodes).empty());
  CHECK_FALSE(tree.unsupported_reason(CollectiveOp::all_reduce, node).empty());
  CHECK_FALSE(tree.unsupported_reason(CollectiveOp::all_reduce, one_per_node).empty());
  CHECK_FALSE(tree.unsupported_reason(CollectiveOp::all_reduce, uneven).empty());
  REQUIRE_THROWS_AS(sim::AlgorithmChooser(world.context(one_per_node), {CollectiveOp::all_reduce, 0},
                                          Algorithm::nvls_tree),
                    std::invalid_argument);
}

TEST_CASE("NCCL's choice: ring LL for small all-reduces, NVLS for large ones where the switch has it",
          "[collectives][nvls]") {
  const World h200("h200-1024");
  const auto node = h200.group({0, 1, 2, 3, 4, 5, 6, 7});
  const sim::AlgorithmChooser chooser(h200.context(node), {CollectiveOp::all_reduce, 0});
  CHECK(chooser.choose(4096).algorithm == Algorithm::ring);
  CHECK(chooser.choose(4096).protocol == Protocol::ll);
  CHECK(chooser.choose(1 << 30).algorithm == Algorithm::nvls);
  const auto two_nodes = h200.group({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  CHECK(sim::AlgorithmChooser(h200.context(two_nodes), {CollectiveOp::all_reduce, 0}).choose(1 << 30).algorithm ==
        Algorithm::nvls_tree);

  // A100's NVSwitch has no in-switch reduction: its profile lists no NVLS.
  const World a100("dgx-a100-8node");
  const auto a100_node = a100.group({0, 1, 2, 3, 4, 5, 6, 7});
  const sim::AlgorithmChooser a100_chooser(a100.context(a100_node), {CollectiveOp::all_reduce, 0});
  for (const auto& candidate : a100_chooser.candidates()) {
    CHECK(candidate.algorithm != Algorithm::nvls);
    CHECK(candidate.algorithm != Algorithm::nvls_tree);
  }
  // Pinned, it is refused naming the profile's missing entry and why.
  REQUIRE_THROWS_WITH(sim::AlgorithmChooser(a100.context(a100_node), {CollectiveOp::all_reduce, 0}, Algorithm::nvls),
                      Catch::Contains("a100.json: collectives.all_reduce.nvls: missing") &&
                          Catch::Contains("in-switch reduction of third-generation NVSwitch"));
}
