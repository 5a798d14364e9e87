// compile_step: (model, training, plan, data-parallel size) -> Program.
//
// Ranks are data-parallel replicas placed consecutively (rank r on GPU r),
// so every factor's group is a block of consecutive ranks that the mesh filter
// keeps inside a node or on whole nodes. Communicators, each created only
// when its groups have more than one rank:
//   parameters           blocks of f_P: parameter all-gathers and gradient
//                        reduce-scatters around every module;
//   secondary_parameters blocks of k (ZeRO++ hpZ): backward all-gathers;
//   gradient_shards      ranks of one f_G block holding the same parameter
//                        shard: the per-micro-batch reduction into the
//                        gradient shard when f_G > f_P;
//   parameter_replicas   the N / f_P ranks holding the same parameter shard:
//                        the last micro-batch's reduction for the optimizer
//                        (a reduce-scatter when f_OS = N, else AMSP's
//                        all-reduce that keeps what the optimizer shard needs);
//   parameter_update     ranks of one f_OS block holding the same parameter
//                        shard: spreading the updated parameters when
//                        f_OS > f_P (AMSP: one broadcast per module from the
//                        rank that updated it, modules assigned greedily by
//                        size; the other systems: all-gathers in buckets).
//
// Streams: compute, parameter_gather, gradient_reduce, optimizer_reduce,
// parameter_update. The plan's overlap switches (TECHNIQUES.md section 2):
//   gather_scatter       parameter all-gathers run ahead of the modules that
//                        need them, as the plan's fetch policy schedules them
//                        (parameter_fetch.h: DeepSpeed's prefetch queue for
//                        ZeRO, MiCS and ZeRO++, layer-ahead for AMSP and
//                        FSDP), and gradient reduce-scatters run beside the
//                        backward; off: each gather is issued when its module
//                        is next and the backward waits for each
//                        reduce-scatter;
//   optimizer_all_reduce the last micro-batch's replica reductions run in
//                        buckets during its backward; off: after it;
//   parameter_broadcast  the parameter update of the previous step runs at the
//                        start of this one, each module's forward waiting for
//                        its own part; off: at the end of the step, blocking.
// "as_implemented" keeps the published limitations: DeepSpeed ZeRO-3 and
// ZeRO++ do not overlap the backward reduce-scatter (the next backward kernel
// waits for it), MiCS's reduce-scatter also blocks its replica all-reduce
// (same stream), and DeepSpeed ZeRO-1/2 gather updated parameters at the end
// of the step, and reduce each gradient bucket to the owners of the flat
// partitions it covers, one reduce per owner (multi_rank_bucketing: one
// all-reduce of the bucket instead; "ideal": a reduce-scatter). Buckets:
// gradients are reduced in buckets of at least buckets.reduce_bytes, whole
// modules at a time; flat_all_gather makes the ZeRO-1/2 parameter
// all-gather one call instead of all_gather_bytes buckets. Tensors of at most
// buckets.persistence_threshold_parameters elements are held whole on every
// GPU when f_P > 1, left out of the module gathers and gathered once after
// the optimizer, as DeepSpeed ZeRO-3 does. ZeRO++'s quantized_weights and
// quantized_gradients add their kernels and shrink their calls as
// zeropp_quantization.h says (qgZ across nodes only: within one node
// DeepSpeed keeps the reduce-scatter). Not modelled: with tied embeddings
// the head's GEMM does not gather the embedding again (one embedding-sized
// gather per pass too few under parameter sharding).
#pragma once

#include "workloads/memory_model.h"
#include "workloads/model.h"
#include "workloads/plan.h"
#include "workloads/program.h"
#include "workloads/training.h"

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
Program compile_step(const StepConfig& config);

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
