// Plan: how a training step is spread over the GPUs: the sharding system
// and its sharding factors, bucket sizes, which overlaps run, and the
// tensor, pipeline, sequence and expert parallelism around it.
//
// Every system is expressed in AMSP's terms (TECHNIQUES.md sections 1-3):
// parameters (P), gradients (G) and optimizer states (OS) each have a
// sharding factor f, the number of GPUs one copy is split over ("all" =
// every data-parallel GPU). ZeRO-1 is (1, 1, all), ZeRO-2 (1, all, all),
// ZeRO-3 and FSDP FULL_SHARD (all, all, all), MiCS(k) and FSDP
// HYBRID_SHARD(k) (k, k, k). What a system does beyond its factors is its
// record in the registry (sharding_systems.h).
//
// The plan file, every key with its meaning, and the presets are described
// in the README's "Files" section; the fields below say where each goes.
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

// The three overlaps of AMSP's ablation.
struct OverlapSwitches {
  bool gather_scatter = true;        // parameter gathers and gradient reduce-scatters beside compute
  bool optimizer_all_reduce = true;  // the optimizer-state all-reduce during the last backward
  bool parameter_broadcast = true;   // the parameter broadcasts beside the next forward
};

// How Megatron-LM numbers the ranks of a tensor x context x data x pipeline
// job, fastest-varying first.
enum class RankOrder { tp_cp_dp_pp, tp_cp_pp_dp };

struct ModelParallelism {
  int tensor = 1;          // GPUs that split every layer's GEMMs, inside a node
  int pipeline = 1;        // stages, each a contiguous run of layers
  int virtual_stages = 1;  // model chunks per stage: interleaved 1F1B above 1
  // Norms, residuals and dropout split along the sequence over the
  // tensor-parallel group; each of its all-reduces a gather + reduce-scatter.
  bool sequence_parallel = false;
  int scheduling_unit = 1;  // zero_pipeline: micro-batches per unit
  // Transformer Engine's userbuffers hide the sequence-parallel gathers and
  // reduce-scatters behind GEMM slices (transformer_kernels.h).
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
  int parallel = 1;  // GPUs each MoE layer's routed experts are split over
  topology::MoeLayout layout = topology::MoeLayout::expert_data;  // E+D or D+E (topology/placement.h)
  double capacity_factor = 1.0;  // each expert takes c T k / E of a rank's T tokens, padded or cut
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

// How the framework writes a layer's kernels (transformer_kernels.h): a
// plan file's "kernels", else its system's default (sharding_systems.h).
enum class KernelImplementation : std::uint8_t {
  fused,  // Megatron-Core with Transformer Engine: fused QKV and gate/up GEMMs, fused RoPE, SwiGLU, cross-entropy
  eager,  // PyTorch eager modules as torchtitan's Llama writes them: a kernel per op
};
std::string to_string(KernelImplementation kernels);

// The dtype gradients are kept and reduced in: the training's (bf16/fp16;
// Megatron-LM's --grad-reduce-in-bf16), or fp32 (PyTorch FSDP's
// MixedPrecisionPolicy(reduce_dtype=torch.float32), as torchtitan sets it;
// Megatron-LM's default for bf16).
enum class GradientReduceDtype : std::uint8_t { training, fp32 };

struct Plan {
  std::string name;
  ShardingSystem system = ShardingSystem::zero;
  FactorSpec factors;
  int secondary_parameter_group = 1;  // ZeRO++ hpZ; 1 = off
  bool hierarchical_parameter_gather = false;  // MiCS
  BucketSizes buckets;
  OverlapSwitches overlap;
  // Each system's published limitations (SystemBehaviour's "as implemented"
  // ones) on; false is the plan file's behaviour "ideal".
  bool as_implemented = true;
  bool multi_rank_bucketing = false;  // ZeRO-1/2: all-reduce each gradient bucket, not a reduce per owner
  bool flat_all_gather = false;       // ZeRO-1/2: the updated parameters in one gather, not in buckets
  bool quantized_weights = false;    // ZeRO++ qwZ
  bool quantized_gradients = false;  // ZeRO++ qgZ
  KernelImplementation kernels = KernelImplementation::fused;
  // Unset: the system's (SystemBehaviour::fp32_gradients_for_bf16). ZeroPP reduces as its compiler says.
  std::optional<GradientReduceDtype> reduce_dtype;
  // PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (caching_allocator.h),
  // as torchtitan's run_llama_train.sh launches; PyTorch's default is off.
  bool expandable_segments = false;
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
