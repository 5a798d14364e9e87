#include "workloads/kernels/mtp_kernels.h"

namespace shardsim::workloads {

std::vector<KernelSpec> mtp_input(const ModelSpec& model, const LayerShapes& x, const ModelParallelism& parallel,
                                  const TensorParallelGemms& linear, double local_tokens, ModuleWork& input) {
  const double T = x.tokens, h = x.hidden;
  const bool tensor_parallel = parallel.tensor > 1;
  const double out = h / parallel.tensor;  // this GPU's eh_proj outputs
  const int after_gather = linear.after_gather(), after_combine = linear.after_combine();
  const double lookup_values = (model.positions == PositionKind::learned ? 5 : 2) * T * h;

  std::vector<KernelSpec>& forward = input.forward;
  forward.push_back(elementwise("embedding", x, lookup_values));
  linear.combine(forward, "embedding", h);
  const std::size_t checkpointed = forward.size();
  forward.push_back(waiting_for_call(elementwise("enorm", x, 2 * local_tokens * h), after_combine));
  forward.push_back(elementwise("hnorm", x, 2 * local_tokens * h));
  forward.push_back(elementwise("eh_concat", x, 4 * local_tokens * h));
  linear.gather_input(forward, "eh_proj.input", 2 * h);
  forward.push_back(waiting_for_call(gemm("eh_proj", x, T, out, 2 * h), after_gather));
  if (tensor_parallel) {
    forward.push_back(group_call("eh_proj.output.all_gather", CallGroup::tensor_parallel, CollectiveOp::all_gather,
                                 x.e * T * h));
  }

  std::vector<KernelSpec>& backward = input.backward;
  // The output gradient gathered along the sequence, then eh_proj's input
  // gathered again for the weight gradient: the dgrad waits for the first,
  // the wgrad for the second.
  linear.gather_input(backward, "eh_proj.gradient", h);
  linear.gather_input(backward, "eh_proj.input", 2 * h);
  backward.push_back(waiting_for_call(gemm("eh_proj.dgrad", x, T, 2 * h, out), 2 * after_gather));
  linear.combine(backward, "eh_proj.dgrad", 2 * h);
  backward.push_back(weight_half(waiting_for_call(gemm("eh_proj.wgrad", x, 2 * h, out, T), 2 * after_gather)));
  backward.push_back(waiting_for_call(elementwise("eh_concat.backward", x, 4 * local_tokens * h), after_combine));
  backward.push_back(elementwise("hnorm.backward", x, 3 * local_tokens * h));
  backward.push_back(elementwise("enorm.backward", x, 3 * local_tokens * h));
  linear.gather_input(backward, "embedding.gradient", h);
  backward.push_back(weight_half(waiting_for_call(elementwise("embedding.backward", x, 3 * T * h), after_gather)));
  std::vector<KernelSpec> rebuilt(forward.begin() + static_cast<std::ptrdiff_t>(checkpointed), forward.end());
  rebuilt.front().waits_for_call = 0;  // the looked-up embeddings are kept: their combine does not run again
  return rebuilt;
}

}  // namespace shardsim::workloads
