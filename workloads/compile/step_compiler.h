// compile: (model, training, plan, data-parallel size) -> Program.
//
// Each system has its compiler: the data-parallel systems (ZeRO 0-3, FSDP,
// MiCS, ZeRO++, AMSP) data_parallel_step.h, Megatron-LM model_parallel_step.h,
// ZeroPP zero_pipeline_step.h. This header holds what they share: the step's
// configuration, the batch split, the memory estimate and the description
// every Program carries.
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"
#include "workloads/ir/program.h"
#include "workloads/memory/memory_model.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace shardsim::workloads {

struct StepConfig {
  ModelSpec model;
  TrainingConfig training;
  Plan plan;
  int data_parallel = 1;  // GPUs / (tensor x pipeline parallel)
  int gpus_per_node = 8;
  std::string plan_file = "plan";          // named in errors about the plan
  std::string training_file = "training";  // named in errors about the batch

  int ranks() const { return data_parallel * plan.model_parallel.gpus_per_replica(); }
};

// The data-parallel replicas the global batch is split over: the
// data-parallel size, over u under DeepSpeed-Ulysses (u ranks share each
// micro-batch). Throws InputError naming the plan file and
// model_parallel.ulysses when u does not divide the data-parallel size.
int batch_replicas(const StepConfig& config);

// The GPUs the sharding factors split model states over: the data-parallel
// ones, times the context-parallel ones, which hold the same parameters.
int sharding_group_size(const StepConfig& config);

// Micro-batches each rank runs per step: the global batch over the batch
// replicas; throws InputError naming the training file when it does not split.
std::int64_t micro_batches_per_step(const StepConfig& config);

// Throws InputError for plans or batches that do not fit the data-parallel
// size (naming the file, the field and the rule). Megatron-LM plans go to
// compile_model_parallel_step (model_parallel_step.h), ZeroPP plans to
// compile_zero_pipeline_step (zero_pipeline_step.h).
Program compile(const StepConfig& config);

// The work bound compile() applies first: micro-batches per rank x (layers
// + 2) at most kMaxLayerPassesPerRank, else InputError naming the training
// file's global batch, with the count and what lowers it.
inline constexpr double kMaxLayerPassesPerRank = 1e6;
void check_step_work(const StepConfig& config);

// The memory model's peak per GPU of any plan, without compiling the step:
// estimate_memory (memory_model.h) for the data-parallel systems; for
// Megatron-LM and ZeroPP the fullest pipeline stage's (estimate_stage_memory,
// estimate_zero_pipeline_memory). Throws InputError, naming the plan file,
// for factors or a pipeline the GPUs or the model cannot take.
struct StepMemory {
  MemoryBreakdown memory;
  int stage = 0;  // the fullest pipeline stage (0 without a pipeline)
  ExpertShardingFactors experts;  // the routed experts' sharding (data-parallel systems, Megatron-LM)
};
StepMemory estimate_step_memory(const StepConfig& config);

// What every compiler records of its inputs in Program::description (the
// model, plan, factors, batch, FLOPs and dtype); each adds its own fields.
nlohmann::json step_description(const StepConfig& config, const ShardingFactors& factors, std::int64_t micro_batches);

// The "experts" entry of a description under expert parallelism: parallel,
// layout, capacity_factor, and the expert-data-parallel size and factors.
nlohmann::json expert_description(const Plan& plan, const ExpertShardingFactors& experts);

}  // namespace shardsim::workloads
