// compile_model_parallel_step: a Megatron-LM step (plan system "megatron")
// -> Program: tensor, pipeline and data parallelism (TECHNIQUES.md section 5).
//
// Ranks follow Megatron's default order, tensor-parallel fastest, then data,
// then pipeline: rank = tp + t (dp + d pp). Stage pp runs its own op list;
// every tensor- and data-parallel rank of a stage shares it. Communicators:
//   tensor_parallel      t consecutive ranks: the calls inside each layer
//                        (transformer_kernels.h);
//   data_parallel        the d ranks of one (tp, pp): gradient reductions and,
//                        with the distributed optimizer, parameter gathers;
//   pipeline_forward<s>  the rank of stage s and that of the next stage
//                        (stage 0 after the last, for the interleaved
//                        schedule's wrap) with the same (tp, dp): one send per
//                        micro-batch and chunk crossing the boundary;
//   pipeline_backward<s> the same pairs, the gradients going back;
//   embedding            first and last stage, tied embeddings only: the
//                        all-reduce of the word-embedding gradient both hold;
//   expert_parallel      with experts.parallel = ep > 1, per stage the ep
//                        ranks a MoE layer's routed experts are split over:
//                        its dispatch and combine calls, on the
//                        expert_all_to_all stream. The stage's t x d x c
//                        ranks (tensor fastest) are cut as the plan's
//                        experts.layout says (topology/placement.h); "E+D",
//                        ep consecutive ranks, is Megatron-Core's order
//                        tp-cp-ep-dp-pp with expert tensor parallelism 1;
//   expert_data_parallel the t d c / ep ranks of a stage holding the same
//                        experts: their gradient reductions and parameter
//                        gathers (Megatron-Core's expert-data-parallel
//                        group); with tensor parallelism also at ep = 1,
//                        each GPU then holding every expert whole.
//
// Each stage runs its passes in pipeline_schedule.h's order. A forward
// waits for its input activations (a send from the previous stage, on the
// activation_receive stream) and sends its output on activation_send;
// backwards likewise on gradient_receive / gradient_send, each stream one
// pipeline boundary in one direction so the sends of every boundary pair up
// in the same order on both sides. Activations are allocated per module in
// forward and freed after its backward, so the in-flight micro-batches of
// the schedule (p - s on stage s under 1F1B) show in the memory timeline.
//
// Data parallelism as Megatron runs it: gradients accumulate locally over
// the micro-batches; during the last micro-batch's backward of each chunk
// they are reduced in buckets of buckets.reduce_bytes (reduce-scatter with
// the distributed optimizer, f_OS = all; all-reduce otherwise) as soon as a
// bucket's modules are done (overlap.optimizer_all_reduce; off: after the
// whole backward); under expert parallelism the routed experts' gradients
// fill buckets of their own, reduced over the expert-data-parallel group and
// sharded over it by the distributed optimizer (Megatron-Core's
// expert-parallel buffers). Under sequence parallelism the whole tensors
// that ran on a GPU's part of the sequence (ModuleWork's
// sequence_parallel_parameters) are then all-reduced over the tensor-parallel
// group in one call, as finalize_model_grads does after the data-parallel
// sync. The optimizer updates the GPU's shard; the
// distributed optimizer then all-gathers the parameters in buckets of
// buckets.all_gather_bytes (the routed experts' apart, over their group), at
// the start of the next step with each module's first forward waiting for
// its bucket (overlap.parameter_broadcast, Megatron's overlap_param_gather),
// or at the end of this one.
#pragma once

#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/plan.h"
#include "workloads/ir/program.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/memory_model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

// Megatron's rank orders: tensor-parallel fastest, then data, then pipeline
// by default; tensor, then pipeline, then data with tp-cp-pp-dp.
struct ModelParallelLayout {
  int tensor = 1, data = 1, pipeline = 1;
  // With context parallelism the data index is cp + context dp, and the
  // order (plan.h's rank_order) places the two parts: Megatron's default
  // tp-cp-dp-pp keeps them together inside the pipeline index; tp-cp-pp-dp
  // (Megatron's --use-tp-pp-dp-mapping, Llama 3's [TP, CP, PP, DP]) puts the
  // pipeline between them, data parallelism outermost.
  int context = 1;
  RankOrder order = RankOrder::tp_cp_dp_pp;

