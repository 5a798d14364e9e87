// The pieces transformer_modules() (transformer_kernels.h) builds its
// kernel lists from: one GPU's shapes of a micro-batch, and the KernelSpecs
// of its GEMMs, element-wise passes and calls over model-parallel groups.
#pragma once

#include "workloads/kernels/transformer_kernels.h"

#include <string>
#include <vector>

namespace shardsim::workloads {

// The dtype of activations, gradients and element-wise work under the
// training's precision (fp8 touches only GEMMs).
Dtype value_dtype(const TrainingConfig& training);

// One GPU's part of a micro-batch: `tokens` it holds (the micro-batch's, or
// its share of the sequence), the whole `sequence` and `batch`, its widths
// under tensor parallelism (`ffn`, `vocab`, `heads`), `e` bytes per value,
// the dtype of element-wise work and of GEMMs. Attention's widths per token:
// `query` and `kv` (keys) at the query-key head size, `value` (values) and
// `context` (the core's output, one value vector per query head) at the
// value head size. Grouped-query attention has value = kv and context =
// query; multi-head latent attention has larger query-key heads than value
// heads.
struct LayerShapes {
  double tokens, sequence, batch, hidden, query, kv, value, context, ffn, vocab, heads, e;
  Dtype dtype, gemm_dtype;
  bool hidden_dropout;  // each residual add drops the branch first (a mask per value)
};

// (m x k) times (k x n) in the GEMM dtype: 2 m n k FLOPs, each operand and
// the result moved once.
KernelSpec gemm(const std::string& name, const LayerShapes& x, double m, double n, double k);

// A grouped GEMM over `experts` experts, each (m, n, k): one kernel, timed at
// one expert's shape.
KernelSpec grouped_gemm(const std::string& name, const LayerShapes& x, double experts, double m, double n, double k);

// A memory-bound pass moving `values_moved` values (reads and writes).
KernelSpec elementwise(const std::string& name, const LayerShapes& x, double values_moved);

// A memory-bound pass over `values` values that moves `bytes_per_value`
// bytes for each (what it reads and writes, in whatever dtypes): eager
// PyTorch's casts and complex products, FSDP2's copies.
KernelSpec memory_pass(const std::string& name, Dtype dtype, double values, double bytes_per_value);

// Dropout over `values` values on its own: forward reads them and writes
// them and a one-byte mask; backward reads the gradient and the mask and
// writes the gradient. Both move (2 e + 1) bytes per value.
KernelSpec masked_dropout(const std::string& name, const LayerShapes& x, double values);

// A block's residual add over `values` values, reading the branch and the
// residual and writing their sum; with hidden dropout Megatron-LM's fused
// bias-dropout-add, which also writes the mask (forward) or reads it
// (backward).
KernelSpec residual_add(const std::string& name, const LayerShapes& x, double values);

// An in-place add of a micro-batch's gradient into the gradient kept across
// micro-batches, over `parameters` values: reads the new one (`new_bytes` a
// value) and the kept one (`kept_bytes`), writes the kept one.
KernelSpec gradient_add(const std::string& name, Dtype dtype, double parameters, double new_bytes, double kept_bytes);

// A call over a model-parallel group, as a kernel list carries it.
KernelSpec group_call(const std::string& name, CallGroup group, CollectiveOp op, double bytes);

// `spec`, also waiting for the k-th latest call listed before it (0: none).
KernelSpec waiting_for_call(KernelSpec spec, int k);

// `spec` as part of the backward's weight-gradient half.
KernelSpec weight_half(KernelSpec spec);

// `list`'s entries appended to `to` as a chain on the side compute stream.
void append_on_side_stream(std::vector<KernelSpec>& to, std::vector<KernelSpec> list);

// `spec`, also waiting for the end of the side stream's chain.
KernelSpec joining_side_stream(KernelSpec spec);

}  // namespace shardsim::workloads
