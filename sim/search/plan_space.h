// The plan space `shardsim search` walks (issue 5, TECHNIQUES.md sections 1-5):
// every AMSP factor triple the dependency rule and mesh filter allow, the
// named systems (ZeRO-0..3, FSDP FULL_SHARD / SHARD_GRAD_OP / HYBRID_SHARD(k),
// MiCS(k), ZeRO++ hpZ(k) without and with its quantized gathers and
// gradient reduction, qwZ + qgZ), crossed with bucket sizes, micro-batch sizes,
// recompute choices and rank placements; and the pipelines: Megatron-LM's
// tensor x pipeline (x virtual stages) x data parallelism, and ZeroPP's
// TP-free pipeline with ZeRO-3 inside each stage, crossed with micro-batch
// sizes and recompute choices.
//
// Named systems start from their bundled presets (workloads/plans), so each
// keeps its published behaviour ("as implemented" for the DeepSpeed and MiCS
// baselines); AMSP triples start from the AMSP preset ("ideal"). A micro-batch
// size is kept only where it divides the global batch over the GPUs;
// selective recompute only without flash attention (with it, rebuilding the
// attention core saves no memory and costs its forward again). A
// leaf-aware placement is kept only where it differs from the consecutive
// one, which it does when a sharding group spans nodes that consecutive
// ranks would spread over several leaf switches.
//
// Megatron-LM candidates are the preset megatron-tp4-pp4 (distributed
// optimizer, both overlaps on, Megatron's buckets) with every tensor size t
// that divides a node, every pipeline size p of `pipeline_stages` up to the
// layers (t = p = 1 is plain data parallelism, left to ZeRO-1), and 1 or 2
// virtual stages (2 only where p > 1) whose p v chunks split the layers:
// evenly, or else with the embedding and the output layer counted as layers,
// or the output layer alone, as Megatron-Core's
// --account-for-embedding/loss-in-pipeline-split do (the name gains
// "-split-emb-loss" or "-split-loss"; Llama 3 405B runs its 126 layers on 16
// x 8 chunks so), or where none divides, as evenly as they go in a layout
// (--pipeline-model-parallel-layout; "-layout": DeepSeek-V3's 61 layers on 8
// stages are Et*8|(t*8|)*5,t*7|t*6L); micro-batches interleaved in groups of p, or where they
// are not a multiple of p in the smallest group Megatron-Core accepts (the
// name gains "-nN"); sequence parallelism is on whenever t > 1, as Megatron
// recommends; TP comm overlap as `tp_comm_overlap` lists (by default off,
// Megatron-LM's default: its slices triple a tensor-parallel step's ops and
// the time to simulate it; with it on the plan's name gains "-tp-overlap").
// ZeroPP candidates are the preset zero-pipeline-pp4 with every p of
// `pipeline_stages` (2 chunks per stage, the layers split as Megatron's
// are), scheduling units of p and 2p micro-batches (u v = 2p is the
// smallest unit that covers a round trip, 4p hides slower backward passes
// too), ZeRO-3 over a node or over the whole stage, and the optimizer states
// sharded like the parameters or over the whole stage ("ZeRO-3 + PP +
// ZeRO-1"). A pipeline candidate is kept only where the model and the batch
// split the way its compiler requires.
//
// For a MoE model the data-parallel systems are also crossed with expert
// parallelism (TECHNIQUES.md section 6): each size of `expert_parallel` that
// divides the experts and the GPUs, above 1 in both layouts, E+D and D+E
// (the plan's name gains "+ep8:E+D"); by default 1 and the node's GPUs (or
// the experts, when fewer). So are the Megatron-LM layouts: each size that
// divides the experts and a stage's GPUs, in Megatron-Core's order (E+D)
// with its all-to-all dispatcher, each expert whole on its GPUs ("+ep8"),
// and the all-to-alls hidden as Megatron-Core best can: where it allows the
// combined 1F1B (no pipeline or an interleaved one, no full recompute),
// each forward merged with another micro-batch's backward, weight gradients
// delayed (--overlap-moe-expert-parallel-comm --delay-wgrad-compute); else
// the shared experts, where the model has them, beside the dispatch
// (--moe-shared-expert-overlap: the same work on a second stream, filling
// the GPU while the all-to-alls leave it idle). ZeroPP keeps its experts
// local.
//
// The data-parallel systems are also crossed with DeepSpeed-Ulysses
// (TECHNIQUES.md section 6): each degree u of `ulysses` that divides the
// GPUs and that the heads, key/value heads and sequence split over; the
// plan's name gains "+ulysses8". u consecutive GPUs share each micro-batch,
// so the global batch is split over GPUs / u replicas. By default 1, and
// also the node's GPUs (all-to-alls on NVLink) when the global batch has
// fewer sequences than the job has GPUs, as long-context jobs do: there data
// parallelism alone leaves GPUs without a sequence. Elsewhere Ulysses is
// asked for (it multiplies each replica's micro-batches by u, and the time
// to simulate them). Not with expert parallelism above 1 (not modelled
// together).
#pragma once