  int ranks() const { return tensor * data * pipeline; }
  int rank(int tp, int dp, int pp) const {
    if (order == RankOrder::tp_cp_dp_pp) return tp + tensor * (dp + data * pp);
    return tp + tensor * (dp % context + context * (pp + pipeline * (dp / context)));
  }
  int tp(int rank) const { return rank % tensor; }
  int dp(int rank) const {
    if (order == RankOrder::tp_cp_dp_pp) return rank / tensor % data;
    return rank / tensor % context + context * (rank / (tensor * context * pipeline));
  }
  int pp(int rank) const {
    if (order == RankOrder::tp_cp_dp_pp) return rank / (tensor * data);
    return rank / (tensor * context) % pipeline;
  }
};

// The communicator of one pipeline boundary: for every (tp, dp), the ranks of
// stages a and b; the other ranks are in no group.
Communicator pipeline_stage_pairs(std::string name, const ModelParallelLayout& layout, int a, int b);

// A pipeline's communicators: per boundary s (stage s and stage (s + 1) mod
// p; the wrap only with v > 1 chunks), one for the forward sends and one for
// the backward sends, and the first and last stage's pair that all-reduces a
// tied embedding's gradient.
struct PipelineCommunicators {
  std::vector<int> forward, backward;
  std::optional<int> embedding;
};

// Adds them to program.communicators.
PipelineCommunicators add_pipeline_communicators(Program& program, const ModelParallelLayout& layout, int virtual_stages,
                                                 bool tied_embedding);

// The routed experts' factors over their expert-data-parallel group, a
// stage's t d c GPUs / experts.parallel: the `dense` factors (over the data
// x context GPUs) as resolve_expert_factors takes them (plan.h), the
// distributed optimizer's over the whole group. Throws InputError naming the
// plan file and experts.parallel when it does not divide the experts or
// those GPUs.
ExpertShardingFactors megatron_expert_factors(const StepConfig& config, const ShardingFactors& dense);

// One op list per stage: rank r runs its stage's.
std::vector<int> stage_of_rank(const ModelParallelLayout& layout);

// The model cut into stages and chunks, per GPU of a tensor-parallel group.
struct ModelParallelPartition {
  ShardingFactors factors;               // over the data-parallel group
  std::int64_t micro_batches = 1;        // per step, per pipeline
  std::vector<ModuleWork> modules;       // one GPU's part (transformer_kernels.h)
  // Layers per virtual stage (pipeline_split.h); chunk c of stage s is
  // virtual stage c p + s.
  std::vector<int> virtual_stage_layers;
  // [stage][chunk]: module indices in forward order, each chunk a run of
  // consecutive layers.
  std::vector<std::vector<std::vector<std::size_t>>> chunks;
  std::vector<double> stage_parameters;  // one GPU's parameters, per stage
  // A MoE model's routed experts reduce and shard over a group of their own
  // when they are split (expert parallelism) or whole where the rest is split
  // (tensor parallelism): their part of stage_parameters (zero otherwise),
  // and their factors over that expert-data-parallel group.
  bool experts_apart = false;
  std::vector<double> stage_expert_parameters;
  ExpertShardingFactors expert_factors;
  double tied_embedding_parameters = 0;  // the last stage's copy (tied or MTP, p > 1)
  double gradient_bytes_per_value = 4;   // fp32 for bf16 training under Megatron-LM
  double boundary_bytes = 0;             // activations crossing a stage boundary, each sending rank's
  double boundary_gather_bytes = 0;      // the whole tensor, all-gathered on arrival (scatter/gather); else 0
};

// Throws as compile_model_parallel_step does, and for a zero_pipeline
// scheduling unit that does not divide the micro-batches.
ModelParallelPartition partition_model(const StepConfig& config);

// Peak memory of one GPU of each stage without simulating: model states as
// the step holds them, and the activations of the micro-batches the schedule
// keeps in flight at once (walking pipeline_schedule.h's order), plus one
// layer rebuilt under full recompute.
std::vector<MemoryBreakdown> estimate_stage_memory(const StepConfig& config);

// Throws InputError naming the plan file when the layers do not split into
// chunks as the plan says (pipeline_split.h), the micro-batches of an interleaved
// schedule do not go in groups of the plan's N (pipeline_schedule.h), or tensor
// parallelism does not divide the heads or the MLP width.
Program compile_model_parallel_step(const StepConfig& config);

}  // namespace shardsim::workloads
