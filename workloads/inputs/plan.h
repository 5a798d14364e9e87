// Plan: how model states are sharded over the data-parallel GPUs, and which
// communication overlaps run (TECHNIQUES.md sections 1-3 and 6).
//
// Every system is expressed in AMSP's terms: parameters (P), gradients (G)
// and optimizer states (OS) each have a sharding factor f, the number of GPUs
// one copy is split over ("all" = every data-parallel GPU). ZeRO-1 is
// (1, 1, all), ZeRO-2 (1, all, all), ZeRO-3 and FSDP FULL_SHARD (all, all,
// all), MiCS(k) and FSDP HYBRID_SHARD(k) (k, k, k). The `system` keeps what
// differs beyond the factors: ZeRO++ keeps a secondary copy of the
// parameters sharded over `secondary_parameter_group` GPUs for the backward
// gathers; MiCS reduces gradients inside its group, then across groups, and
// with the optional "hierarchical_parameter_gather": true (DeepSpeed's
// mics_hierarchical_params_gather; default false, as there) gathers a group
// that spans nodes in two hops: an all-gather among the group's GPUs with
// the same place in their nodes, then one inside each node.
//
//   {"name": "zero3", "system": "zero",
//    "factors": {"parameters": "all", "gradients": "all", "optimizer": "all"},
//    "secondary_parameter_group": 1,
//    "buckets": {"reduce_bytes": 1e9, "all_gather_bytes": 1e9, "prefetch_bytes": 1e8,
//                "persistence_threshold_parameters": 1e5, "max_live_parameters": 1e9,
//                "max_reuse_distance_parameters": 1e9},
//    "overlap": {"gather_scatter": true, "optimizer_all_reduce": true, "parameter_broadcast": true},
//    "behaviour": "as_implemented", "multi_rank_bucketing": false, "flat_all_gather": false,
//    "sources": ["..."]}
//
// overlap switches the three overlaps of the AMSP ablation: parameter
// all-gathers and gradient reduce-scatters beside compute (gather_scatter),
// the optimizer-state all-reduce during the last backward (optimizer_all_reduce),
// and the parameter broadcasts beside the next forward (parameter_broadcast).
// behaviour "as_implemented" keeps the published DeepSpeed/MiCS limitations
// (backward reduce-scatter not overlapped; in MiCS it also blocks the
// all-reduce; ZeRO-1/2 reduce each gradient bucket to its owners, one reduce
// per owner, unless multi_rank_bucketing all-reduces the bucket instead);
// "ideal" removes them.
//
// ZeRO++'s quantized communication (zero_plus_plus_quantization.h; DeepSpeed's
// zero_quantized_weights and zero_quantized_gradients), optional, false by
// default, for systems "zero" and "zeropp" with the parameters sharded:
//
//   "quantized_weights": true, "quantized_gradients": true
//
// quantized_weights (qwZ) gathers every parameter in int8; quantized_gradients
// (qgZ) reduces gradients by two int4 all-to-alls, inside nodes then across
// them, and needs the parameters factor "all".
//
// System "megatron" is Megatron-LM (TECHNIQUES.md section 5): data
// parallelism with factors (1, 1, 1), or (1, 1, all) for its distributed
// optimizer, and an optional "model_parallel" block of tensor and pipeline
// parallelism; the factors then shard over the data-parallel GPUs that are
// left, GPUs / (tensor x pipeline):
//
//   "model_parallel": {"tensor": 8, "pipeline": 4, "virtual_stages": 2, "sequence_parallel": true}
//
// tensor: GPUs that split every layer's GEMMs (consecutive GPUs, inside a
// node); pipeline: stages, each a contiguous run of layers; virtual_stages:
// model chunks per stage (interleaved 1F1B when above 1, else 1F1B);
// sequence_parallel: norms, residuals and dropout split along the sequence,
// each tensor-parallel all-reduce an all-gather + reduce-scatter pair;
// tp_comm_overlap (Megatron-LM's --tp-comm-overlap, needs sequence_parallel):
// Transformer Engine's userbuffers hide the forward gathers and
// reduce-scatters and the backward's gradient gathers behind GEMM slices
// (transformer_kernels.h); context_parallel (Megatron-LM's
// --context-parallel-size, TE's ring attention): GPUs that split each
// micro-batch's sequence, attention exchanging keys and values around them
// (transformer_kernels.h); the data-parallel GPUs are then GPUs / (tensor x
// pipeline x context), and gradients reduce over data x context;
// gradient_accumulation_fusion (default true; Megatron-LM's
// --no-gradient-accumulation-fusion turns it off, as Megatron-LM before 2022
// had it): the weight-gradient GEMMs accumulate into the fp32 (fp16 for fp16
// training) main gradients themselves; off, every micro-batch's gradients
// land in param.grad and a hook adds them into main_grad, a pass over the
// stage's parameters (model_parallel_step.h).
// scatter_gather_pipeline_tensors (default false; Megatron-LM of 2021-2022,
// Narayanan et al. 2021 section 4.1, on by default there until pipeline
// communication moved into Megatron-Core, which sends whole tensors): each
// tensor-parallel rank of a stage sends its 1/t slice of the activation or
// gradient crossing the boundary, and the receiving stage all-gathers the
// slices over its tensor-parallel group. Under sequence parallelism the
// tensor is already split and this changes nothing, as in Megatron-LM.
// Stages split the layers evenly unless told otherwise, as Megatron-LM's
// uneven-pipeline options do (pipeline_split.h): first_stage_layers /
// last_stage_layers (--decoder-first/last-pipeline-num-layers) give the
// first / last stage that many layers; account_for_embedding /
// account_for_loss (--account-for-embedding/loss-in-pipeline-split) count
// the embedding / the output layer and loss as one layer of the even split;
// layout (--pipeline-model-parallel-layout) places every layer by hand, in
// Megatron-Core's notation, and sets virtual_stages to its virtual stages
// over pipeline. DeepSeek-V3's 61 layers over 8 stages of 2 chunks, dense
// layers first, with one layer and the loss on the last virtual stage:
//
//   "model_parallel": {"tensor": 2, "pipeline": 8, "layout": "Et*4|(t*4|)*14,tL"}
//
// Llama 3 405B's 126 layers over 16 stages of 8 chunks, one layer per chunk
// and none beside the embedding and the output layer:
//
//   "model_parallel": {"tensor": 8, "pipeline": 16, "virtual_stages": 8,
//                      "account_for_embedding": true, "account_for_loss": true}
//
// microbatch_group_size (--microbatch-group-size-per-virtual-pipeline-stage;
// interleaving only) runs the micro-batches through the chunks in groups of
// N instead of p (pipeline_schedule.h): N in [p, m], and m mod N 0 or at
// least p, which lets m be other than a multiple of p.
// rank_order numbers the GPUs as Megatron-LM does, fastest-varying first:
// "tp-cp-dp-pp" (the default: a pipeline stage is a block of consecutive
// ranks, its data-parallel groups inside it) or "tp-cp-pp-dp"
// (--use-tp-pp-dp-mapping; Llama 3's [TP, CP, PP, DP], arXiv:2407.21783
// section 3.3.2: a pipeline is a block of consecutive ranks, and the
// data-parallel groups, whose traffic overlaps best, span the farthest).
//
// "pipeline" and "tensor" are required in the block, the rest optional.
//
// System "zero_pipeline" is ZeroPP (Tang et al. 2024; TECHNIQUES.md section
// 4): a TP-free pipeline whose stages shard their layers' model states over
// the data-parallel GPUs of the stage as the factors say, f_G = f_P. ZeRO-3
// inside a node plus plain data parallelism across nodes is (8, 8, 8); with
// ZeRO-1 across nodes (8, 8, "all"). The block names the pipeline and the
// scheduling unit, the micro-batches each stage runs back to back per chunk
// (pipeline_schedule.h's unit_schedule):
//
//   "model_parallel": {"pipeline": 8, "virtual_stages": 2, "scheduling_unit": 8}
//
// The data-parallel systems take one field of the block, DeepSpeed-Ulysses
// sequence parallelism (Jacobs et al. 2023, arXiv:2309.14509; DeepSpeed's
// sequence_parallel_size; TECHNIQUES.md section 6):
//
//   "model_parallel": {"ulysses": 4}
//
// u consecutive ranks split each micro-batch's sequence u ways; an all-to-all
// over them before the attention core trades that for 1/u of the heads on
// the whole sequence, one after it trades back (transformer_kernels.h).
// Model states stay sharded over all the ranks as the factors say; the
// global batch is split over GPUs / u groups.
//
// An optional "experts" block gives a MoE model's expert parallelism under
// the data-parallel systems (DeepSpeed-MoE's ep_size; TECHNIQUES.md section 6)
// and Megatron-LM (--expert-model-parallel-size, over the tensor x data x
// context GPUs of a pipeline stage, each expert whole on its GPUs):
//
//   "experts": {"parallel": 8, "layout": "E+D", "capacity_factor": 1.0}
//
// parallel: ranks each MoE layer's routed experts are split over (each holds
// experts / parallel of them; tokens reach them through an all-to-all over
// these ranks); the model states of the routed experts are then sharded over
// the expert-data-parallel group, the data-parallel size / parallel ranks
// holding the same experts, with each factor f taken as gcd(f, that size)
// ("all" becomes the whole group). layout: where the two groups fall
// (topology/placement.h): "E+D" puts an expert-parallel group on consecutive
// ranks, "D+E" an expert-data-parallel group. capacity_factor (optional, 1):
// each expert takes c T k / E of each rank's T tokens, its k choices each,
// padded or cut to that (DeepSpeed-MoE's capacity_factor; routing is taken as
// balanced, so 1 neither pads nor drops); dispatch and combine move that many
// token copies. dispatcher (optional, "all_to_all"): "all_to_all" sends each
// token copy to its expert's GPU and back (DeepSpeed-MoE, Megatron-Core's
// alltoall); "all_gather" gathers every GPU's tokens of the expert-parallel
// group and reduce-scatters the outputs back (Megatron-Core's allgather, its
// default). Any system may give the block; all but ZeroPP take parallel > 1.
#pragma once

