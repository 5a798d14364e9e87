// The shape of what the algorithms build: rings that visit every rank once
// and stay on one rail, binary trees that are trees, NCCL-like choices, and
// runs that repeat exactly.
#include "fixtures.h"
#include "sim/collective_sweep.h"
#include "sim/collectives/binary_tree.h"
#include "sim/collectives/cost_model.h"
#include "sim/collectives/direct.h"
#include "sim/collectives/ring.h"
#include "sim/collectives/ring_chain.h"
#include "sim/collectives/selection.h"
#include "topology/base/presets.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <set>

using namespace shardsim;
using namespace shardsim::workloads;
using test::World;

TEST_CASE("every ring channel is one cycle through every rank, rail-aligned between nodes", "[collectives][ring]") {
  for (const std::string preset : {"dgx-a100-8node", "h100-8node", "a800-1024"}) {
    const World world(preset);
    std::vector<topology::GpuId> gpus;
    for (int g = 0; g < 64; ++g) gpus.push_back(g);
    const auto group = world.group(gpus);
    const auto channels = sim::build_node_channels(world.cluster(), group);
    REQUIRE(static_cast<int>(channels.size()) == world.cluster().nics_per_node());  // one channel per NIC
    for (const auto& channel : channels) {
      const auto hops = sim::ring_hops(channel);
      REQUIRE(hops.size() == gpus.size());
      std::set<topology::GpuId> senders, receivers;
      for (std::size_t i = 0; i < hops.size(); ++i) {
        senders.insert(hops[i].src);
        receivers.insert(hops[i].dst);
        REQUIRE(hops[i].dst == hops[(i + 1) % hops.size()].src);  // a cycle
        if (world.cluster().node_of(hops[i].src) != world.cluster().node_of(hops[i].dst)) {
          REQUIRE(world.cluster().rail_of(hops[i].src_nic) == world.cluster().rail_of(hops[i].dst_nic));
          // The GPU that receives from the network sits next to the NIC.
          REQUIRE(world.cluster().is_attached(hops[i].dst, hops[i].dst_nic));
        }
      }
      REQUIRE(senders.size() == gpus.size());
      REQUIRE(receivers.size() == gpus.size());
    }
  }
}

TEST_CASE("binary trees are spanning trees of at most two children", "[collectives][tree]") {
  for (int m = 1; m <= 130; ++m) {
    const auto [a, b] = sim::double_binary_tree(m);
    for (const auto* tree : {&a, &b}) {
      int roots = 0;
      for (int p = 0; p < m; ++p) {
        if (tree->parent[static_cast<std::size_t>(p)] < 0) ++roots;
        REQUIRE(tree->children(p).size() <= 2);
        int steps = 0;  // every node reaches the root
        for (int q = p; tree->parent[static_cast<std::size_t>(q)] >= 0; q = tree->parent[static_cast<std::size_t>(q)]) {
          REQUIRE(++steps <= m);
        }
      }
      REQUIRE(roots == 1);
    }
  }
}

TEST_CASE("the double binary tree is logarithmically deep and shares its inner nodes out", "[collectives][tree]") {
  for (int k = 1; k <= 7; ++k) {
    const int m = 1 << k;
    const auto [a, b] = sim::double_binary_tree(m);
    REQUIRE(a.depth() == k);
    int inner_in_both = 0;
    for (int p = 0; p < m; ++p) {
      if (!a.children(p).empty() && !b.children(p).empty()) ++inner_in_both;
    }
    // Mirroring turns A's leaves (even positions) into B's inner nodes: at
    // most one node works as an inner node in both trees.
    REQUIRE(inner_in_both <= 1);
  }
}

TEST_CASE("auto picks what NCCL picks: low-latency protocols for small messages, tree across nodes", "[collectives][selection]") {
  const World world("dgx-a100-1024");
  const auto all = world.all();
  const sim::AlgorithmChooser across(world.context(all), {CollectiveOp::all_reduce, 0});
  REQUIRE(across.choose(8).algorithm == Algorithm::tree);
  REQUIRE(across.choose(8).protocol == Protocol::ll);
  REQUIRE(across.choose(8.0 * (1 << 30)).protocol == Protocol::simple);
  const auto node = world.group({0, 1, 2, 3, 4, 5, 6, 7});
  const sim::AlgorithmChooser inside(world.context(node), {CollectiveOp::all_reduce, 0});
  REQUIRE(inside.choose(1.0 * (1 << 30)).algorithm == Algorithm::ring);
  const sim::AlgorithmChooser gather(world.context(all), {CollectiveOp::all_gather, 0});
  REQUIRE(gather.choose(1.0 * (1 << 30)).algorithm == Algorithm::ring);
  // The chosen candidate is the fastest of those listed.
  for (double bytes : {8.0, 1e6, 1e9}) {
    for (const auto& candidate : across.candidates()) {
      REQUIRE(across.choose(bytes).cost.seconds(bytes) <= candidate.cost.seconds(bytes));
    }
  }
}

