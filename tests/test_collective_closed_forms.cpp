// Collectives on uniform links against their textbook alpha-beta formulas.
//
// The uniform profile makes every link reach its nominal bandwidth and every
// algorithm step cost alpha, with no launch cost, so the simulated time must
// be the closed form. Link latencies in the clusters are 0 (alpha carries
// the latency), PCIe is set to the NIC speed so that every link a transfer
// crosses has the same bandwidth B.
#include "fixtures.h"

#include <catch2/catch.hpp>

using namespace shardsim;
using namespace shardsim::workloads;
using test::World;

namespace {

constexpr double kAlpha = 2e-6;  // seconds per algorithm step
constexpr double kB = 25e9;      // bytes per second on every link

// One node of n GPUs on an NVSwitch: every GPU link carries B each way.
World single_node(int n) {
  auto doc = test::cluster_json(1, n, 1);
  doc["node"]["nvlink_bidirectional_bytes_per_second"] = 2 * kB;
  doc["node"]["pcie_switches"] = 1;
  return World(test::cluster_spec(doc), test::uniform_profile(kAlpha));
}

// n nodes of `gpus` GPUs, one NIC per GPU, all under one leaf; NVLink, PCIe
// and NICs all at B each way.
World nodes_of(int n, int gpus = 1, double message_overhead = 0) {
  return World(test::cluster_spec(test::uniform_nodes_json(n, gpus, kB)), test::uniform_profile(kAlpha, message_overhead));
}

void require_close(double simulated, double expected, double tolerance = 1e-3) {
  INFO("simulated " << simulated << " s, closed form " << expected << " s");
  REQUIRE(simulated == Approx(expected).epsilon(tolerance));
}

}  // namespace

TEST_CASE("ring all-reduce: 2(N-1)/N S/B + 2(N-1) alpha", "[collectives][closed_form]") {
  for (int n : {2, 4, 8}) {
    for (double s : {1.0 * (1 << 20), 256.0 * (1 << 20)}) {
      INFO("N = " << n << ", S = " << s);
      const double expected = 2.0 * (n - 1) / n * s / kB + 2.0 * (n - 1) * kAlpha;
      const World node = single_node(n);
      require_close(node.flow_seconds(node.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, s), expected);
      const World spread = nodes_of(n);
      require_close(spread.flow_seconds(spread.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, s), expected);
    }
  }
}

TEST_CASE("ring all-gather and reduce-scatter: (N-1)/N S/B + (N-1) alpha", "[collectives][closed_form]") {
  const double s = 64.0 * (1 << 20);
  for (int n : {2, 5, 8}) {
    const World world = nodes_of(n);
    const double expected = (n - 1.0) / n * s / kB + (n - 1) * kAlpha;
    for (CollectiveOp op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter}) {
      require_close(world.flow_seconds(world.all(), op, Algorithm::ring, Protocol::simple, s), expected);
    }
  }
}

TEST_CASE("pipelined broadcast and reduce chains: S/B + (N-1) alpha", "[collectives][closed_form]") {
  const double s = 64.0 * (1 << 20);
  const World world = single_node(8);
  for (CollectiveOp op : {CollectiveOp::broadcast, CollectiveOp::reduce}) {
    for (int root : {0, 5}) {
      require_close(world.flow_seconds(world.all(), op, Algorithm::ring, Protocol::simple, s, root),
                    s / kB + 7 * kAlpha);
    }
  }
}

TEST_CASE("tree all-reduce over 2 nodes: S/B + 2 alpha", "[collectives][closed_form]") {
  // Trees A and B each carry S/2 up and down one edge in opposite
  // directions, so each direction of the link carries S in all: S/B. Depth 1:
  // one step up, one down.
  const double s = 128.0 * (1 << 20);
  const World world = nodes_of(2);
  require_close(world.flow_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s),
                s / kB + 2 * kAlpha);
}

