#include "workloads/kernels/tensor_parallel_gemms.h"

namespace shardsim::workloads {

namespace {

// Transformer Engine's pipelined GEMM + reduce-scatter splits the GEMM in four
// (initialize_ub's default num_splits for its "pipeline" method).
constexpr int kPipelinedReduceScatterSplits = 4;

}  // namespace

TensorParallelGemms::TensorParallelGemms(const LayerShapes& x, const ModelParallelism& parallel)
    : x_(x),
      t_(parallel.tensor),
      tensor_parallel_(parallel.tensor > 1),
      sequence_parallel_(parallel.sequence_parallel),
      comm_overlap_(parallel.tensor > 1 && parallel.sequence_parallel && parallel.tp_comm_overlap) {}

KernelSpec TensorParallelGemms::call(const std::string& name, CollectiveOp op, double bytes) const {
  return group_call(name, CallGroup::tensor_parallel, op, bytes);
}

void TensorParallelGemms::gather_input(std::vector<KernelSpec>& list, const std::string& name, double width) const {
  if (tensor_parallel_ && sequence_parallel_) {
    list.push_back(call(name + ".all_gather", CollectiveOp::all_gather, tokens_bytes(width)));
  }
}

void TensorParallelGemms::combine(std::vector<KernelSpec>& list, const std::string& name, double width) const {
  if (!tensor_parallel_) return;
  list.push_back(sequence_parallel_ ? call(name + ".reduce_scatter", CollectiveOp::reduce_scatter, tokens_bytes(width))
                                    : call(name + ".all_reduce", CollectiveOp::all_reduce, tokens_bytes(width)));
}

// Without tp_comm_overlap: the all-gather, then the GEMM. With it,
// Transformer Engine's ring exchange (userbuffers, num_splits = t): the GEMM
// runs on this GPU's T / t tokens at once, then on each slice received from
// the previous rank while the next one moves; t - 1 steps, each rank sending
// a slice to the next (send_recv over the group).
void TensorParallelGemms::gathered_gemm(std::vector<KernelSpec>& list, const std::string& gather_name,
                                        const std::string& name, double n, double k) const {
  const double T = x_.tokens;
  if (!comm_overlap_) {
    gather_input(list, gather_name, k);
    list.push_back(waiting_for_call(gemm(name, x_, T, n, k), after_gather()));
    return;
  }
  for (int step = 1; step < t_; ++step) {
    list.push_back(call(gather_name + ".ring" + std::to_string(step), CollectiveOp::send_recv, tokens_bytes(k) / t_));
  }
  for (int slice = 0; slice < t_; ++slice) {
    list.push_back(
        waiting_for_call(gemm(name + ".slice" + std::to_string(slice), x_, T / t_, n, k), slice > 0 ? t_ - slice : 0));
  }
}

// With tp_comm_overlap, Transformer Engine's pipelined GEMM + reduce-scatter:
// the GEMM in slices of the tokens, each slice reduce-scattered while the
// next computes.
void TensorParallelGemms::combined_gemm(std::vector<KernelSpec>& list, const std::string& name, double in) const {
  const double T = x_.tokens, h = x_.hidden;
  if (!comm_overlap_) {
    list.push_back(gemm(name, x_, T, h, in));
    combine(list, name, h);
    return;
  }
  const int splits = kPipelinedReduceScatterSplits;
  for (int slice = 0; slice < splits; ++slice) {
    const std::string part = name + ".slice" + std::to_string(slice);
    list.push_back(gemm(part, x_, T / splits, h, in));
    list.push_back(call(part + ".reduce_scatter", CollectiveOp::reduce_scatter, tokens_bytes(h) / splits));
  }
}

void TensorParallelGemms::row_backward(std::vector<KernelSpec>& list, const std::string& name, double in,
                                       double out) const {
  gathered_gemm(list, name + ".gradient", name + ".dgrad", in, out);
  list.push_back(weight_half(gemm(name + ".wgrad", x_, in, out, x_.tokens)));
}

void TensorParallelGemms::column_backward(std::vector<KernelSpec>& list, const std::string& name, double in,
                                          double out) const {
  gather_input(list, name + ".input", in);
  list.push_back(gemm(name + ".dgrad", x_, x_.tokens, in, out));
  combine(list, name + ".dgrad", in);
  list.push_back(weight_half(
      waiting_for_call(gemm(name + ".wgrad", x_, in, out, x_.tokens), tensor_parallel_ && sequence_parallel_ ? 2 : 0)));
}

}  // namespace shardsim::workloads
