#include "calib/profile.h"
#include "fixtures.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"

#include <catch2/catch.hpp>

using shardsim::InputError;
using shardsim::calib::load_profile;
using shardsim::calib::parse_profile;
using shardsim::test::uniform_profile_json;
using namespace shardsim::workloads;

namespace {

std::string error_for(const nlohmann::json& document) {
  try {
    parse_profile(document, "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("the bundled datasheet profiles load and cite a source for every entry", "[profile]") {
  for (const std::string name : {"a100", "a800", "h100", "h200"}) {
    INFO(name);
    const auto profile = load_profile(name);
    for (const auto& link : profile.links) {
      REQUIRE(link.bandwidth_efficiency > 0.5);
      REQUIRE(link.bandwidth_efficiency <= 1.0);
      REQUIRE_FALSE(link.source.empty());
    }
    for (CollectiveOp op : nccl_tests_collective_ops()) {
      const Algorithm algorithm =
          op == CollectiveOp::all_to_all || op == CollectiveOp::send_recv ? Algorithm::direct : Algorithm::ring;
      const auto* params = profile.find(op, algorithm);
      REQUIRE(params != nullptr);
      REQUIRE_FALSE(params->source.empty());
      REQUIRE(profile.find(op, algorithm, Protocol::simple) != nullptr);
    }
    REQUIRE(profile.find(CollectiveOp::all_reduce, Algorithm::tree, Protocol::ll) != nullptr);
  }
}

TEST_CASE("profile numbers are the cited public figures", "[profile]") {
  // NCCL tuning model: ring Simple base 8.4 us, network hop 14 us; LL128 reaches 0.92.
  const auto a100 = load_profile("a100");
  const auto* simple = a100.find(CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple);
  REQUIRE(simple->base_latency_seconds == Approx(8.4e-6));
  REQUIRE(simple->hop_latency(shardsim::topology::LinkKind::network) == Approx(14e-6));
  REQUIRE(a100.find(CollectiveOp::all_reduce, Algorithm::ring, Protocol::ll128)->bandwidth_factor == Approx(0.92));
  // A100 NVLink: 231.58 GB/s measured busbw over 300 GB/s.
  REQUIRE(a100.bandwidth_efficiency(shardsim::topology::LinkKind::nvlink) == Approx(231.58 / 300).epsilon(1e-3));
  // NCCL's network post overhead, 2 us on AMD hosts (DGX A100) and 1 us on
  // others, floors each step of a ring across nodes: 3x for Simple, 1x for LL.
  REQUIRE(simple->multi_node_step_floor_seconds == Approx(6e-6));
  REQUIRE(a100.find(CollectiveOp::all_gather, Algorithm::ring, Protocol::ll)->multi_node_step_floor_seconds ==
          Approx(2e-6));
  REQUIRE(load_profile("h100").find(CollectiveOp::reduce_scatter, Algorithm::ring, Protocol::simple)
              ->multi_node_step_floor_seconds == Approx(3e-6));
  REQUIRE(a100.find(CollectiveOp::broadcast, Algorithm::ring, Protocol::simple)->multi_node_step_floor_seconds == 0);
  // NCCL's treeCorrectionFactor, from 64 B in powers of two: LL128 0.6 at
  // 1 MiB (entry 14), Simple 0.9 at 64 B, none from 512 MiB on.
  const auto& ll128 = a100.find(CollectiveOp::all_reduce, Algorithm::tree, Protocol::ll128)->bandwidth_correction;
  REQUIRE(ll128.size() == 24);
  REQUIRE(ll128[14].from_bytes == 1 << 20);
  REQUIRE(ll128[14].factor == Approx(0.6));
  REQUIRE(ll128.back().from_bytes == 512 << 20);
  REQUIRE(ll128.back().factor == 1.0);
  REQUIRE(a100.find(CollectiveOp::all_reduce, Algorithm::tree, Protocol::simple)->bandwidth_correction.front().factor ==
          Approx(0.9));
  // Its plateau effect of ring: Simple ring all-reduces across nodes, 1.4x
  // the latency on Ampere and later, from 64 bytes per rank and channel.
  REQUIRE(simple->multi_node_plateau.latency_factor == Approx(1.4));
  REQUIRE(simple->multi_node_plateau.from_bytes_per_rank_and_channel == 64);
  REQUIRE(a100.find(CollectiveOp::all_reduce, Algorithm::ring, Protocol::ll)->multi_node_plateau.latency_factor == 1);
  REQUIRE(a100.find(CollectiveOp::all_gather, Algorithm::ring, Protocol::simple)->multi_node_plateau.latency_factor == 1);
}

TEST_CASE("protocol factors by group shape are NCCL's refinements", "[profile]") {
  // 8 GPUs on one node, 16 on 2 nodes (8 per node), 4 on 4 nodes (one per node),
  // each channel on an HDR NIC as the a100 profile runs it: 25 GB/s x 0.96.
  const auto a100 = load_profile("a100");
  constexpr double kHdr = 24e9;
  const auto factor = [&](CollectiveOp op, Algorithm algorithm, Protocol protocol, int ranks, int nodes) {
    return a100.find(op, algorithm, protocol)->bandwidth_factor_for(ranks, nodes, kHdr);
  };
  // Ring LL: busBw/3 inside one node for all but all-reduce and reduce, /4 otherwise.
  for (CollectiveOp op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter, CollectiveOp::broadcast}) {
    CHECK(factor(op, Algorithm::ring, Protocol::ll, 8, 1) == Approx(1.0 / 3));
    CHECK(factor(op, Algorithm::ring, Protocol::ll, 16, 2) == Approx(0.25));
  }
  for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::reduce}) {
    CHECK(factor(op, Algorithm::ring, Protocol::ll, 8, 1) == Approx(0.25));
  }
  // Ring LL128: 0.92, 0.7 below two ranks per node on average.
  for (CollectiveOp op : {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce}) {
    CHECK(factor(op, Algorithm::ring, Protocol::ll128, 8, 1) == Approx(0.92));
    CHECK(factor(op, Algorithm::ring, Protocol::ll128, 16, 2) == Approx(0.92));
    CHECK(factor(op, Algorithm::ring, Protocol::ll128, 4, 4) == Approx(0.7));
    CHECK(factor(op, Algorithm::ring, Protocol::ll128, 3, 2) == Approx(0.7));  // NCCL's ppn is a ratio: 1.5
  }
  // Tree LL128: 0.92 x 7/9 inside one node, 0.92 x 120/128 across nodes.
  CHECK(factor(CollectiveOp::all_reduce, Algorithm::tree, Protocol::ll128, 8, 1) == Approx(0.92 * 7 / 9));
  CHECK(factor(CollectiveOp::all_reduce, Algorithm::tree, Protocol::ll128, 4, 2) == Approx(0.92 * 120 / 128));
  CHECK(factor(CollectiveOp::all_reduce, Algorithm::ring, Protocol::simple, 4, 4) == 1.0);
  // LL inside one node reaches at most llMaxBw, 87.7 GB/s of bus bandwidth:
  // over an H100 ring's 370 GB/s that binds every LL entry; across nodes not.
  const auto h100 = load_profile("h100");
  for (const auto& [op, algorithm] : {std::pair{CollectiveOp::all_reduce, Algorithm::ring},
                                      std::pair{CollectiveOp::all_reduce, Algorithm::tree},
                                      std::pair{CollectiveOp::all_gather, Algorithm::ring},
                                      std::pair{CollectiveOp::reduce, Algorithm::ring}}) {
    const auto* ll = h100.find(op, algorithm, Protocol::ll);
    CHECK(ll->bandwidth_factor_for(8, 1, 47.5e9) == Approx(87.7 / 370).epsilon(1e-5));
    CHECK(ll->bandwidth_factor_for(16, 2, 47.5e9) == ll->bandwidth_factor);
  }
}