#include "topology/placement.h"
#include "workloads/inputs/sharding_systems.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

// A factor as written: a GPU count, or 0 for "all".
struct FactorSpec {
  int parameters = 1;
  int gradients = 1;
  int optimizer = 1;
};

// Factors resolved for a data-parallel size.
struct ShardingFactors {
  int parameters = 1;  // f_P
  int gradients = 1;   // f_G
  int optimizer = 1;   // f_OS
};

struct BucketSizes {
  double reduce_bytes = 0;
  double all_gather_bytes = 0;
  double prefetch_bytes = 0;
  double persistence_threshold_parameters = 0;
  // DeepSpeed ZeRO-3's bounds on gathered parameters (parameter_fetch.h);
  // optional in plan files, DeepSpeed's defaults when absent.
  double max_live_parameters = 1e9;
  double max_reuse_distance_parameters = 1e9;
};

struct OverlapSwitches {
  bool gather_scatter = true;
  bool optimizer_all_reduce = true;
  bool parameter_broadcast = true;
};

// How Megatron-LM numbers the ranks of a tensor x context x data x pipeline
// job, fastest-varying first.
enum class RankOrder { tp_cp_dp_pp, tp_cp_pp_dp };

struct ModelParallelism {
  int tensor = 1;
  int pipeline = 1;
  int virtual_stages = 1;
  bool sequence_parallel = false;
  int scheduling_unit = 1;  // zero_pipeline: micro-batches per unit
  bool tp_comm_overlap = false;
  int ulysses = 1;  // DeepSpeed-Ulysses sequence parallelism (data-parallel systems)
  int context = 1;  // Megatron-LM context parallelism (ring attention)
  bool gradient_accumulation_fusion = true;  // Megatron-LM: wgrad GEMMs accumulate into main_grad
  // Megatron-LM before Megatron-Core: each tensor-parallel rank sends 1/t of a
  // pipeline tensor, all-gathered on arrival (without sequence parallelism).
  bool scatter_gather_pipeline_tensors = false;
  // Uneven pipeline stages (pipeline_split.h); unset / false: L / p layers each.
  std::optional<int> first_stage_layers = std::nullopt, last_stage_layers = std::nullopt;
  bool account_for_embedding = false, account_for_loss = false;
  // Megatron-Core's --pipeline-model-parallel-layout, as written
  // (pipeline_split.h); it sets virtual_stages.
  std::optional<std::string> layout = std::nullopt;
  // Interleaved schedule: micro-batches per group (pipeline_schedule.h's N); unset: the stages.
  std::optional<int> microbatch_group_size = std::nullopt;
  RankOrder rank_order = RankOrder::tp_cp_dp_pp;  // Megatron-LM: model_parallel_step.h's layout

