// compile_zero_pipeline_step: a ZeroPP step (plan system "zero_pipeline")
// -> Program: a TP-free pipeline whose stages shard their model states over
// their data-parallel GPUs (Tang et al. 2024; TECHNIQUES.md section 4).
//
// Ranks as Megatron-LM orders them with no tensor parallelism: rank =
// dp + d pp, so a stage's data-parallel GPUs are consecutive and a factor of
// 8 keeps its groups inside a node. Communicators, each created only when its
// groups have more than one rank:
//   parameters           per stage, blocks of f_P ranks: each unit's
//                        parameter all-gathers and gradient reduce-scatters;
//   parameter_replicas   per stage, the d / f_P ranks holding the same shard:
//                        the last unit's reduction for the optimizer (an
//                        all-reduce, ZeroPP's inter-node data parallelism; a
//                        reduce-scatter when f_OS = d, its ZeRO-1 across
//                        nodes);
//   parameter_update     per stage, the ranks of one f_OS block holding the
//                        same shard: the updated parameters all-gathered
//                        when f_OS > f_P;
//   pipeline_forward<s>, pipeline_backward<s>, embedding: one-way sends and
//                        the tied-embedding all-reduce, as in
//                        model_parallel_step.h.
//
// Each stage runs its passes in unit_schedule's order (pipeline_schedule.h),
// ordered with pass times estimated from the chunks' FLOPs. A chunk's
// parameters are whole from the first to the last forward of a unit, and
// from its first to its last input gradient (the weight gradients need only
// activations and output gradients); windows that overlap or are separated
// only by weight-gradient passes merge, so where F and B alternate (the last
// chunk) the parameters are gathered once per unit. Each window's all-gather
// (in buckets of buckets.all_gather_bytes) is issued when the window before
// opens, one window of prefetch (overlap.gather_scatter off: when it opens,
// and the next kernel waits for each reduce-scatter). Activations are held
// from a forward to its weight-gradient pass (what recompute rebuilds from
// its input-gradient pass; under full recompute, a whole layer, so then each
// weight-gradient pass runs before the next input-gradient pass). Weight gradients accumulate over
// a unit in a full-size buffer when f_G > 1, reduce-scattered in buckets of
// buckets.reduce_bytes during the unit's last weight-gradient pass of the
// chunk, into shards that accumulate over the units. The last unit's shards
// are reduced across replicas as they come (overlap.optimizer_all_reduce;
// off: after the last pass); the optimizer updates its shard; the update
// all-gathers run at the start of the next step, each chunk's first gather
// waiting for its part (overlap.parameter_broadcast), or at the end.
#pragma once

#include "workloads/compile/step_compiler.h"
#include "workloads/ir/program.h"
#include "workloads/memory/memory_model.h"

#include <vector>

namespace shardsim::workloads {

// Throws InputError naming the plan or training file, as partition_model
// does (model_parallel_step.h): layers that do not split into pipeline x
// virtual_stages chunks, a scheduling unit that does not divide the
// micro-batches, factors that break the mesh or dependency rules.
Program compile_zero_pipeline_step(const StepConfig& config);

// Peak memory of one GPU of each stage without simulating the step: its
// model-state shards, plus its allocations and frees walked in the order the
// stage issues them.
std::vector<MemoryBreakdown> estimate_zero_pipeline_memory(const StepConfig& config);

}  // namespace shardsim::workloads