TEST_CASE("beyond two nodes a channel carries no more than NCCL's per-channel caps", "[profile]") {
  // perChMaxRingLL128Bw, perChMaxTreeBw and perChMaxTreeLL128Bw for more than
  // two nodes (GB/s): Ampere 20, 17.8, 20; Hopper 36.7, 36.0, 29.0. Tree LL
  // and LL128 take the tree's cap /3.8 and x120/128 first. A channel is one
  // NIC: HDR at 24 GB/s on the a100 profile, NDR at 47.5 on the h100's.
  const auto a100 = load_profile("a100");
  const auto h100 = load_profile("h100");
  const auto factor = [](const shardsim::calib::Profile& profile, Algorithm algorithm, Protocol protocol, int ranks, int nodes,
                         double nic) {
    return profile.find(CollectiveOp::all_reduce, algorithm, protocol)->bandwidth_factor_for(ranks, nodes, nic);
  };
  SECTION("A100 on HDR, 16 nodes of 8") {
    CHECK(factor(a100, Algorithm::tree, Protocol::simple, 128, 16, 24e9) == Approx(17.8 / 24));
    CHECK(factor(a100, Algorithm::tree, Protocol::ll, 128, 16, 24e9) == Approx(17.8 / 3.8 / 24));
    CHECK(factor(a100, Algorithm::tree, Protocol::ll128, 128, 16, 24e9) == Approx(17.8 * 120 / 128 / 24));
    CHECK(factor(a100, Algorithm::ring, Protocol::ll128, 128, 16, 24e9) == Approx(20.0 / 24));
    CHECK(factor(a100, Algorithm::ring, Protocol::simple, 128, 16, 24e9) == 1.0);
    CHECK(factor(a100, Algorithm::ring, Protocol::ll, 128, 16, 24e9) == 0.25);
    // The same GPUs on two nodes keep the refinements' factors.
    CHECK(factor(a100, Algorithm::tree, Protocol::simple, 16, 2, 24e9) == Approx(0.92));
    CHECK(factor(a100, Algorithm::ring, Protocol::ll128, 16, 2, 24e9) == Approx(0.92));
    for (CollectiveOp op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter, CollectiveOp::broadcast,
                            CollectiveOp::reduce}) {
      CHECK(a100.find(op, Algorithm::ring, Protocol::ll128)->bandwidth_factor_for(128, 16, 24e9) == Approx(20.0 / 24));
    }
  }
  SECTION("H100 on NDR: tree LL128's own cap is below the tree's") {
    CHECK(factor(h100, Algorithm::tree, Protocol::simple, 64, 8, 47.5e9) == Approx(36.0 / 47.5));
    CHECK(factor(h100, Algorithm::tree, Protocol::ll128, 64, 8, 47.5e9) == Approx(29.0 / 47.5));
    CHECK(factor(h100, Algorithm::ring, Protocol::ll128, 64, 8, 47.5e9) == Approx(36.7 / 47.5));
    // One rank per node: LL128's 0.7 is below the cap.
    CHECK(factor(h100, Algorithm::ring, Protocol::ll128, 8, 8, 47.5e9) == Approx(0.7));
  }
  SECTION("a slow NIC is not capped") {
    CHECK(factor(a100, Algorithm::tree, Protocol::simple, 128, 16, 12e9) == Approx(0.92));
    CHECK(factor(a100, Algorithm::ring, Protocol::ll128, 128, 16, 12e9) == Approx(0.92));
  }
}