  int gpus_per_replica() const { return tensor * pipeline * context; }
  int microbatch_group() const { return microbatch_group_size.value_or(pipeline); }
  // How many ways hidden states between blocks are split along the sequence.
  int sequence_shards() const { return sequence_parallel ? tensor : 1; }
  bool any() const { return tensor > 1 || pipeline > 1 || context > 1; }
};

// How a MoE layer's tokens reach their experts' GPUs (moe_kernels.h).
enum class TokenDispatcher : std::uint8_t { all_to_all, all_gather };

struct ExpertParallelism {
  int parallel = 1;
  topology::MoeLayout layout = topology::MoeLayout::expert_data;
  double capacity_factor = 1.0;
  TokenDispatcher dispatcher = TokenDispatcher::all_to_all;
  // Megatron-Core's --moe-shared-expert-overlap: the shared experts run on a
  // stream of their own beside the dispatch (moe_kernels.h).
  bool shared_expert_overlap = false;
  // Megatron-Core's --overlap-moe-expert-parallel-comm: the forward of one
  // micro-batch and the backward of another written as one pass, each one's
  // all-to-alls beside the other's compute (combined_1f1b.h); and
  // --delay-wgrad-compute, which runs weight gradients apart to hide more.
  bool overlap_expert_parallel_comm = false;
  bool delay_wgrad_compute = false;
};