TEST_CASE("tree all-reduce over 4 nodes: 2S/B + 4 alpha", "[collectives][closed_form]") {
  // Tree A on positions 0..3: 3 is the root, 1 its child, 0 and 2 children of
  // 1; tree B mirrors it (p -> 3-p). Node 1 sends S/2 up and 2 x S/2 down in
  // A and S/2 up in B: 2S through its NIC, the most of any node. Depth 2.
  const double s = 128.0 * (1 << 20);
  const World world = nodes_of(4);
  require_close(world.flow_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s),
                2 * s / kB + 4 * kAlpha);
}

TEST_CASE("hierarchical all-reduce on 2 nodes x 2 GPUs: 3/2 S/B + 4 alpha", "[collectives][closed_form]") {
  // Reduce-scatter in the node: S/2 over NVLink, 1 step. All-reduce of S/2
  // per rail across 2 nodes: 2(1)/2 x S/2 = S/2, 2 steps. All-gather: S/2, 1 step.
  const double s = 128.0 * (1 << 20);
  const World world = nodes_of(2, 2);
  require_close(world.flow_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::hierarchical, Protocol::simple, s),
                1.5 * s / kB + 4 * kAlpha);
}

TEST_CASE("a ring that spans nodes pays the network post overhead on every step, NVLink steps included",
          "[collectives][closed_form]") {
  // NVLink steps 1 us, network steps 10 us, a floor of 4 us. On 2 nodes x 2
  // GPUs each channel's ring has two NVLink and two network steps, so the
  // mean step goes from (2 x 1 + 2 x 10) / 4 = 5.5 us to (2 x 4 + 2 x 10) / 4
  // = 7 us: 6 x 1.5 = 9 us more for an all-reduce (2(N-1) = 6 steps), 3 x 1.5
  // = 4.5 us for an all-gather or reduce-scatter (3 steps). The bytes move as
  // before, so the difference is the latency alone, at any size.
  const auto profile_with_floor = [](double floor_seconds) {
    nlohmann::json doc = test::uniform_profile_json(kAlpha);
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      nlohmann::json& simple = doc["collectives"][op]["ring"]["simple"];
      simple["hop_latency_seconds"]["nvlink"] = 1e-6;
      simple["hop_latency_seconds"]["network"] = 10e-6;
      simple["multi_node_step_floor_seconds"] = floor_seconds;
    }
    return calib::parse_profile(doc, "floor-profile.json");
  };
  const auto spec = test::cluster_spec(test::uniform_nodes_json(2, 2, kB));
  const World floored(spec, profile_with_floor(4e-6));
  const World unfloored(spec, profile_with_floor(0));
  const double s = 32.0 * (1 << 20);
  for (const auto& [op, extra] : {std::pair{CollectiveOp::all_reduce, 9e-6},
                                  std::pair{CollectiveOp::all_gather, 4.5e-6},
                                  std::pair{CollectiveOp::reduce_scatter, 4.5e-6}}) {
    INFO(to_string(op));
    const auto group = floored.all();
    REQUIRE(floored.flow_seconds(group, op, Algorithm::ring, Protocol::simple, s) -
                unfloored.flow_seconds(group, op, Algorithm::ring, Protocol::simple, s) ==
            Approx(extra).epsilon(1e-6));
    REQUIRE(floored.analytical_seconds(group, op, Algorithm::ring, Protocol::simple, s) -
                unfloored.analytical_seconds(group, op, Algorithm::ring, Protocol::simple, s) ==
            Approx(extra).epsilon(1e-6));
    // Inside one node no step posts to the network: the floor is not paid.
    const auto node = floored.group({0, 1});
    REQUIRE(floored.flow_seconds(node, op, Algorithm::ring, Protocol::simple, s) ==
            unfloored.flow_seconds(node, op, Algorithm::ring, Protocol::simple, s));
  }
}