TEST_CASE("a pinned algorithm that cannot run the call is refused with the reason", "[collectives][selection]") {
  const World world("dgx-a100-2node");
  const auto all = world.all();
  REQUIRE_THROWS_WITH(sim::AlgorithmChooser(world.context(all), {CollectiveOp::all_gather, 0}, Algorithm::tree),
                      "tree only implements all_reduce (as in NCCL)");
  const auto uneven = world.group({0, 1, 2, 8});
  REQUIRE_THROWS_WITH(
      sim::AlgorithmChooser(world.context(uneven), {CollectiveOp::all_reduce, 0}, Algorithm::hierarchical),
      "hier needs the same number of GPUs on every node");
}

TEST_CASE("bigger messages never finish sooner, and more bandwidth never makes them slower", "[collectives]") {
  const World a100("dgx-a100-8node");
  const World h100("h100-8node");
  double previous = 0;
  for (double bytes = 1024; bytes <= 4.0 * (1 << 30); bytes *= 16) {
    const double t = a100.flow_seconds(a100.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, bytes);
    REQUIRE(t > previous);
    previous = t;
  }
  // Same shape with twice the NIC bandwidth and 1.5x the NVLink bandwidth.
  const double big = 4.0 * (1 << 30);
  REQUIRE(h100.flow_seconds(h100.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, big) <
          a100.flow_seconds(a100.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, big));
}

TEST_CASE("two runs of a sweep give identical results", "[collectives][determinism]") {
  const World world("dgx-a100-8node");
  topology::Router router(world.cluster());
  sim::CollectiveSweep sweep;
  sweep.sizes = sim::geometric_sizes(8, 1 << 28, 4);
  for (CollectiveOp op : all_collective_ops()) {
    sweep.op = op;
    const auto first = sim::run_collective_sweep(world.cluster(), router, world.profile(), world.all(), sweep);
    const auto second = sim::run_collective_sweep(world.cluster(), router, world.profile(), world.all(), sweep);
    REQUIRE(first.size() == sweep.sizes.size());
    for (std::size_t i = 0; i < first.size(); ++i) {
      REQUIRE(first[i].seconds == second[i].seconds);  // bit for bit
      REQUIRE(first[i].algorithm == second[i].algorithm);
    }
  }
}

TEST_CASE("hash ECMP collisions never beat an even split", "[collectives][routing]") {
  // Spreading every flow evenly over the spines balances the uplinks of a
  // symmetric all-to-all perfectly; pinning flows to hashed paths can only
  // pile some of them onto the same uplink.
  auto doc = nlohmann::json::parse(std::ifstream(shardsim::data_directory() + "/topology/clusters/dgx-a100-8node.json"));
  const World split(topology::parse_cluster_spec(doc, "split.json"), calib::load_profile("a100"));
  doc["fabric"]["ecmp"] = "hash";
  const World hash(topology::parse_cluster_spec(doc, "hash.json"), calib::load_profile("a100"));
  const double bytes = 1.0 * (1 << 30);
  const double even = split.flow_seconds(split.all(), CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, bytes);
  const double hashed = hash.flow_seconds(hash.all(), CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, bytes);
  REQUIRE(hashed >= even);
  // A ring stays on its rail's leaves and spines it crosses alike, so the
  // routing mode hardly matters to it.
  const double ring_split = split.flow_seconds(split.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, bytes);
  const double ring_hash = hash.flow_seconds(hash.all(), CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, bytes);
  REQUIRE(ring_hash == Approx(ring_split).epsilon(0.01));
}