struct Plan {
  std::string name;
  ShardingSystem system = ShardingSystem::zero;
  FactorSpec factors;
  int secondary_parameter_group = 1;  // ZeRO++ hpZ; 1 = off
  bool hierarchical_parameter_gather = false;  // MiCS
  BucketSizes buckets;
  OverlapSwitches overlap;
  bool as_implemented = true;
  bool multi_rank_bucketing = false;
  bool flat_all_gather = false;
  bool quantized_weights = false;    // ZeRO++ qwZ
  bool quantized_gradients = false;  // ZeRO++ qgZ
  ModelParallelism model_parallel;
  ExpertParallelism experts;
  std::vector<std::string> sources;
};

Plan parse_plan(const nlohmann::json& document, const std::string& file);
Plan load_plan(const std::string& file_or_preset);

// Resolves "all" to `data_parallel` and checks AMSP's rules, throwing
// InputError naming `file`, the field and the rule ("all", the whole
// data-parallel group, is always a valid mesh):
//  - every factor divides the data-parallel size;
//  - dependency rule: f_P <= f_G <= f_OS, each dividing the next;
//  - mesh filter: a factor up to the GPUs of a node divides them (the group
//    stays inside a node); a larger one is a multiple of them (whole nodes).
// The ZeRO++ secondary group obeys the same divisibility and mesh filter.
ShardingFactors resolve_factors(const Plan& plan, int data_parallel, int gpus_per_node, const std::string& file);

// The routed experts' factors: each of `factors` (and the ZeRO++ secondary
// group, returned in `secondary_group`) as gcd(f, expert-data-parallel size).
// Throws InputError naming `file` and experts.parallel unless it divides the
// data-parallel size and `experts`, the routed experts of each MoE layer
// (0: a dense model, which takes no expert parallelism).
// Throws InputError naming `file` and the field for what is not modelled
// yet: ZeroPP splitting its experts (experts.parallel), a plan with pipelines
// (Megatron-LM, ZeroPP) under DeepSpeed-Ulysses (model_parallel.ulysses),
// and Ulysses together with expert parallelism (experts.parallel).
void check_parallelism_system(const Plan& plan, const std::string& file);

struct ExpertShardingFactors {
  int data_parallel = 1;  // the expert-data-parallel size
  ShardingFactors factors;
  int secondary_group = 1;
};
ExpertShardingFactors resolve_expert_factors(const Plan& plan, int experts, const ShardingFactors& factors,
                                             int data_parallel, const std::string& file);

// GPUs / (tensor x pipeline), the data-parallel size; throws InputError
// naming `file` and model_parallel when it does not divide, or when the
// tensor-parallel group would leave a node of `gpus_per_node`.
int data_parallel_size(const Plan& plan, int gpus, int gpus_per_node, const std::string& file);

// The overlap levels of AMSP's ablation, cumulative: "all" (AG/RS + AR + BC),
// "ag-rs+ar", "ag-rs", "none"; "plan" leaves the plan's switches as they are.
inline const std::vector<std::string> kOverlapLevels = {"plan", "all", "ag-rs+ar", "ag-rs", "none"};

// Sets the plan's overlap switches to a level; std::invalid_argument for an
// unknown level.
void apply_overlap_level(Plan& plan, const std::string& level);

}  // namespace shardsim::workloads
