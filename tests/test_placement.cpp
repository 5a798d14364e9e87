// Rank placement and MoE layouts (topology/placement.h), and what they do to
// the traffic crossing the spine and the InfiniBand links.
#include "calib/profile.h"
#include "sim/collective_runner.h"
#include "sim/collectives/selection.h"
#include "sim/step/collective_choices.h"
#include "sim/step/step_simulator.h"
#include "topology/cluster.h"
#include "topology/placement.h"
#include "topology/routing.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/job_scale.h"

#include <catch2/catch.hpp>

#include <set>

using namespace shardsim;
using topology::PlacementPolicy;

namespace {

// 12 DGX-A100-like nodes, 6 per leaf block (2 blocks), leaf uplinks at half
// the downlink capacity.
topology::ClusterSpec two_leaf_cluster(double oversubscription) {
  topology::ClusterSpec spec = topology::load_cluster_spec("dgx-a100-2node");
  spec.name = "two-leaf-test";
  spec.nodes = 12;
  spec.fabric.nodes_per_leaf = 6;
  spec.fabric.spines = 4;
  spec.fabric.oversubscription = oversubscription;
  return spec;
}

std::set<int> leaf_blocks_of(const topology::Cluster& cluster, const topology::Placement& placement, int first, int count) {
  std::set<int> blocks;
  for (int r = first; r < first + count; ++r) {
    blocks.insert(topology::leaf_block_of_node(cluster, cluster.node_of(placement.gpu_of_rank[static_cast<std::size_t>(r)])));
  }
  return blocks;
}

}  // namespace

TEST_CASE("placements keep ranks in local order on whole nodes", "[placement]") {
  const topology::Cluster cluster(two_leaf_cluster(2));
  for (PlacementPolicy policy : {PlacementPolicy::consecutive, PlacementPolicy::leaf_aware, PlacementPolicy::scattered}) {
    const auto placement = topology::place_ranks(cluster, 64, policy, 32);
    REQUIRE(placement.gpu_of_rank.size() == 64);
    REQUIRE(std::set<int>(placement.gpu_of_rank.begin(), placement.gpu_of_rank.end()).size() == 64);
    for (int r = 0; r < 64; ++r) {
      CHECK(cluster.local_index(placement.gpu_of_rank[static_cast<std::size_t>(r)]) == r % 8);
      CHECK(cluster.node_of(placement.gpu_of_rank[static_cast<std::size_t>(r)]) ==
            cluster.node_of(placement.gpu_of_rank[static_cast<std::size_t>(r - r % 8)]));
    }
  }
  // Consecutive: job node j on node j. Nodes 4 and 5 are in block 0, 6 and 7
  // in block 1, so the second 4-node group straddles the spine.
  const auto consecutive = topology::place_ranks(cluster, 64, PlacementPolicy::consecutive);
  CHECK(consecutive.gpu_of_rank[63] == 63);
  CHECK(leaf_blocks_of(cluster, consecutive, 32, 32).size() == 2);
  // Leaf-aware: each 4-node group under one block (nodes 0-3, then 6-9).
  const auto packed = topology::place_ranks(cluster, 64, PlacementPolicy::leaf_aware, 32);
  CHECK(leaf_blocks_of(cluster, packed, 0, 32) == std::set<int>{0});
  CHECK(leaf_blocks_of(cluster, packed, 32, 32) == std::set<int>{1});
  CHECK(cluster.node_of(packed.gpu_of_rank[32]) == 6);
  CHECK(topology::leaf_blocks_spanned(cluster, packed, {32, 40, 48, 56}) == 1);
  // Scattered: consecutive job nodes alternate between the blocks.
  const auto scattered = topology::place_ranks(cluster, 64, PlacementPolicy::scattered);
  CHECK(cluster.node_of(scattered.gpu_of_rank[0]) == 0);
  CHECK(cluster.node_of(scattered.gpu_of_rank[8]) == 6);
  CHECK(cluster.node_of(scattered.gpu_of_rank[16]) == 1);
}

TEST_CASE("a job must fit the cluster and take whole nodes", "[placement]") {
  const topology::Cluster cluster(two_leaf_cluster(1));
  CHECK_THROWS_AS(topology::place_ranks(cluster, 12, PlacementPolicy::consecutive), std::invalid_argument);
  CHECK_THROWS_AS(topology::place_ranks(cluster, 0, PlacementPolicy::consecutive), std::invalid_argument);
  CHECK_THROWS_AS(topology::place_ranks(cluster, 97 * 8, PlacementPolicy::consecutive), std::invalid_argument);
  CHECK(topology::place_ranks(cluster, 4, PlacementPolicy::scattered).gpu_of_rank == std::vector<int>{0, 1, 2, 3});
  CHECK_THROWS_AS(topology::parse_placement_policy("random"), std::invalid_argument);
}

