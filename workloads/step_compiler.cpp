#include "workloads/step_compiler.h"

#include "topology/json_input.h"
#include "workloads/data_parallel_step.h"
#include "workloads/memory_model.h"
#include "workloads/model_flops.h"
#include "workloads/model_parallel_step.h"
#include "workloads/zero_pipeline_step.h"

#include <algorithm>

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

Program compile_step(const StepConfig& config) {
  if (config.plan.system == ShardingSystem::megatron) return compile_model_parallel_step(config);
  if (config.plan.system == ShardingSystem::zero_pipeline) return compile_zero_pipeline_step(config);
  return compile_data_parallel_step(config);
}

StepMemory estimate_step_memory(const StepConfig& config) {
  const ShardingSystem system = config.plan.system;
  if (system != ShardingSystem::megatron && system != ShardingSystem::zero_pipeline) {
    const ShardingFactors factors = resolve_factors(config.plan, config.data_parallel, config.gpus_per_node, config.plan_file);
    const ExpertShardingFactors experts = resolve_expert_factors(
        config.plan, config.model.routed_experts(), factors, config.data_parallel, config.plan_file);
    return {estimate_memory(config.model, config.training, config.plan, factors, config.data_parallel, experts), 0,
            experts};
  }
  const std::vector<MemoryBreakdown> stages =
      system == ShardingSystem::zero_pipeline ? estimate_zero_pipeline_memory(config) : estimate_stage_memory(config);
  const auto fullest = std::max_element(stages.begin(), stages.end(), [](const MemoryBreakdown& a, const MemoryBreakdown& b) {
    return a.total() < b.total();
  });
  ExpertShardingFactors experts;
  if (system == ShardingSystem::megatron) {
    experts = megatron_expert_factors(
        config, resolve_factors(config.plan, sharding_group_size(config),
                                config.gpus_per_node / config.plan.model_parallel.tensor, config.plan_file));
  }
  return {*fullest, static_cast<int>(fullest - stages.begin()), experts};
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