TEST_CASE("the step floor is a ring field of all-reduce, all-gather and reduce-scatter alone",
          "[collectives][profile]") {
  nlohmann::json doc = test::uniform_profile_json(kAlpha);
  doc["collectives"]["all_reduce"]["ring"]["simple"]["multi_node_step_floor_seconds"] = -1e-6;
  CHECK_THROWS_WITH(calib::parse_profile(doc, "p.json"),
                    Catch::Contains("collectives.all_reduce.ring.simple.multi_node_step_floor_seconds"));
  doc = test::uniform_profile_json(kAlpha);
  doc["collectives"]["broadcast"]["ring"]["simple"]["multi_node_step_floor_seconds"] = 1e-6;
  CHECK_THROWS_WITH(calib::parse_profile(doc, "p.json"), Catch::Contains("only rings of all_reduce"));
  doc = test::uniform_profile_json(kAlpha);
  doc["collectives"]["all_reduce"]["tree"]["simple"]["multi_node_step_floor_seconds"] = 1e-6;
  CHECK_THROWS_WITH(calib::parse_profile(doc, "p.json"), Catch::Contains("all_reduce.tree.simple"));
}

TEST_CASE("a tree's bandwidth correction divides the bandwidth term by the factor of the buffer's size step",
          "[collectives][closed_form]") {
  // Over 2 nodes the tree takes S/B + 2 alpha (above); with a correction c it
  // reaches c B, so S/(c B) + 2 alpha. The steps: 0.5 from 1 MiB (and below
  // it, as the first), 0.8 from 16 MiB, none from 256 MiB.
  const double mib = 1 << 20;
  nlohmann::json doc = test::uniform_profile_json(kAlpha);
  doc["collectives"]["all_reduce"]["tree"]["simple"]["bandwidth_correction"] = {
      {{"from_bytes", mib}, {"factor", 0.5}}, {{"from_bytes", 16 * mib}, {"factor", 0.8}},
      {{"from_bytes", 256 * mib}, {"factor", 1.0}}};
  const World world(test::cluster_spec(test::uniform_nodes_json(2, 1, kB)), calib::parse_profile(doc, "tree.json"));
  for (const auto& [s, factor] : {std::pair{0.25 * mib, 0.5}, std::pair{mib, 0.5}, std::pair{16 * mib - 1, 0.5},
                                  std::pair{16 * mib, 0.8}, std::pair{255 * mib, 0.8}, std::pair{512 * mib, 1.0}}) {
    INFO("S = " << s);
    const double expected = s / (factor * kB) + 2 * kAlpha;
    require_close(world.flow_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s),
                  expected);
    require_close(world.analytical_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s),
                  expected, 1e-9);
  }
}

TEST_CASE("a ring all-reduce across nodes takes the plateau's latency factor from its threshold on",
          "[collectives][closed_form]") {
  // 2 nodes x 2 GPUs, a NIC per GPU: 2 channels, 4 ranks, 6 steps of alpha,
  // 2(3)/4 S/B of bytes, a 5 us launch. With 128 KiB per rank and channel the
  // threshold is 128 KiB x 4 x 2 = 1 MiB; from there the launch and the steps
  // take 1.5 times as long, and the bytes move as before.
  const double mib = 1 << 20;
  nlohmann::json doc = test::uniform_profile_json(kAlpha);
  doc["collectives"]["all_reduce"]["ring"]["simple"]["base_latency_seconds"] = 5e-6;
  doc["collectives"]["all_reduce"]["ring"]["simple"]["multi_node_plateau"] = {
      {"latency_factor", 1.5}, {"from_bytes_per_rank_and_channel", 128 * 1024}};
  const World world(test::cluster_spec(test::uniform_nodes_json(2, 2, kB)), calib::parse_profile(doc, "plateau.json"));
  REQUIRE(world.all().channels.size() == 2);
  const double latency = 5e-6 + 6 * kAlpha;
  for (const auto& [s, factor] : {std::pair{mib - 1, 1.0}, std::pair{mib, 1.5}, std::pair{64 * mib, 1.5}}) {
    INFO("S = " << s);
    const double expected = 1.5 * s / kB + factor * latency;
    require_close(world.flow_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, s),
                  expected, 1e-6);
    require_close(world.analytical_seconds(world.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, s),
                  expected, 1e-9);
  }
  // Inside one node there is no plateau.
  const auto node = world.group({0, 1});
  const double s = 64 * mib;
  require_close(world.flow_seconds(node, CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, s),
                s / kB + 5e-6 + 2 * kAlpha, 1e-6);
}