// The baseline a placement is judged against is a fragmented allocation
// (scattered: the job's nodes alternate between the two leaf blocks), where
// every hop of the group's ring crosses the spine and the flows of both
// groups share the halved uplinks. Consecutive ranks already keep the first
// group under one leaf and straddle with the second; leaf-aware still cuts
// the spine bytes, but one ring crossing fits in a 2:1 uplink, and packing
// the groups apart sends all of the (small) replica all-reduce over the spine,
// so its step is within 1 % of consecutive: the search tries both.
TEST_CASE("leaf-aware placement keeps a 4-node MiCS group off a 2:1 spine and the step gets faster", "[placement]") {
  const topology::Cluster cluster(two_leaf_cluster(2));
  const topology::Router router(cluster);
  const calib::Profile profile = calib::load_profile("a100");
  workloads::StepConfig config;
  config.model = workloads::load_model("llama-7b");
  config.training = workloads::load_training_config("seq4096-mbs1-4m-tokens");
  config.plan = workloads::load_plan("mics-8");
  config.plan.factors = {32, 32, 32};  // a sharding group of 4 nodes
  // Communication exposed, so the network's share of the step shows.
  workloads::apply_overlap_level(config.plan, "none");
  config.data_parallel = 64;
  workloads::apply_job_scale(workloads::parse_job_scale("layers=4,micro_batches=1"), 64, config.model, config.training);
  const workloads::Program program = workloads::compile(config);

  auto run = [&](PlacementPolicy policy) {
    sim::StepSimulationOptions options;
    options.gpu_of_rank = topology::place_ranks(cluster, 64, policy, 32).gpu_of_rank;
    return sim::simulate(program, cluster, router, profile, options);
  };
  const workloads::Timeline scattered = run(PlacementPolicy::scattered);
  const workloads::Timeline consecutive = run(PlacementPolicy::consecutive);
  const workloads::Timeline packed = run(PlacementPolicy::leaf_aware);
  INFO("spine bytes scattered " << scattered.spine_bytes << ", consecutive " << consecutive.spine_bytes
                                << ", leaf-aware " << packed.spine_bytes);
  INFO("step scattered " << scattered.step_time << " ps, consecutive " << consecutive.step_time << " ps, leaf-aware "
                         << packed.step_time << " ps");
  CHECK(packed.spine_bytes < 0.25 * scattered.spine_bytes);
  CHECK(packed.spine_bytes < 0.5 * consecutive.spine_bytes);
  CHECK(packed.step_time < scattered.step_time);
  CHECK(static_cast<double>(packed.step_time) < 1.01 * static_cast<double>(consecutive.step_time));
  // The spine tally is the traffic on the leaf uplinks, every crossing once.
  double uplinks = 0;
  for (std::size_t l = 0; l < scattered.link_bytes.size(); ++l) {
    if (cluster.is_leaf_uplink(static_cast<topology::LinkId>(l))) uplinks += scattered.link_bytes[l];
  }
  CHECK(uplinks == scattered.spine_bytes);
}

TEST_CASE("MoE layouts: E+D and D+E groups", "[placement]") {
  const auto ed = topology::moe_groups(16, 8, topology::MoeLayout::expert_data);
  CHECK(ed.expert_parallel == std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}});
  CHECK(ed.expert_data_parallel.front() == std::vector<int>{0, 8});
  const auto de = topology::moe_groups(16, 8, topology::MoeLayout::data_expert);
  CHECK(de.expert_data_parallel.front() == std::vector<int>{0, 1});
  CHECK(de.expert_parallel.front() == std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14});
  CHECK_THROWS_AS(topology::moe_groups(12, 8, topology::MoeLayout::data_expert), std::invalid_argument);
}

TEST_CASE("D+E keeps an 8-expert layer's gradient all-reduce off InfiniBand on 8-GPU nodes", "[placement]") {
  const topology::Cluster cluster(topology::load_cluster_spec("dgx-a100-2node"));
  const topology::Router router(cluster);
  const calib::Profile profile = calib::load_profile("a100");
  sim::CollectiveChoices choices(cluster, router, profile);
  // One expert's gradients: a SwiGLU expert of LLaMA-7B's shape in bf16.
  const double expert_bytes = 3.0 * 4096 * 11008 * 2;
  auto network_bytes = [&](const std::vector<std::vector<int>>& groups, workloads::CollectiveOp op, double bytes) {
    double total = 0;
    for (const auto& group : groups) {
      auto& chosen = choices.group(group, sim::CollectiveCall{op, 0});
      const auto run = sim::simulate_collective(cluster, profile, chosen.plan(chosen.choose(bytes)), bytes, true);
      for (std::size_t l = 0; l < run.link_bytes.size(); ++l) {
        if (cluster.links()[l].kind == topology::LinkKind::network) total += run.link_bytes[l];
      }
    }
    return total;
  };
  const auto ed = topology::moe_groups(16, 8, topology::MoeLayout::expert_data);
  const auto de = topology::moe_groups(16, 8, topology::MoeLayout::data_expert);
  const double ed_all_reduce = network_bytes(ed.expert_data_parallel, workloads::CollectiveOp::all_reduce, expert_bytes);
  const double de_all_reduce = network_bytes(de.expert_data_parallel, workloads::CollectiveOp::all_reduce, expert_bytes);
  // E+D: each 2-member all-reduce spans both nodes: each member sends half
  // its buffer to the other, once for reduce-scatter and once for all-gather,
  // and each byte crosses its NIC and the other's (2 network links per hop).
  CHECK(ed_all_reduce > 8 * expert_bytes);
  CHECK(de_all_reduce == 0);
  // The price: D+E's token all-to-all crosses nodes instead.
  const double tokens_bytes = 4096.0 * 4096 * 2;
  CHECK(network_bytes(ed.expert_parallel, workloads::CollectiveOp::all_to_all, tokens_bytes) == 0);
  CHECK(network_bytes(de.expert_parallel, workloads::CollectiveOp::all_to_all, tokens_bytes) > 0);
}