TEST_CASE("a profile missing a field is refused with its path", "[profile]") {
  auto doc = uniform_profile_json(1e-6);
  doc["links"]["network"].erase("bandwidth_efficiency");
  REQUIRE(error_for(doc) == "p.json: links.network.bandwidth_efficiency: missing required field");
  auto no_latency = uniform_profile_json(1e-6);
  no_latency["collectives"]["all_reduce"]["ring"]["simple"]["hop_latency_seconds"].erase("pcie");
  REQUIRE(error_for(no_latency) ==
          "p.json: collectives.all_reduce.ring.simple.hop_latency_seconds.pcie: missing required field");
}

TEST_CASE("profile values out of range or in the wrong place are refused", "[profile]") {
  auto efficiency = uniform_profile_json(1e-6);
  efficiency["links"]["nvlink"]["bandwidth_efficiency"] = 1.2;
  REQUIRE_THAT(error_for(efficiency), Catch::Contains("links.nvlink.bandwidth_efficiency: must be a fraction in (0, 1]"));
  auto protocol = uniform_profile_json(1e-6);
  protocol["collectives"]["all_reduce"]["ring"]["ll256"] = protocol["collectives"]["all_reduce"]["ring"]["simple"];
  REQUIRE_THAT(error_for(protocol), Catch::Contains("collectives.all_reduce.ring.ll256: unknown protocol"));
  auto algorithm = uniform_profile_json(1e-6);
  algorithm["collectives"]["all_gather"]["tree"] = algorithm["collectives"]["all_reduce"]["tree"];
  REQUIRE(error_for(algorithm) == "p.json: collectives.all_gather.tree: is not an algorithm of all_gather");
  auto op = uniform_profile_json(1e-6);
  op["collectives"]["all_scatter"] = nlohmann::json::object();
  REQUIRE(error_for(op) == "p.json: collectives.all_scatter: unknown collective");
  auto negative = uniform_profile_json(1e-6);
  negative["collectives"]["broadcast"]["ring"]["simple"]["base_latency_seconds"] = -1;
  REQUIRE_THAT(error_for(negative), Catch::Contains("collectives.broadcast.ring.simple.base_latency_seconds: must be a number >= 0"));

  // A chunk pipeline is NVLS's (NCCL's chunking of the others is not modelled), in whole channels.
  const nlohmann::json pipeline = {{"channels", 16}, {"base_latency_seconds", 8e-6}, {"fill_chunks", 2.5},
                                   {"chunk_overhead_seconds", 1e-6}};
  auto on_ring = uniform_profile_json(1e-6);
  on_ring["collectives"]["all_reduce"]["ring"]["simple"]["chunk_pipeline"] = pipeline;
  REQUIRE_THAT(error_for(on_ring),
               Catch::Contains("collectives.all_reduce.ring.simple.chunk_pipeline") &&
                   Catch::Contains("only nvls and nvls_tree have it"));
  auto fractional = uniform_profile_json(1e-6);
  fractional["collectives"]["all_reduce"]["nvls"] = fractional["collectives"]["all_reduce"]["ring"];
  fractional["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"] = pipeline;
  fractional["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"]["channels"] = 2.5;
  REQUIRE_THAT(error_for(fractional), Catch::Contains("nvls.simple.chunk_pipeline.channels: must be a positive integer"));
  fractional["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"]["channels"] = 16;
  fractional["collectives"]["all_reduce"]["nvls"]["simple"]["chunk_pipeline"].erase("fill_chunks");
  REQUIRE_THAT(error_for(fractional), Catch::Contains("nvls.simple.chunk_pipeline.fill_chunks"));
}
