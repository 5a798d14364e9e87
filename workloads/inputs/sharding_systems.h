// The registry of sharding systems: one record per system, the name plan
// files give it, what it does beyond its sharding factors (TECHNIQUES.md),
// and how `shardsim search` tries it. Code asks a plan's system what it
// does (behaviour_of(plan.system).deepspeed_parameter_fetch), never which
// system it is, so a system is added here, with its behaviours, and nowhere
// else but its own files: a compiler of its own when none fits
// (StepCompiler, compile/step_compiler.cpp), its plan presets
// (workloads/plans).
//
// Behaviours marked "as implemented" are published limitations of a
// system's implementation; a plan with behaviour "ideal" drops them
// (Plan::as_implemented).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim::workloads {

// In registry order.
enum class ShardingSystem : std::uint8_t { zero, fsdp, mics, zero_plus_plus, amsp, megatron, zero_pipeline };

// Which compiler builds a system's step (compile/step_compiler.h).
enum class StepCompiler : std::uint8_t {
  data_parallel,      // every rank a whole replica of the model (ZeRO 0-3, FSDP, MiCS, ZeRO++, AMSP)
  megatron_pipeline,  // Megatron-LM's tensor x pipeline x data parallelism
  zero_pipeline,      // ZeroPP's TP-free pipeline with the stages' states sharded
};

struct SystemBehaviour {
  StepCompiler compiler = StepCompiler::data_parallel;
  // DeepSpeed's stage-3 parameter coordinator fetches the parameters:
  // prefetch over the recorded trace, bounded by max_live_parameters and
  // max_reuse_distance_parameters (memory/parameter_fetch.h). Otherwise
  // each layer's gather is issued one layer ahead, as FSDP's backward
  // prefetch does.
  bool deepspeed_parameter_fetch = false;
  // As implemented (DeepSpeed stage 3, its MiCS and ZeRO++): the backward's
  // gradient reduce-scatter blocks the compute stream
  // (compile/data_parallel_step.cpp).
  bool blocking_backward_reduce_scatter = false;
  // As implemented (MiCS): the reduction across replica groups follows the
  // in-group reduce-scatter on the same stream, so it blocks too.
  bool replica_reduce_on_reduce_stream = false;
  // As implemented (DeepSpeed ZeRO-1/2 before PR #4695): each gradient
  // bucket is reduced to its owners, one reduce per owner, unless the plan
  // asks for multi_rank_bucketing.
  bool reduce_to_gradient_owners = false;
  // As implemented (DeepSpeed ZeRO-1/2): the updated parameters are
  // all-gathered at the end of the step, not beside the next forward.
  bool gathers_updated_parameters_at_step_end = false;
  // AMSP's inter-tensor sharding of the update: whole modules assigned to
  // the ranks of the group, each broadcasting its own.
  bool whole_module_updates = false;
  // Megatron-LM accumulates and reduces bf16 gradients in fp32
  // (accumulate_allreduce_grads_in_fp32, forced on for bf16).
  bool fp32_gradients_for_bf16 = false;
  // Plan fields only some systems take: ZeRO++'s secondary parameter copy
  // (hpZ), MiCS's two-hop parameter gather, ZeRO++'s quantized weights and
  // gradients (qwZ, qgZ; DeepSpeed stage 3 takes them too).
  bool secondary_parameter_copy = false;
  bool hierarchical_parameter_gather = false;
  bool quantized_communication = false;
  // PyTorch FSDP2 (fully_shard; torchtitan's): each parameter sharded on its
  // own, so a gather is copied out of the flat all-gather output into the
  // unsharded parameters and gradients are copied into a flat reduce-scatter
  // input, both on the compute stream (compile/data_parallel_step.cpp).
  bool per_parameter_copies = false;
  // The kernels a plan of this system runs unless it names them: what its
  // users run (PyTorch FSDP: eager modules, as torchtitan; the others:
  // Megatron-style fused kernels).
  bool eager_kernels_by_default = false;

  // Megatron-LM and ZeroPP: stages of layers, each on its own GPUs.
  bool pipelines() const { return compiler != StepCompiler::data_parallel; }
};

// A preset the search sizes to every sharding group that divides the job:
// "{k}" in the name pattern stands for the group's GPUs.
struct GroupPreset {
  std::string_view preset;
  std::string_view name_pattern;
};

// How `shardsim search` tries a system (sim/search/plan_space.h). The family
// is what --systems names, and each family has its enumeration there:
// "named" tries each preset as it is and each group preset at every group
// size; "amsp", "megatron" and "zero-pipeline" vary their one preset (factor
// triples, pipeline layouts).
struct SearchEntry {
  std::string_view family;
  std::vector<std::string_view> presets;
  std::vector<GroupPreset> group_presets;
};

struct ShardingSystemRecord {
  ShardingSystem system;
  std::string_view name;   // a plan file's "system"
  std::string_view title;  // for people: "DeepSpeed ZeRO", "ZeroPP (Tang et al. 2024)"
  SystemBehaviour behaviour;
  SearchEntry search;
};

// Every system, in registry order.
const std::vector<ShardingSystemRecord>& sharding_systems();
const ShardingSystemRecord& record_of(ShardingSystem system);
const SystemBehaviour& behaviour_of(ShardingSystem system);
std::optional<ShardingSystem> parse_sharding_system(std::string_view name);
std::string to_string(ShardingSystem system);

// Names of the systems whose behaviour passes `filter` (all of them when
// none is given), in registry order.
std::vector<std::string> system_names(bool (*filter)(const SystemBehaviour&) = nullptr);

// The search families, in registry order of their first system.
std::vector<std::string> search_families();
// The preset a family other than "named" varies (its first system's).
std::string search_preset(std::string_view family);

}  // namespace shardsim::workloads