TEST_CASE("size corrections are refused where NCCL has none, and when malformed", "[collectives][profile]") {
  const auto profile_with = [](const char* op, const char* algorithm, const char* key, const nlohmann::json& value) {
    nlohmann::json doc = test::uniform_profile_json(kAlpha);
    doc["collectives"][op][algorithm]["simple"][key] = value;
    return doc;
  };
  const auto parse = [](const nlohmann::json& doc) { return calib::parse_profile(doc, "p.json"); };
  const nlohmann::json plateau = {{"latency_factor", 1.4}, {"from_bytes_per_rank_and_channel", 64}};
  const nlohmann::json steps = {{{"from_bytes", 64}, {"factor", 0.9}}, {{"from_bytes", 128}, {"factor", 1.0}}};
  CHECK_NOTHROW(parse(profile_with("all_reduce", "ring", "multi_node_plateau", plateau)));
  CHECK_NOTHROW(parse(profile_with("all_reduce", "tree", "bandwidth_correction", steps)));
  CHECK_THROWS_WITH(parse(profile_with("all_gather", "ring", "multi_node_plateau", plateau)),
                    Catch::Contains("only ring all_reduce"));
  CHECK_THROWS_WITH(parse(profile_with("all_reduce", "tree", "multi_node_plateau", plateau)),
                    Catch::Contains("only ring all_reduce"));
  CHECK_THROWS_WITH(parse(profile_with("all_reduce", "ring", "multi_node_plateau",
                                       {{"latency_factor", 0.5}, {"from_bytes_per_rank_and_channel", 64}})),
                    Catch::Contains("all_reduce.ring.simple.multi_node_plateau.latency_factor"));
  CHECK_THROWS_WITH(parse(profile_with("all_reduce", "ring", "bandwidth_correction", steps)),
                    Catch::Contains("only trees"));
  CHECK_THROWS_WITH(parse(profile_with("all_reduce", "tree", "bandwidth_correction", nlohmann::json::array())),
                    Catch::Contains("non-empty array"));
  const nlohmann::json repeated = {{{"from_bytes", 128}, {"factor", 0.9}}, {{"from_bytes", 128}, {"factor", 1.0}}};
  CHECK_THROWS_WITH(parse(profile_with("all_reduce", "tree", "bandwidth_correction", repeated)),
                    Catch::Contains("bandwidth_correction[1]: from_bytes must increase"));
  CHECK_THROWS_WITH(parse(profile_with("all_reduce", "tree", "bandwidth_correction",
                                       {{{"from_bytes", 64}, {"factor", 1.5}}})),
                    Catch::Contains("bandwidth_correction[0].factor"));
}

