#include "workloads/moe_kernels.h"

namespace shardsim::workloads {

void moe_block(const ModelSpec& model, const LayerShapes& x, const ModelParallelism& parallel,
               const TensorParallelGemms& linear, const ExpertParallelism& parallelism, ModuleWork& mlp,
               ModuleWork& experts) {
  const MoeSpec& moe = model.moe;
  // This GPU's tokens of the block: the micro-batch's, 1/t of them under
  // sequence parallelism, which the router and the routed experts take
  // whole-width.
  const double T = x.tokens / parallel.sequence_shards(), h = x.hidden, E = moe.experts, k = moe.experts_per_token;
  const bool swiglu = model.mlp == MlpKind::swiglu;
  const std::string first = swiglu ? "gate_up" : "up", activation = swiglu ? "swiglu" : "gelu";
  const double activation_reads = swiglu ? 3 : 2, activation_backward = swiglu ? 5 : 3;

  mlp.forward.push_back(elementwise("mlp_norm", x, 2 * T * h));
  mlp.forward.push_back(gemm("router", x, T, E, h));
  mlp.forward.push_back(elementwise("router.top_k", x, 2 * T * E));  // softmax over the logits, then top-k
  const bool shared = moe.shared_experts > 0;
  if (shared) {
    // Always-active experts: one MLP of their summed width, split over the
    // tensor-parallel GPUs as a dense MLP is (Megatron-Core's SharedExpertMLP).
    const double f = static_cast<double>(moe.shared_experts * moe.shared_expert_ffn_hidden) / parallel.tensor;
    const double first_out = swiglu ? 2 * f : f;
    const double tokens = x.tokens;  // the column-parallel GEMM's, gathered along the sequence
    linear.gathered_gemm(mlp.forward, "shared." + first + ".input", "shared." + first, first_out, h);
    mlp.forward.push_back(elementwise("shared." + activation, x, activation_reads * tokens * f));
    linear.combined_gemm(mlp.forward, "shared.down", f);
    linear.row_backward(mlp.backward, "shared.down", f, h);
    mlp.backward.push_back(elementwise("shared." + activation + ".backward", x, activation_backward * tokens * f));
    linear.column_backward(mlp.backward, "shared." + first, h, first_out);
  }
  mlp.backward.push_back(elementwise("router.top_k.backward", x, 3 * T * E));
  mlp.backward.push_back(gemm("router.dgrad", x, T, h, E));
  mlp.backward.push_back(weight_half(gemm("router.wgrad", x, h, E, T)));
  // The norm's gradient sums the shared experts' input gradient, combined over the group.
  mlp.backward.push_back(
      waiting_for_call(elementwise("mlp_norm.backward", x, 3 * T * h), shared ? linear.after_combine() : 0));

  // Each rank's T k token copies spread evenly over the E experts, padded or
  // cut to the capacity c T k / E; a rank's E / ep experts each get that from
  // each of the ep ranks.
  const int ep = parallelism.parallel;
  const double f = static_cast<double>(moe.expert_ffn_hidden);
  const double first_out = swiglu ? 2 * f : f;
  const double local_experts = E / ep;
  const double copies = parallelism.capacity_factor * T * k;  // this rank's routed token copies
  const double m = ep * copies / E;
  const KernelSpec first_gemm = grouped_gemm(first, x, local_experts, m, first_out, h);
  const KernelSpec first_dgrad = grouped_gemm(first + ".dgrad", x, local_experts, m, h, first_out);
  const KernelSpec first_wgrad = weight_half(grouped_gemm(first + ".wgrad", x, local_experts, h, first_out, m));
  const KernelSpec down = grouped_gemm("down", x, local_experts, m, h, f);
  const KernelSpec down_dgrad = grouped_gemm("down.dgrad", x, local_experts, m, f, h);
  const KernelSpec down_wgrad = weight_half(grouped_gemm("down.wgrad", x, local_experts, f, h, m));
  const KernelSpec activate = elementwise(activation, x, activation_reads * copies * f);
  const KernelSpec activate_backward = elementwise(activation + ".backward", x, activation_backward * copies * f);
  const bool exchange = ep > 1;
  const int after_exchange = exchange ? 1 : 0;
  const auto call = [&](std::vector<KernelSpec>& list, const std::string& name, CollectiveOp op, double bytes) {
    if (exchange) list.push_back(group_call(name + "." + std::string(to_string(op)), CallGroup::expert_parallel, op, bytes));
  };

  if (parallelism.dispatcher == TokenDispatcher::all_to_all) {
    // Each token copy goes to its expert's rank and comes back.
    const double routed_bytes = x.e * copies * h;
    experts.forward = {elementwise("permute", x, T * h + copies * h)};
    call(experts.forward, "dispatch", CollectiveOp::all_to_all, routed_bytes);
    experts.forward.push_back(waiting_for_call(first_gemm, after_exchange));
    experts.forward.insert(experts.forward.end(), {activate, down});
    call(experts.forward, "combine", CollectiveOp::all_to_all, routed_bytes);
    // Each token's k outputs weighted and summed, then the residual.
    experts.forward.push_back(waiting_for_call(elementwise("unpermute", x, copies * h + T * h), after_exchange));
    experts.forward.push_back(residual_add("residual", x, T * h));

    experts.backward = {residual_add("residual.backward", x, T * h),
                        elementwise("unpermute.backward", x, T * h + copies * h)};
    call(experts.backward, "combine.backward", CollectiveOp::all_to_all, routed_bytes);
    experts.backward.push_back(waiting_for_call(down_dgrad, after_exchange));
    experts.backward.insert(experts.backward.end(), {down_wgrad, activate_backward, first_dgrad});
    call(experts.backward, "dispatch.backward", CollectiveOp::all_to_all, routed_bytes);
    // The weight gradient runs while the input gradients travel back.
    experts.backward.push_back(first_wgrad);
    experts.backward.push_back(waiting_for_call(elementwise("permute.backward", x, copies * h + T * h), after_exchange));
    return;
  }
  // Megatron-Core's MoEAllGatherTokenDispatcher: every rank gathers the ep
  // ranks' T tokens and picks the copies its experts take; their outputs are
  // summed into the ep T gathered rows, reduce-scattered back to each rank's
  // T. Backward, each call's gradient is the other.
  const double gathered_bytes = x.e * ep * T * h;
  const double gathered = ep * T * h;  // values of the gathered tokens
  call(experts.forward, "dispatch", CollectiveOp::all_gather, gathered_bytes);
  experts.forward.push_back(waiting_for_call(elementwise("permute", x, gathered + copies * h), after_exchange));
  experts.forward.insert(experts.forward.end(),
                         {first_gemm, activate, down, elementwise("unpermute", x, copies * h + gathered)});
  call(experts.forward, "combine", CollectiveOp::reduce_scatter, gathered_bytes);
  experts.forward.push_back(waiting_for_call(residual_add("residual", x, T * h), after_exchange));

  experts.backward = {residual_add("residual.backward", x, T * h)};
  call(experts.backward, "combine.backward", CollectiveOp::all_gather, gathered_bytes);
  experts.backward.push_back(
      waiting_for_call(elementwise("unpermute.backward", x, gathered + copies * h), after_exchange));
  experts.backward.insert(experts.backward.end(), {down_dgrad, down_wgrad, activate_backward, first_dgrad,
                                                   elementwise("permute.backward", x, copies * h + gathered)});
  // The weight gradient runs while the input gradients are reduced; the
  // next module's first kernel waits for them.
  call(experts.backward, "dispatch.backward", CollectiveOp::reduce_scatter, gathered_bytes);
  experts.backward.push_back(first_wgrad);
}

}  // namespace shardsim::workloads
