// compile_data_parallel_step: a step of the data-parallel systems (ZeRO 0-3,
// FSDP, MiCS, ZeRO++, AMSP; compile in step_compiler.h sends them here).
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
// zero_plus_plus_quantization.h says (qgZ across nodes only: within one node
// DeepSpeed keeps the reduce-scatter). Not modelled: with tied embeddings
// the head's GEMM does not gather the embedding again (one embedding-sized
// gather per pass too few under parameter sharding).
#pragma once

#include "workloads/compile/step_compiler.h"
#include "workloads/ir/program.h"

namespace shardsim::workloads {

// Throws InputError for plans or batches that do not fit the data-parallel
// size (naming the file, the field and the rule).
Program compile_data_parallel_step(const StepConfig& config);

}  // namespace shardsim::workloads
