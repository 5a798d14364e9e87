// The plan space `shardsim search` walks (issue 5, TECHNIQUES.md sections 1-3):
// every AMSP factor triple the dependency rule and mesh filter allow, the
// named systems (ZeRO-0..3, FSDP FULL_SHARD / SHARD_GRAD_OP / HYBRID_SHARD(k),
// MiCS(k), ZeRO++ hpZ(k)), crossed with bucket sizes, micro-batch sizes,
// recompute choices and rank placements.
//
// Named systems start from their bundled presets (workloads/plans), so each
// keeps its published behaviour ("as implemented" for the DeepSpeed and MiCS
// baselines); AMSP triples start from the AMSP preset ("ideal"). A micro-batch
// size is kept only where it divides the global batch over the GPUs;
// selective recompute only without flash attention (with it, it is the same
// step as no recompute: flash attention recomputes the attention core). A
// leaf-aware placement is kept only where it differs from the consecutive
// one, which it does when a sharding group spans nodes that consecutive
// ranks would spread over several leaf switches.
#pragma once

#include "topology/cluster.h"
#include "topology/placement.h"
#include "workloads/plan.h"
#include "workloads/training.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace shardsim::sim {

struct SearchSpace {
  bool named_systems = true;
  bool amsp = true;
  std::vector<double> bucket_bytes = {2.5e8, 1e9};  // reduce and all-gather buckets
  std::vector<std::int64_t> micro_batch_sizes = {1, 2, 4, 8};
  std::vector<workloads::Recompute> recompute = {workloads::Recompute::none, workloads::Recompute::selective,
                                                 workloads::Recompute::full};
  std::vector<topology::PlacementPolicy> placements = {topology::PlacementPolicy::consecutive,
                                                       topology::PlacementPolicy::leaf_aware};
};

struct Candidate {
  std::size_t index = 0;  // enumeration order: every tie in the search breaks on it
  workloads::Plan plan;
  workloads::ShardingFactors factors;
  workloads::TrainingConfig training;
  std::int64_t accumulation = 1;  // micro-batches per step
  std::shared_ptr<const topology::Placement> placement;
};

// Factors a group may have on `gpus` data-parallel GPUs: divisors of `gpus`
// that pass the mesh filter, ascending.
std::vector<int> mesh_factors(int gpus, int gpus_per_node);

// The GPUs of the largest sharding group below the whole job (a factor or
// ZeRO++'s secondary group), which leaf-aware placement packs; 0 if none.
int placement_group_ranks(const workloads::Plan& plan, const workloads::ShardingFactors& factors, int gpus);

// Throws std::invalid_argument with the reason when `gpus` cannot run a job
// on `cluster` (outside 1..GPUs, more than a node but not whole nodes) or no
// micro-batch size of the space divides the global batch.
std::vector<Candidate> enumerate_candidates(const SearchSpace& space, const workloads::TrainingConfig& training,
                                            const topology::Cluster& cluster, int gpus);

// One line naming what the candidate chose: "mics-16, mbs 2, recompute selective, buckets 1 GB, leaf-aware".
std::string describe(const Candidate& candidate);

}  // namespace shardsim::sim