#include "topology/cluster.h"
#include "topology/placement.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim::sim {

struct SearchSpace {
  // The search families of the sharding-system registry to try
  // (workloads/inputs/sharding_systems.h): "named", "amsp", "megatron",
  // "zero-pipeline".
  std::vector<std::string> families = workloads::search_families();
  std::vector<int> pipeline_stages = {2, 4, 8, 16};
  std::vector<double> bucket_bytes = {2.5e8, 1e9};  // reduce and all-gather buckets
  std::vector<std::int64_t> micro_batch_sizes = {1, 2, 4, 8};
  std::vector<workloads::Recompute> recompute = {workloads::Recompute::none, workloads::Recompute::selective,
                                                 workloads::Recompute::full};
  std::vector<topology::PlacementPolicy> placements = {topology::PlacementPolicy::consecutive,
                                                       topology::PlacementPolicy::leaf_aware};
  std::vector<int> expert_parallel;  // empty: 1 and min(experts, GPUs per node)
  std::vector<int> ulysses;          // empty: 1, and GPUs per node when the batch has fewer sequences than GPUs
  // Megatron-LM context parallelism; empty: 1, and 2, 4 and 8 when the batch
  // has fewer sequences than GPUs.
  std::vector<int> context_parallel;
  std::vector<bool> tp_comm_overlap = {false};  // Megatron-LM layouts with t > 1

  bool searches(std::string_view family) const {
    return std::find(families.begin(), families.end(), family) != families.end();
  }
};

struct Candidate {
  std::size_t index = 0;  // enumeration order: every tie in the search breaks on it
  workloads::Plan plan;
  workloads::ShardingFactors factors;
  workloads::TrainingConfig training;
  int data_parallel = 0;          // GPUs / (tensor x pipeline)
  std::int64_t accumulation = 1;  // micro-batches per step
  std::shared_ptr<const topology::Placement> placement;
};

// Factors a group may have on `gpus` data-parallel GPUs: divisors of `gpus`
// that pass the mesh filter, ascending.
std::vector<int> mesh_factors(int gpus, int gpus_per_node);

// The GPUs of the largest sharding group below the whole job (a factor or
// ZeRO++'s secondary group), which leaf-aware placement packs; 0 if none,
// and 0 for the pipelines: Megatron's data-parallel groups are strided by the
// tensor size, and a pipeline's factors group the GPUs of one stage, not
// blocks of consecutive ranks a leaf-aware placement could keep together.
int placement_group_ranks(const workloads::Plan& plan, const workloads::ShardingFactors& factors, int gpus);

// Throws std::invalid_argument with the reason when `gpus` cannot run a job
// on `cluster` (outside 1..GPUs, more than a node but not whole nodes) or
// leaves no candidate (no micro-batch size of the space splits the global
// batch over any plan's data-parallel replicas).
std::vector<Candidate> enumerate_candidates(const SearchSpace& space, const workloads::ModelSpec& model,
                                            const workloads::TrainingConfig& training, const topology::Cluster& cluster,
                                            int gpus);

// What compile and the memory model need to build the candidate.
workloads::StepConfig step_config(const workloads::ModelSpec& model, const Candidate& candidate, int gpus_per_node);

// One line naming what the candidate chose: "mics-16, mbs 2, recompute selective, buckets 1 GB, leaf-aware".
std::string describe(const Candidate& candidate);

}  // namespace shardsim::sim