TEST_CASE("a chain is its ring less one hop: plan and cost as routing the chain's own hops", "[collectives][ring]") {
  // Hash ECMP, so that a hop's spine depends on its flow key: a chain hop
  // must take the path of the ring connection it uses.
  auto doc = nlohmann::json::parse(std::ifstream(shardsim::data_directory() + "/topology/clusters/dgx-a100-8node.json"));
  doc["fabric"]["ecmp"] = "hash";
  const World world(topology::parse_cluster_spec(doc, "hash.json"), calib::load_profile("a100"));
  const auto group = world.group({0, 1, 2, 9, 12, 17, 18, 30, 33, 47, 50, 63});  // uneven nodes and NICs
  sim::RingChainCache cache;
  sim::CollectiveContext cached = world.context(group);
  cached.ring_chains = &cache;
  for (CollectiveOp op : {CollectiveOp::broadcast, CollectiveOp::reduce}) {
    for (Protocol protocol : {Protocol::ll, Protocol::simple}) {
      const auto& params = sim::protocol_params(world.profile(), op, Algorithm::ring, protocol);
      for (int root = 0; root < group.size(); ++root) {
        INFO(to_string(op) << " " << to_string(protocol) << " root " << root);
        const topology::GpuId root_gpu = group.ranks[static_cast<std::size_t>(root)];
        // By definition: every ring hop but the one into the root
        // (broadcast) or out of it (reduce), routed with its ring position
        // as flow key, and priced by the cost model from those hops alone.
        sim::TransferBuilder builder(world.router(), params);
        sim::LinkLoadCounter load(world.cluster());
        std::vector<std::vector<sim::Hop>> chains;
        std::vector<sim::Transfer> expected;
        TimePs start = 0;
        for (const auto& channel : group.channels) {
          const auto ring = sim::ring_hops(channel);
          std::vector<sim::Hop> chain;
          TimePs routed_latency = 0, chain_latency = 0;
          for (std::size_t i = 0; i < ring.size(); ++i) {
            if ((op == CollectiveOp::broadcast ? ring[i].dst : ring[i].src) == root_gpu) continue;
            chain.push_back(ring[i]);
            routed_latency += builder.add_hop(ring[i], i);
            chain_latency += sim::step_latency(world.cluster(), params, ring[i]);
          }
          REQUIRE(chain.size() == ring.size() - 1);
          start = std::max(start, chain_latency);
          expected.push_back(builder.take(1.0 / static_cast<double>(group.channels.size()), routed_latency));
          chains.push_back(std::move(chain));
        }
        for (const auto& chain : chains) {
          for (const auto& hop : chain) load.add(hop, 1.0 / static_cast<double>(chains.size()), start);
        }
        const auto expected_cost = sim::with_launch(
            load.cost_lines(sim::effective_speeds(world.cluster(), world.profile(), params.bandwidth_factor)),
            params.base_latency_seconds);

        const auto plan = sim::collective_algorithm(Algorithm::ring).plan(world.context(group), {op, root}, protocol);
        REQUIRE(plan.phases.size() == 1);
        const auto& transfers = plan.phases.front().transfers;
        REQUIRE(transfers.size() == expected.size());
        for (std::size_t c = 0; c < transfers.size(); ++c) {
          REQUIRE(transfers[c].latency == expected[c].latency);
          REQUIRE(transfers[c].bytes_per_hop == expected[c].bytes_per_hop);
          REQUIRE(transfers[c].links.size() == expected[c].links.size());
          for (std::size_t l = 0; l < transfers[c].links.size(); ++l) {
            REQUIRE(transfers[c].links[l].link == expected[c].links[l].link);
            REQUIRE(transfers[c].links[l].weight == Approx(expected[c].links[l].weight).epsilon(1e-12));
          }
        }
        const auto cost = sim::collective_algorithm(Algorithm::ring).cost(world.context(group), {op, root}, protocol);
        REQUIRE(cost.phases.size() == 1);
        REQUIRE(cost.phases.front().size() == expected_cost.size());
        for (double bytes : {1e3, 1e6, 1e9}) REQUIRE(cost.seconds(bytes) == Approx(sim::CollectiveCost{{expected_cost}, {}}.seconds(bytes)).epsilon(1e-12));

        // The cache gives what a context without one computes.
        const auto cached_plan = sim::collective_algorithm(Algorithm::ring).plan(cached, {op, root}, protocol);
        for (std::size_t c = 0; c < transfers.size(); ++c) REQUIRE(cached_plan.phases.front().transfers[c].links == transfers[c].links);
        REQUIRE(sim::collective_algorithm(Algorithm::ring).cost(cached, {op, root}, protocol).seconds(1e6) == cost.seconds(1e6));
      }
    }
  }
  REQUIRE_THROWS_AS(sim::RingChains(world.context(group), CollectiveOp::reduce, Protocol::simple).plan(group.size()),
                    std::invalid_argument);
}

TEST_CASE("a uniform all-to-all across nodes moves each GPU's network sends in lockstep, as fast as the closed form",
          "[collectives][direct]") {
  // One GPU of each of a800-1024's 128 nodes: 127 remote peers per GPU,
  // 16,256 sends. Grouped by sender and path latency (same leaf or across
  // the spine) they are at most two flows per GPU, and the time is still the
  // closed form's: each NIC sends and receives S 127/128.
  const World world("a800-1024");
  std::vector<topology::GpuId> gpus;
  for (int node = 0; node < world.cluster().nodes(); ++node) gpus.push_back(world.cluster().gpu_at(node, 0));
  const auto group = world.group(gpus);
  const sim::DirectAlgorithm direct;
  const sim::TransferPlan plan = direct.plan(world.context(group), {CollectiveOp::all_to_all, 0}, Protocol::simple);
  REQUIRE(plan.phases.size() == 1);
  REQUIRE(plan.phases.front().transfers.size() <= 2 * gpus.size());
  REQUIRE(plan.phases.front().transfers.size() >= gpus.size());
  for (const double bytes : {1e6, 1e9}) {
    INFO(bytes << " B");
    const double flow = world.flow_seconds(group, CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, bytes);
    const double analytical =
        world.analytical_seconds(group, CollectiveOp::all_to_all, Algorithm::direct, Protocol::simple, bytes);
    REQUIRE(flow == Approx(analytical).epsilon(0.01));
  }
}
