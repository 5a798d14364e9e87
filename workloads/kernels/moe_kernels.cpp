#include "workloads/kernels/moe_kernels.h"

#include <stdexcept>

namespace shardsim::workloads {

namespace {

// What a MoE layer's MLPs, routed and shared, are made of: the first GEMM's
// and the activation's names, and per value of the MLP's width the first
// GEMM's outputs and the values the activation moves, forward and backward.
struct ExpertMlp {
  std::string first, activation;
  double first_outputs, activation_reads, activation_backward;
};

ExpertMlp expert_mlp(const ModelSpec& model) {
  if (model.mlp == MlpKind::swiglu) return {"gate_up", "swiglu", 2, 3, 5};
  return {"up", "gelu", 1, 2, 3};
}

// Under --moe-shared-expert-overlap Megatron-Core's SharedExpertMLP runs on a
// stream of its own, its linears stripped of their tensor-parallel calls and
// user buffers: the module gathers its input along the sequence itself
// (pre_forward_comm), and the first linear keeps that gathered input for its
// weight gradient instead of gathering it again. Forward: the gather, the
// first GEMM and the activation, the second GEMM, its partial sums
// reduce-scattered (post_forward_comm).
// `f` is the shared experts' width on this GPU.
std::vector<KernelSpec> overlapped_shared_forward(const ExpertMlp& mlp, double f, const LayerShapes& x,
                                                  const TensorParallelGemms& linear) {
  const double T = x.tokens, h = x.hidden, first_out = mlp.first_outputs * f;  // T: the gathered tokens
  std::vector<KernelSpec> list;
  linear.gather_input(list, "shared.input", h);
  list.push_back(gemm("shared." + mlp.first, x, T, first_out, h));
  list.push_back(elementwise("shared." + mlp.activation, x, mlp.activation_reads * T * f));
  list.push_back(gemm("shared.down", x, T, h, f));
  linear.combine(list, "shared.down", h);
  return list;
}

// Backward, each call's gradient is the other: the output gradient
// gathered, the second GEMM's input and weight gradients, the activation's,
// the first GEMM's (its weight gradient on the kept input), and the input
// gradient reduce-scattered.
std::vector<KernelSpec> overlapped_shared_backward(const ExpertMlp& mlp, double f, const LayerShapes& x,
                                                   const TensorParallelGemms& linear) {
  const double T = x.tokens, h = x.hidden, first_out = mlp.first_outputs * f;
  const std::string first = "shared." + mlp.first;
  std::vector<KernelSpec> list;
  linear.gather_input(list, "shared.down.gradient", h);
  list.push_back(gemm("shared.down.dgrad", x, T, f, h));
  list.push_back(weight_half(gemm("shared.down.wgrad", x, f, h, T)));
  list.push_back(elementwise("shared." + mlp.activation + ".backward", x, mlp.activation_backward * T * f));
  list.push_back(gemm(first + ".dgrad", x, T, h, first_out));
  list.push_back(weight_half(gemm(first + ".wgrad", x, h, first_out, T)));
  linear.combine(list, first + ".dgrad", h);
  return list;
}

}  // namespace

MoeForwardParts moe_block(const ModelSpec& model, const LayerShapes& x, const ModelParallelism& parallel,
                          const TensorParallelGemms& linear, const ExpertParallelism& parallelism, ModuleWork& mlp,
                          ModuleWork& experts) {
  MoeForwardParts parts;
  const MoeSpec& moe = model.moe;
  // This GPU's tokens of the block: the micro-batch's, 1/t of them under
  // sequence parallelism, which the router and the routed experts take
  // whole-width.
  const double T = x.tokens / parallel.sequence_shards(), h = x.hidden, E = moe.experts, k = moe.experts_per_token;
  const ExpertMlp names = expert_mlp(model);
  const std::string& first = names.first;
  const std::string& activation = names.activation;
  const double activation_reads = names.activation_reads, activation_backward = names.activation_backward;

  parts.norm = mlp.forward.size();
  mlp.forward.push_back(elementwise("mlp_norm", x, 2 * T * h));
  mlp.forward.push_back(gemm("router", x, T, E, h));
  mlp.forward.push_back(elementwise("router.top_k", x, 2 * T * E));  // softmax over the logits, then top-k
  const bool shared = moe.shared_experts > 0;
  const bool overlapped = shared && parallelism.shared_expert_overlap;
  if (overlapped && parallelism.dispatcher != TokenDispatcher::all_to_all) {
    throw std::logic_error("moe_block: the shared experts run beside the all-to-all dispatcher only");
  }
  // Always-active experts: one MLP of their summed width, split over the
  // tensor-parallel GPUs as a dense MLP is (Megatron-Core's SharedExpertMLP).
  const double shared_f = static_cast<double>(moe.shared_experts * moe.shared_expert_ffn_hidden) / parallel.tensor;
  const double shared_first_out = names.first_outputs * shared_f;
  if (shared && !overlapped) {
    const double tokens = x.tokens;  // the column-parallel GEMM's, gathered along the sequence
    parts.shared_begin = mlp.forward.size();
    linear.gathered_gemm(mlp.forward, "shared." + first + ".input", "shared." + first, shared_first_out, h);
    mlp.forward.push_back(elementwise("shared." + activation, x, activation_reads * tokens * shared_f));
    linear.combined_gemm(mlp.forward, "shared.down", shared_f);
    parts.shared_end = mlp.forward.size();
    linear.row_backward(mlp.backward, "shared.down", shared_f, h);
    mlp.backward.push_back(elementwise("shared." + activation + ".backward", x, activation_backward * tokens * shared_f));
    linear.column_backward(mlp.backward, "shared." + first, h, shared_first_out);
  }
  mlp.backward.push_back(elementwise("router.top_k.backward", x, 3 * T * E));
  mlp.backward.push_back(gemm("router.dgrad", x, T, h, E));
  mlp.backward.push_back(weight_half(gemm("router.wgrad", x, h, E, T)));
  // The norm's gradient sums the shared experts' input gradient, combined
  // over the group (when they ran beside, the experts' module has joined them).
  mlp.backward.push_back(
      waiting_for_call(elementwise("mlp_norm.backward", x, 3 * T * h), shared && !overlapped ? linear.after_combine() : 0));

  // Each rank's T k token copies spread evenly over the E experts, padded or
  // cut to the capacity c T k / E; a rank's E / ep experts each get that from
  // each of the ep ranks.
  const int ep = parallelism.parallel;
  const double f = static_cast<double>(moe.expert_ffn_hidden);
  const double first_out = names.first_outputs * f;
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
    experts.forward.clear();
    if (overlapped) {
      append_on_side_stream(experts.forward, overlapped_shared_forward(names, shared_f, x, linear));
    }
    experts.forward.push_back(elementwise("permute", x, T * h + copies * h));
    call(experts.forward, "dispatch", CollectiveOp::all_to_all, routed_bytes);
    experts.forward.push_back(waiting_for_call(first_gemm, after_exchange));
    parts.activation = experts.forward.size();
    experts.forward.insert(experts.forward.end(), {activate, down});
    call(experts.forward, "combine", CollectiveOp::all_to_all, routed_bytes);
    // Each token's k outputs weighted and summed, then the residual (and the
    // shared experts' output, when they ran beside).
    experts.forward.push_back(waiting_for_call(elementwise("unpermute", x, copies * h + T * h), after_exchange));
    const KernelSpec residual = residual_add("residual", x, T * h);
    experts.forward.push_back(overlapped ? joining_side_stream(residual) : residual);

    experts.backward = {residual_add("residual.backward", x, T * h)};
    if (overlapped) {
      append_on_side_stream(experts.backward, overlapped_shared_backward(names, shared_f, x, linear));
    }
    experts.backward.push_back(elementwise("unpermute.backward", x, T * h + copies * h));
    call(experts.backward, "combine.backward", CollectiveOp::all_to_all, routed_bytes);
    experts.backward.push_back(waiting_for_call(down_dgrad, after_exchange));
    // The grouped GEMMs' weight gradients come with their input gradients
    // (TE's GroupedLinear backward), before the all-to-all that autograd runs
    // next; only --delay-wgrad-compute moves them (combined_1f1b.h).
    experts.backward.insert(experts.backward.end(), {down_wgrad, activate_backward, first_dgrad, first_wgrad});
    call(experts.backward, "dispatch.backward", CollectiveOp::all_to_all, routed_bytes);
    const KernelSpec permute_backward =
        waiting_for_call(elementwise("permute.backward", x, copies * h + T * h), after_exchange);
    experts.backward.push_back(overlapped ? joining_side_stream(permute_backward) : permute_backward);
    return parts;
  }
  // Megatron-Core's MoEAllGatherTokenDispatcher: every rank gathers the ep
  // ranks' T tokens and picks the copies its experts take; their outputs are
  // summed into the ep T gathered rows, reduce-scattered back to each rank's
  // T. Backward, each call's gradient is the other.
  const double gathered_bytes = x.e * ep * T * h;
  const double gathered = ep * T * h;  // values of the gathered tokens
  call(experts.forward, "dispatch", CollectiveOp::all_gather, gathered_bytes);
  experts.forward.push_back(waiting_for_call(elementwise("permute", x, gathered + copies * h), after_exchange));
  parts.activation = experts.forward.size() + 1;
  experts.forward.insert(experts.forward.end(),
                         {first_gemm, activate, down, elementwise("unpermute", x, copies * h + gathered)});
  call(experts.forward, "combine", CollectiveOp::reduce_scatter, gathered_bytes);
  experts.forward.push_back(waiting_for_call(residual_add("residual", x, T * h), after_exchange));

  experts.backward = {residual_add("residual.backward", x, T * h)};
  call(experts.backward, "combine.backward", CollectiveOp::all_gather, gathered_bytes);
  experts.backward.push_back(
      waiting_for_call(elementwise("unpermute.backward", x, gathered + copies * h), after_exchange));
  experts.backward.insert(experts.backward.end(), {down_dgrad, down_wgrad, activate_backward, first_dgrad, first_wgrad,
                                                   elementwise("permute.backward", x, copies * h + gathered)});
  // The next module's first kernel waits for the reduced input gradients.
  call(experts.backward, "dispatch.backward", CollectiveOp::reduce_scatter, gathered_bytes);
  return parts;
}

}  // namespace shardsim::workloads