TEST_CASE("a protocol's bandwidth factor follows the group's shape: one node, under two ranks per node, or more",
          "[collectives][closed_form]") {
  // 2 nodes x 2 GPUs, every link at B. Rings and trees reach c B, with c 0.5
  // in general, 0.8 inside one node and 0.25 under two ranks per node, so
  // their bytes terms divide by c and their step counts stay.
  const double s = 64.0 * (1 << 20);
  nlohmann::json doc = test::uniform_profile_json(kAlpha);
  for (const auto& [op, algorithm] : {std::pair{"all_reduce", "ring"}, std::pair{"all_reduce", "tree"},
                                      std::pair{"all_gather", "ring"}, std::pair{"reduce_scatter", "ring"},
                                      std::pair{"broadcast", "ring"}}) {
    auto& simple = doc["collectives"][op][algorithm]["simple"];
    simple["bandwidth_factor"] = 0.5;
    simple["single_node_bandwidth_factor"] = 0.8;
    simple["one_rank_per_node_bandwidth_factor"] = 0.25;
  }
  const World world(test::cluster_spec(test::uniform_nodes_json(2, 2, kB)), calib::parse_profile(doc, "shape.json"));
  const auto both_modes = [&](const sim::GroupLayout& group, CollectiveOp op, Algorithm algorithm, double expected) {
    require_close(world.flow_seconds(group, op, algorithm, Protocol::simple, s), expected);
    require_close(world.analytical_seconds(group, op, algorithm, Protocol::simple, s), expected, 1e-9);
  };
  const auto all_gather = [&](const sim::GroupLayout& group, double c) {
    const double n = group.size();
    both_modes(group, CollectiveOp::all_gather, Algorithm::ring, (n - 1) / n * s / (c * kB) + (n - 1) * kAlpha);
    both_modes(group, CollectiveOp::reduce_scatter, Algorithm::ring, (n - 1) / n * s / (c * kB) + (n - 1) * kAlpha);
  };
  SECTION("inside one node") {
    all_gather(world.group({0, 1}), 0.8);
    both_modes(world.group({0, 1}), CollectiveOp::broadcast, Algorithm::ring, s / (0.8 * kB) + kAlpha);
  }
  SECTION("one GPU on each of two nodes") {
    all_gather(world.group({0, 2}), 0.25);
    both_modes(world.group({0, 2}), CollectiveOp::all_reduce, Algorithm::tree, s / (0.25 * kB) + 2 * kAlpha);
  }
  SECTION("two GPUs per node") {
    all_gather(world.all(), 0.5);
    both_modes(world.all(), CollectiveOp::all_reduce, Algorithm::ring, 1.5 * s / (0.5 * kB) + 6 * kAlpha);
  }
  SECTION("hierarchical: each phase takes its own sub-groups' shape") {
    // Reduce-scatter and all-gather of S inside each node at 0.8 B: S/2 / 0.8
    // each. All-reduce of S/2 across each rail, one GPU per node, at 0.25 B:
    // 2(1)/2 x S/2 / 0.25. Steps: 1 + 2 + 1.
    both_modes(world.all(), CollectiveOp::all_reduce, Algorithm::hierarchical,
               (2 * 0.5 / 0.8 + 0.5 / 0.25) * s / kB + 4 * kAlpha);
  }
}

TEST_CASE("beyond two nodes a channel cap below the NIC's speed scales the bytes term by cap / B",
          "[collectives][closed_form]") {
  // Every link at B = 25 GB/s, so each channel (one NIC per GPU) could carry
  // B; capped at 10 GB/s the tree and the ring reach 0.4 B from three nodes
  // up, and B on two nodes, where NCCL's caps are not the network's.
  const double s = 64.0 * (1 << 20);
  const double cap = 10e9;
  nlohmann::json doc = test::uniform_profile_json(kAlpha);
  doc["collectives"]["all_reduce"]["tree"]["simple"]["channel_cap_bytes_per_second"] = cap;
  doc["collectives"]["all_gather"]["ring"]["simple"]["channel_cap_bytes_per_second"] = cap;
  const calib::Profile profile = calib::parse_profile(doc, "cap.json");
  for (int n : {2, 4}) {
    const World world(test::cluster_spec(test::uniform_nodes_json(n, 1, kB)), profile);
    const double c = n > 2 ? cap / kB : 1.0;
    INFO(n << " nodes");
    // The tree as in "tree all-reduce over 2 (4) nodes" above.
    const double tree = (n > 2 ? 2 * s : s) / (c * kB) + (n > 2 ? 4 : 2) * kAlpha;
    const double ring = (n - 1.0) / n * s / (c * kB) + (n - 1) * kAlpha;
    for (auto seconds : {&World::flow_seconds, &World::analytical_seconds}) {
      require_close((world.*seconds)(world.all(), CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple, s, 0),
                    tree);
      require_close((world.*seconds)(world.all(), CollectiveOp::all_gather, Algorithm::ring, Protocol::simple, s, 0),
                    ring);
    }
  }
}

