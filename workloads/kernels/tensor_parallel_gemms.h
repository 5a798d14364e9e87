// The linear layers of a tensor-parallel block over t GPUs and the calls
// around them, as Megatron-LM runs them (Shoeybi et al. 2019; Korthikanti
// et al. 2022 for sequence parallelism):
//   column-parallel  (QKV, MLP up / gate_up, LM head) each GPU computes its
//                    1/t of the outputs from the whole input, gathered
//                    along the sequence first under sequence parallelism;
//   row-parallel     (output projection, MLP down) each GPU computes partial
//                    sums from its 1/t of the inputs, combined over the group
//                    (reduce-scatter under sequence parallelism, else
//                    all-reduce).
// With tp_comm_overlap, Transformer Engine's userbuffers take the place of
// the forward gathers and combines and the backward gathers of row-parallel
// output gradients: a ring exchange that feeds GEMM slices as they arrive,
// and a GEMM pipelined with its reduce-scatter. Without tensor parallelism
// each is its GEMM alone.
#pragma once

#include "workloads/kernels/kernel_specs.h"

#include <string>
#include <vector>

namespace shardsim::workloads {

class TensorParallelGemms {
 public:
  // `x`: one GPU's shapes (its 1/t widths); `parallel` the block's
  // parallelism (tensor, sequence_parallel, tp_comm_overlap).
  TensorParallelGemms(const LayerShapes& x, const ModelParallelism& parallel);

  // Before a column-parallel GEMM: its input, `width` values per token,
  // gathered along the sequence.
  void gather_input(std::vector<KernelSpec>& list, const std::string& name, double width) const;
  // After a row-parallel GEMM (forward) or a column-parallel one's input
  // gradient (backward): the partial sums, `width` values per token, combined.
  void combine(std::vector<KernelSpec>& list, const std::string& name, double width) const;
  // A GEMM (tokens, n, k) on an input gathered along the sequence (k values
  // per token).
  void gathered_gemm(std::vector<KernelSpec>& list, const std::string& gather_name, const std::string& name, double n,
                     double k) const;
  // A row-parallel GEMM's forward (tokens, hidden, in) and its combine.
  void combined_gemm(std::vector<KernelSpec>& list, const std::string& name, double in) const;
  // Backward of a row-parallel GEMM: the output gradient gathered along the
  // sequence under sequence parallelism, then the input and weight
  // gradients; the input gradient stays split, nothing to combine.
  void row_backward(std::vector<KernelSpec>& list, const std::string& name, double in, double out) const;
  // Backward of a column-parallel GEMM (`in` values per token in): the
  // input gradient, combined over the group while the weight gradient runs
  // (on the input gathered again under sequence parallelism, the call before
  // the combine).
  void column_backward(std::vector<KernelSpec>& list, const std::string& name, double in, double out) const;

  // waiting_for_call's k for the kernel right after gather_input / combine.
  int after_gather() const { return tensor_parallel_ && sequence_parallel_ ? 1 : 0; }
  int after_combine() const { return tensor_parallel_ ? 1 : 0; }

 private:
  KernelSpec call(const std::string& name, CollectiveOp op, double bytes) const;
  // The micro-batch's tokens at `width` values each.
  double tokens_bytes(double width) const { return x_.e * x_.tokens * width; }

  LayerShapes x_;
  int t_;
  bool tensor_parallel_, sequence_parallel_, comm_overlap_;
};

}  // namespace shardsim::workloads
