#include "workloads/compile/step_compiler.h"

#include "topology/base/json_input.h"
#include "topology/base/text_format.h"
#include "workloads/compile/data_parallel_step.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/zero_pipeline_step.h"
#include "workloads/inputs/model_flops.h"
#include "workloads/memory/memory_model.h"

#include <algorithm>
#include <stdexcept>

namespace shardsim::workloads {

int batch_replicas(const StepConfig& config) {
  const int u = config.plan.model_parallel.ulysses;
  if (config.data_parallel % u != 0) {
    throw_input_error(config.plan_file, "model_parallel.ulysses",
                      std::to_string(u) + " does not divide the " + std::to_string(config.data_parallel) +
                          " data-parallel GPUs");
  }
  return config.data_parallel / u;
}

int sharding_group_size(const StepConfig& config) {
  return config.data_parallel * config.plan.model_parallel.context;
}

std::int64_t micro_batches_per_step(const StepConfig& config) {
  return gradient_accumulation_steps(config.training, batch_replicas(config), config.training_file);
}

namespace {

StepMemory data_parallel_memory(const StepConfig& config) {
  const ShardingFactors factors = resolve_factors(config.plan, config.data_parallel, config.gpus_per_node, config.plan_file);
  const ExpertShardingFactors experts = resolve_expert_factors(config.plan, config.model.routed_experts(), factors,
                                                               config.data_parallel, config.plan_file);
  return {estimate_memory(config.model, config.training, config.plan, factors, config.data_parallel, experts), 0,
          experts};
}

// The fullest of a pipeline's stages.
StepMemory fullest_stage(const std::vector<MemoryBreakdown>& stages, const ExpertShardingFactors& experts) {
  const auto fullest = std::max_element(stages.begin(), stages.end(), [](const MemoryBreakdown& a, const MemoryBreakdown& b) {
    return a.total() < b.total();
  });
  return {*fullest, static_cast<int>(fullest - stages.begin()), experts};
}

StepMemory megatron_memory(const StepConfig& config) {
  const std::vector<MemoryBreakdown> stages = estimate_stage_memory(config);
  const ExpertShardingFactors experts = megatron_expert_factors(
      config, resolve_factors(config.plan, sharding_group_size(config),
                              config.gpus_per_node / config.plan.model_parallel.tensor, config.plan_file));
  return fullest_stage(stages, experts);
}

StepMemory zero_pipeline_memory(const StepConfig& config) {
  return fullest_stage(estimate_zero_pipeline_memory(config), {});
}

// What each compiler of the registry's (inputs/sharding_systems.h) builds
// with: the step and its memory estimate.
struct CompilerEntry {
  Program (*compile)(const StepConfig&);
  StepMemory (*memory)(const StepConfig&);
};

const CompilerEntry& compiler_of(const Plan& plan) {
  static const CompilerEntry data_parallel{compile_data_parallel_step, data_parallel_memory};
  static const CompilerEntry megatron{compile_model_parallel_step, megatron_memory};
  static const CompilerEntry zero_pipeline{compile_zero_pipeline_step, zero_pipeline_memory};
  switch (behaviour_of(plan.system).compiler) {
    case StepCompiler::data_parallel: return data_parallel;
    case StepCompiler::megatron_pipeline: return megatron;
    case StepCompiler::zero_pipeline: return zero_pipeline;
  }
  throw std::logic_error("compiler_of: unknown StepCompiler");
}

}  // namespace

namespace {

// torchtitan's recompute options are compiled where torchtitan runs them,
// on the data-parallel systems: a pipeline stage groups its layers'
// rebuilds as Megatron-LM's full or selective recompute does.
void check_recompute_for_pipelines(const StepConfig& config) {
  if (!behaviour_of(config.plan.system).pipelines()) return;
  if (config.training.recompute == Recompute::ops) {
    throw_input_error(config.training_file, "recompute",
                      "\"ops\" (torchtitan's policy) is compiled for the data-parallel systems, not for " +
                          to_string(config.plan.system) + "'s pipeline stages");
  }
  if (config.training.recompute_interval > 1) {
    throw_input_error(config.training_file, "recompute_interval",
                      "is compiled for the data-parallel systems, not for " + to_string(config.plan.system) +
                          "'s pipeline stages (Megatron-LM's --recompute-num-layers is not modelled)");
  }
}

}  // namespace

Program compile(const StepConfig& config) {
  check_step_work(config);
  check_recompute_for_pipelines(config);
  return compiler_of(config.plan).compile(config);
}

void check_step_work(const StepConfig& config) {
  // Each rank runs its micro-batches through its layers: a layer of a
  // micro-batch is some tens to a few hundred ops (forward, backward,
  // recompute, collectives), so the bound on their product keeps a Program
  // near 10^8 ops, what a run holds in a few GiB and simulates in minutes.
  const std::int64_t micro_batches = micro_batches_per_step(config);
  const double layer_passes = static_cast<double>(micro_batches) * (config.model.layers + 2);
  if (layer_passes > kMaxLayerPassesPerRank) {
    throw_input_error(config.training_file, "global_batch",
                      std::to_string(micro_batches) + " micro-batches a rank through " + std::to_string(config.model.layers) +
                          " layers is " + printf_string("%.3g", layer_passes) +
                          " layer passes a step, above the " + printf_string("%.0e", kMaxLayerPassesPerRank) +
                          " a simulation is bounded to (about 10^8 ops): a smaller global batch, a larger "
                          "micro-batch or more GPUs, or --scale micro_batches=N to simulate fewer");
  }
}

StepMemory estimate_step_memory(const StepConfig& config) {
  check_recompute_for_pipelines(config);
  return compiler_of(config.plan).memory(config);
}

nlohmann::json step_description(const StepConfig& config, const ShardingFactors& factors, std::int64_t micro_batches) {
  nlohmann::json description = {
      {"model", config.model.name},
      {"parameters", count_parameters(config.model).total()},
      {"plan", config.plan.name},
      {"system", to_string(config.plan.system)},
      {"data_parallel", config.data_parallel},
      {"factors", {{"parameters", factors.parameters}, {"gradients", factors.gradients}, {"optimizer", factors.optimizer}}},
      {"sequence_length", config.training.sequence_length},
      {"micro_batch_size", config.training.micro_batch_size},
      {"gradient_accumulation_steps", micro_batches},
      {"tokens_per_step", config.training.global_batch_tokens()},
      {"model_flops_per_step", model_flops_per_step(config.model, config.training)},
      {"recompute", recompute_label(config.training)},
      {"flash_attention", config.training.flash_attention},
      {"attention_kernel", to_string(config.training.attention_kernel)},
      {"dtype", config.training.fp16 ? "fp16" : "bf16"},
  };
  if (config.model.mtp_layers > 0) description["mtp_layers"] = config.model.mtp_layers;
  description["kernels"] = to_string(config.plan.kernels);
  if (config.plan.reduce_dtype) {
    description["reduce_dtype"] = *config.plan.reduce_dtype == GradientReduceDtype::fp32 ? "fp32" : "training";
  }
  if (config.plan.expandable_segments) description["expandable_segments"] = true;
  return description;
}

nlohmann::json expert_description(const Plan& plan, const ExpertShardingFactors& experts) {
  const ShardingFactors& f = experts.factors;
  return {{"parallel", plan.experts.parallel},
          {"layout", topology::to_string(plan.experts.layout)},
          {"data_parallel", experts.data_parallel},
          {"capacity_factor", plan.experts.capacity_factor},
          {"dispatcher", plan.experts.dispatcher == TokenDispatcher::all_gather ? "all_gather" : "all_to_all"},
          {"factors", {{"parameters", f.parameters}, {"gradients", f.gradients}, {"optimizer", f.optimizer}}}};
}

}  // namespace shardsim::workloads