TEST_CASE("shape factors and channel caps are ring and tree fields, in range", "[collectives][profile]") {
  const auto refused = [](const char* op, const char* algorithm, const char* field, double value, const char* why) {
    nlohmann::json doc = test::uniform_profile_json(kAlpha);
    doc["collectives"][op][algorithm]["simple"][field] = value;
    CHECK_THROWS_WITH(calib::parse_profile(doc, "p.json"),
                      Catch::Contains(std::string(op) + "." + algorithm + ".simple." + field) && Catch::Contains(why));
  };
  refused("all_to_all", "direct", "single_node_bandwidth_factor", 0.5, "only rings and trees");
  refused("reduce", "ring", "one_rank_per_node_bandwidth_factor", 1.5, "fraction");
  refused("send_recv", "direct", "channel_cap_bytes_per_second", 1e9, "only rings and trees");
  refused("all_reduce", "tree", "channel_cap_bytes_per_second", 0, "positive");
}

TEST_CASE("all-to-all: (N-1)/N S/B + alpha, plus one message overhead per remote peer", "[collectives][closed_form]") {
  const double s = 256.0 * (1 << 20);
  const World node = single_node(8);
  require_close(node.flow_seconds(node.all(), CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, s),
                7.0 / 8 * s / kB + kAlpha);
  const double overhead = 1e-6;
  const World spread = nodes_of(6, 1, overhead);
  require_close(spread.flow_seconds(spread.all(), CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, s),
                5.0 / 6 * s / kB + kAlpha + 5 * overhead);
}

TEST_CASE("send/recv to the next rank: S/B + alpha", "[collectives][closed_form]") {
  const double s = 64.0 * (1 << 20);
  const World node = single_node(4);
  require_close(node.flow_seconds(node.all(), CollectiveOp::send_recv, Algorithm::direct, Protocol::simple, s),
                s / kB + kAlpha);
}

TEST_CASE("a 2:1 oversubscribed spine halves cross-leaf throughput of a saturating all-to-all", "[collectives][closed_form]") {
  // Two nodes of 8 GPUs, each node under its own leaves: every byte between
  // the nodes crosses the spine. At 1:1 a leaf's uplinks match its one NIC
  // port; at 2:1 they carry half of it.
  auto throughput = [](double oversubscription, int nodes_per_leaf) {
    auto doc = test::cluster_json(2, 8, 8);
    doc["fabric"]["nodes_per_leaf"] = nodes_per_leaf;
    doc["fabric"]["oversubscription"] = oversubscription;
    const World world(test::cluster_spec(doc), calib::load_profile("a100"));
    const double s = 8.0 * (1 << 30);
    const auto run = world.run(world.all(), CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, s);
    // Bytes that went node to node, counted where they enter a NIC from the fabric.
    double crossed = 0;
    for (std::size_t l = 0; l < world.cluster().links().size(); ++l) {
      const auto& link = world.cluster().links()[l];
      if (link.kind == topology::LinkKind::network && !link.bundle && link.to >= 0 &&
          !world.cluster().is_fabric_switch(link.to)) {
        crossed += run.link_bytes[l];
      }
    }
    REQUIRE(crossed == Approx(2 * 8 * 8 * s / 16).epsilon(1e-9));  // every GPU sends S/16 to each remote GPU
    return crossed / seconds_from_picoseconds(run.duration);
  };
  REQUIRE(throughput(2.0, 1) / throughput(1.0, 1) == Approx(0.5).epsilon(0.01));
  // Control: with both nodes under one leaf nothing crosses the spine.
  REQUIRE(throughput(2.0, 2) / throughput(1.0, 2) == Approx(1.0).epsilon(1e-9));
}
