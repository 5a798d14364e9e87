#include "workloads/moe_kernels.h"

namespace shardsim::workloads {

void moe_block(const ModelSpec& model, const LayerShapes& x, const ExpertParallelism& parallelism, ModuleWork& mlp,
               ModuleWork& experts) {
  const MoeSpec& moe = model.moe;
  const double T = x.tokens, h = x.hidden, E = moe.experts, k = moe.experts_per_token;
  const bool swiglu = model.mlp == MlpKind::swiglu;
  const std::string first = swiglu ? "gate_up" : "up", activation = swiglu ? "swiglu" : "gelu";
  const double activation_reads = swiglu ? 3 : 2, activation_backward = swiglu ? 5 : 3;

  mlp.forward.push_back(elementwise("mlp_norm", x, 2 * T * h));
  mlp.forward.push_back(gemm("router", x, T, E, h));
  mlp.forward.push_back(elementwise("router.top_k", x, 2 * T * E));  // softmax over the logits, then top-k
  if (moe.shared_experts > 0) {
    // Always-active experts: one MLP of their summed width.
    const double f = static_cast<double>(moe.shared_experts * moe.shared_expert_ffn_hidden);
    const double first_out = swiglu ? 2 * f : f;
    mlp.forward.push_back(gemm("shared." + first, x, T, first_out, h));
    mlp.forward.push_back(elementwise("shared." + activation, x, activation_reads * T * f));
    mlp.forward.push_back(gemm("shared.down", x, T, h, f));
    mlp.backward.push_back(gemm("shared.down.dgrad", x, T, f, h));
    mlp.backward.push_back(weight_half(gemm("shared.down.wgrad", x, f, h, T)));
    mlp.backward.push_back(elementwise("shared." + activation + ".backward", x, activation_backward * T * f));
    mlp.backward.push_back(gemm("shared." + first + ".dgrad", x, T, h, first_out));
    mlp.backward.push_back(weight_half(gemm("shared." + first + ".wgrad", x, h, first_out, T)));
  }
  mlp.backward.push_back(elementwise("router.top_k.backward", x, 3 * T * E));
  mlp.backward.push_back(gemm("router.dgrad", x, T, h, E));
  mlp.backward.push_back(weight_half(gemm("router.wgrad", x, h, E, T)));
  mlp.backward.push_back(elementwise("mlp_norm.backward", x, 3 * T * h));

  // Each rank's T k token copies spread evenly over the E experts, padded or
  // cut to the capacity c T k / E; a rank's E / ep experts each get that from
  // each of the ep ranks.
  const int ep = parallelism.parallel;
  const double f = static_cast<double>(moe.expert_ffn_hidden);
  const double first_out = swiglu ? 2 * f : f;
  const double local_experts = E / ep;
  const double copies = parallelism.capacity_factor * T * k;  // this rank's routed token copies
  const double m = ep * copies / E;
  const double routed_bytes = x.e * copies * h;
  const bool exchange = ep > 1;
  const auto all_to_all = [&](std::vector<KernelSpec>& list, const std::string& name) {
    if (exchange) {
      list.push_back(group_call(name + ".all_to_all", CallGroup::expert_parallel, CollectiveOp::all_to_all, routed_bytes));
    }
  };
  const int after_exchange = exchange ? 1 : 0;
  experts.forward.push_back(elementwise("permute", x, T * h + copies * h));
  all_to_all(experts.forward, "dispatch");
  experts.forward.push_back(
      waiting_for_call(grouped_gemm(first, x, local_experts, m, first_out, h), after_exchange));
  experts.forward.push_back(elementwise(activation, x, activation_reads * copies * f));
  experts.forward.push_back(grouped_gemm("down", x, local_experts, m, h, f));
  all_to_all(experts.forward, "combine");
  // Each token's k outputs weighted and summed, then the residual.
  experts.forward.push_back(waiting_for_call(elementwise("unpermute", x, copies * h + T * h), after_exchange));
  experts.forward.push_back(residual_add("residual", x, T * h));

  experts.backward.push_back(residual_add("residual.backward", x, T * h));
  experts.backward.push_back(elementwise("unpermute.backward", x, T * h + copies * h));
  all_to_all(experts.backward, "combine.backward");
  experts.backward.push_back(
      waiting_for_call(grouped_gemm("down.dgrad", x, local_experts, m, f, h), after_exchange));
  experts.backward.push_back(weight_half(grouped_gemm("down.wgrad", x, local_experts, f, h, m)));
  experts.backward.push_back(elementwise(activation + ".backward", x, activation_backward * copies * f));
  experts.backward.push_back(grouped_gemm(first + ".dgrad", x, local_experts, m, h, first_out));
  all_to_all(experts.backward, "dispatch.backward");
  // The weight gradient runs while the input gradients travel back.
  experts.backward.push_back(weight_half(grouped_gemm(first + ".wgrad", x, local_experts, h, first_out, m)));
  experts.backward.push_back(
      waiting_for_call(elementwise("permute.backward", x, copies * h + T * h), after_exchange));
}

}  // namespace shardsim::workloads
