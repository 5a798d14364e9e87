#include "workloads/transformer_kernels.h"

#include "topology/json_input.h"
#include "workloads/activation_memory.h"

#include <initializer_list>
#include <utility>

namespace shardsim::workloads {

namespace {

// FlashAttention's backward runs five GEMM-sized products to the forward's two.
constexpr double kFlashBackwardOverForward = 2.5;

// Transformer Engine's pipelined GEMM + reduce-scatter splits the GEMM in four
// (initialize_ub's default num_splits for its "pipeline" method).
constexpr int kPipelinedReduceScatterSplits = 4;

struct Shapes {
  double tokens, sequence, batch, hidden, query, kv, ffn, vocab, heads, e;
  Dtype dtype, gemm_dtype;
};

KernelSpec gemm(const std::string& name, const Shapes& x, double m, double n, double k) {
  KernelSpec spec;
  spec.name = name;
  spec.kernel = KernelClass::gemm;
  spec.dtype = x.gemm_dtype;
  spec.flops = 2 * m * n * k;
  spec.hbm_bytes = x.e * (m * k + k * n + m * n);
  spec.gemm = {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k)};
  return spec;
}

KernelSpec elementwise(const std::string& name, const Shapes& x, double values_moved) {
  KernelSpec spec;
  spec.name = name;
  spec.kernel = KernelClass::elementwise;
  spec.dtype = x.dtype;
  spec.flops = values_moved;  // about one operation per value; never the bound
  spec.hbm_bytes = x.e * values_moved;
  return spec;
}

void attention_core(const Shapes& x, bool flash, std::vector<KernelSpec>& forward, std::vector<KernelSpec>& backward) {
  const double full_flops = 4 * x.batch * x.sequence * x.sequence * x.query;  // Q K^T and P V, every score
  const double head_dim = x.query / x.heads;
  if (flash) {
    KernelSpec spec;
    spec.name = "attention";
    spec.kernel = KernelClass::attention;
    spec.dtype = x.dtype;
    spec.flops = full_flops / 2;  // the causal kernel skips masked blocks
    // q, k, v in, o out, plus fp32 row log-sum-exps.
    spec.hbm_bytes = x.e * x.tokens * (2 * x.query + 2 * x.kv) + 4 * x.heads * x.tokens;
    spec.gemm = {static_cast<std::int64_t>(x.sequence), static_cast<std::int64_t>(x.sequence),
                 static_cast<std::int64_t>(head_dim)};
    forward.push_back(spec);
    KernelSpec back = spec;
    back.name = "attention.backward";
    back.flops = kFlashBackwardOverForward * spec.flops;
    // Reads q, k, v, o, do and the log-sum-exps; writes dq, dk, dv.
    back.hbm_bytes = x.e * x.tokens * (3 * x.query + 2 * x.kv + x.query + 2 * x.kv) + 4 * x.heads * x.tokens;
    backward.push_back(back);
    return;
  }
  const double scores = x.batch * x.heads * x.sequence * x.sequence;
  const auto batched = [&](const std::string& name, double flops, double bytes) {
    KernelSpec spec;
    spec.name = name;
    spec.kernel = KernelClass::gemm;
    spec.dtype = x.dtype;
    spec.flops = flops;
    spec.hbm_bytes = bytes;
    spec.gemm = {static_cast<std::int64_t>(x.sequence), static_cast<std::int64_t>(x.sequence),
                 static_cast<std::int64_t>(head_dim)};
    return spec;
  };
  forward.push_back(batched("attention.scores", full_flops / 2, x.e * (scores + x.tokens * (x.query + x.kv))));
  forward.push_back(elementwise("attention.softmax", x, 2 * scores));
  forward.push_back(batched("attention.context", full_flops / 2, x.e * (scores + x.tokens * (x.kv + x.query))));
  backward.push_back(batched("attention.context.backward", full_flops, x.e * (2 * scores + x.tokens * (2 * x.query + 2 * x.kv))));
  backward.push_back(elementwise("attention.softmax.backward", x, 3 * scores));
  backward.push_back(batched("attention.scores.backward", full_flops, x.e * (2 * scores + x.tokens * (2 * x.query + 2 * x.kv))));
}

// A call over a model-parallel group, as a kernel list carries it.
KernelSpec group_call(const std::string& name, CallGroup group, CollectiveOp op, double bytes) {
  KernelSpec spec;
  spec.name = name;
  spec.call = ModelParallelCall{group, op, bytes};
  return spec;
}

KernelSpec waiting_for_call(KernelSpec spec, int k) {
  spec.waits_for_call = k;
  return spec;
}

KernelSpec weight_half(KernelSpec spec) {
  spec.weight_gradient = true;
  return spec;
}

// A grouped GEMM over `experts` experts, each (m, n, k): one kernel, timed at
// one expert's shape.
KernelSpec grouped_gemm(const std::string& name, const Shapes& x, double experts, double m, double n, double k) {
  KernelSpec spec = gemm(name, x, m, n, k);
  spec.flops *= experts;
  spec.hbm_bytes *= experts;
  return spec;
}

// A MoE layer's two modules (transformer_kernels.h): `mlp` (norm, router,
// shared experts) and `experts` (dispatch, the local routed experts, combine,
// residual).
void moe_block(const ModelSpec& model, const Shapes& x, const ExpertParallelism& parallelism, ModuleWork& mlp,
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
  experts.forward.push_back(elementwise("residual", x, 3 * T * h));

  experts.backward.push_back(elementwise("residual.backward", x, 3 * T * h));
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

// One GPU's part of each module under tensor parallelism over t GPUs: norms
// and learned positions whole, every other tensor 1/t (the few biases of
// row-parallel linears, which Megatron keeps whole, counted split too).
void split_parameters(const ModelSpec& model, int t, std::vector<ModuleParameters>& modules) {
  const std::size_t norms = model.norm == NormKind::layernorm ? 2 : 1;
  for (ModuleParameters& module : modules) {
    // The embedding's whole tensors come after its token embedding, the
    // other modules' before their split ones.
    const bool embedding = module.layer < 0;
    module.parameters = 0;
    for (std::size_t i = 0; i < module.parameter_tensors.size(); ++i) {
      const bool whole = embedding ? i > 0 : i < norms;
      if (!whole) module.parameter_tensors[i] /= t;
      module.parameters += module.parameter_tensors[i];
    }
    for (double& tensor : module.borrowed_tensors) tensor /= t;  // the tied embedding, vocabulary-parallel
  }
}

}  // namespace

std::vector<ModuleWork> transformer_modules(const ModelSpec& model, const TrainingConfig& training,
                                            const ModelParallelism& parallel, const ExpertParallelism& experts) {
  if (model.has_mla) throw InputError(model.name + ": MLA layers are parsed but not yet compiled into a training step");
  const int t = parallel.tensor, u = parallel.ulysses;
  if (u > 1 && t > 1) throw InputError(model.name + ": DeepSpeed-Ulysses is compiled without tensor parallelism");
  if (model.has_moe && t > 1) {
    throw InputError(model.name + ": MoE layers are compiled without tensor parallelism for now (tensor " +
                     std::to_string(t) + ")");
  }
  using Count = std::pair<const char*, std::int64_t>;
  const auto require_split = [&](int ways, const char* over, std::initializer_list<Count> counts) {
    for (const auto& [what, count] : counts) {
      if (count % ways != 0) {
        throw InputError(model.name + ": " + what + " (" + std::to_string(count) + ") must divide over the " +
                         std::to_string(ways) + " " + over + " GPUs");
      }
    }
  };
  const Count heads{"heads", model.heads}, kv_heads{"kv_heads", model.kv_heads};
  require_split(u, "DeepSpeed-Ulysses", {heads, kv_heads, {"sequence_length", training.sequence_length}});
  require_split(t, "tensor-parallel", {heads, kv_heads, {"ffn_hidden", model.ffn_hidden}});
  Shapes x{};
  x.batch = static_cast<double>(training.micro_batch_size);
  x.sequence = static_cast<double>(training.sequence_length);
  x.tokens = x.batch * x.sequence / u;  // this GPU's part of the sequence under DeepSpeed-Ulysses
  x.hidden = static_cast<double>(model.hidden);
  // This GPU's heads, MLP width and vocabulary (Megatron pads the vocabulary
  // to a multiple of the group).
  x.query = static_cast<double>(model.heads / t * model.head_dim);
  x.kv = static_cast<double>(model.kv_heads / t * model.head_dim);
  x.ffn = static_cast<double>(model.ffn_hidden / t);
  x.vocab = static_cast<double>((model.vocab + t - 1) / t);
  x.heads = model.heads / t;
  x.e = training.bytes_per_value;
  x.dtype = training.fp16 ? Dtype::fp16 : Dtype::bf16;
  x.gemm_dtype = training.fp8_gemms ? Dtype::fp8 : x.dtype;
  const double T = x.tokens, h = x.hidden;
  const bool tensor_parallel = t > 1, sp = parallel.sequence_parallel;
  const double local_tokens = T / parallel.sequence_shards();  // what norms and residuals see
  const bool swiglu = model.mlp == MlpKind::swiglu;
  const double activation_bytes = x.e * T * h;  // one hidden-state tensor of the micro-batch

  // DeepSpeed-Ulysses over u GPUs: the attention core runs on the whole
  // sequence for 1/u of the heads, reached by an all-to-all of this GPU's
  // q, k and v (one call for the three) and left by one of the context; the
  // backward mirrors them. Each call waits for the kernel before it, the
  // kernel after waits for it: nothing overlaps them (DeepSpeed's
  // DistributedAttention).
  Shapes core = x;
  core.tokens = x.tokens * u;
  core.query = x.query / u;
  core.kv = x.kv / u;
  core.heads = x.heads / u;
  const auto exchange = [&](std::vector<KernelSpec>& list, const std::string& name, double values_per_token) {
    if (u > 1) {
      list.push_back(group_call(name + ".all_to_all", CallGroup::sequence_parallel, CollectiveOp::all_to_all,
                                x.e * T * values_per_token));
    }
  };
  const auto then_wait = [&](std::vector<KernelSpec>& list, std::size_t first) {
    if (u > 1) list.at(first).waits_for_call = 1;
  };

  // The calls around a block (nothing without tensor parallelism).
  const auto call = [](const std::string& name, CollectiveOp op, double bytes) {
    return group_call(name, CallGroup::tensor_parallel, op, bytes);
  };
  // Before a column-parallel GEMM: its input gathered along the sequence.
  const auto gather_input = [&](std::vector<KernelSpec>& list, const std::string& name) {
    if (tensor_parallel && sp) list.push_back(call(name + ".all_gather", CollectiveOp::all_gather, activation_bytes));
  };
  // After a row-parallel GEMM (forward) or a column-parallel one's input
  // gradient (backward): the partial sums combined.
  const auto combine = [&](std::vector<KernelSpec>& list, const std::string& name) {
    if (!tensor_parallel) return;
    list.push_back(sp ? call(name + ".reduce_scatter", CollectiveOp::reduce_scatter, activation_bytes)
                      : call(name + ".all_reduce", CollectiveOp::all_reduce, activation_bytes));
  };
  const int after_gather = tensor_parallel && sp ? 1 : 0;
  const int after_combine = tensor_parallel ? 1 : 0;
  const bool comm_overlap = tensor_parallel && sp && parallel.tp_comm_overlap;
  // A GEMM (T, n, k) on an input gathered along the sequence. Without
  // tp_comm_overlap: the all-gather, then the GEMM. With it, Transformer
  // Engine's ring exchange (userbuffers, num_splits = t): the GEMM runs on
  // this GPU's T / t tokens at once, then on each slice received from the
  // previous rank while the next one moves; t - 1 steps, each rank sending a
  // slice to the next (send_recv over the group).
  const auto gathered_gemm = [&](std::vector<KernelSpec>& list, const std::string& gather_name,
                                 const std::string& name, double n, double k) {
    if (!comm_overlap) {
      gather_input(list, gather_name);
      list.push_back(waiting_for_call(gemm(name, x, T, n, k), after_gather));
      return;
    }
    for (int step = 1; step < t; ++step) {
      list.push_back(call(gather_name + ".ring" + std::to_string(step), CollectiveOp::send_recv, activation_bytes / t));
    }
    for (int slice = 0; slice < t; ++slice) {
      list.push_back(waiting_for_call(gemm(name + ".slice" + std::to_string(slice), x, T / t, n, k), slice > 0 ? t - slice : 0));
    }
  };
  // A row-parallel GEMM's forward (T, h, in) and the partial sums combined.
  // With tp_comm_overlap, Transformer Engine's pipelined GEMM +
  // reduce-scatter: the GEMM in slices of the tokens, each slice
  // reduce-scattered while the next computes.
  const auto combined_gemm = [&](std::vector<KernelSpec>& list, const std::string& name, double in) {
    if (!comm_overlap) {
      list.push_back(gemm(name, x, T, h, in));
      combine(list, name);
      return;
    }
    const int splits = kPipelinedReduceScatterSplits;
    for (int slice = 0; slice < splits; ++slice) {
      const std::string part = name + ".slice" + std::to_string(slice);
      list.push_back(gemm(part, x, T / splits, h, in));
      list.push_back(call(part + ".reduce_scatter", CollectiveOp::reduce_scatter, activation_bytes / splits));
    }
  };
  // Backward of a row-parallel GEMM: its output gradient gathered along the
  // sequence under sequence parallelism, then the input and weight
  // gradients; the input gradient stays split, nothing to combine.
  const auto row_backward = [&](std::vector<KernelSpec>& list, const std::string& name, double in, double out) {
    gathered_gemm(list, name + ".gradient", name + ".dgrad", in, out);
    list.push_back(weight_half(gemm(name + ".wgrad", x, in, out, T)));
  };
  // Backward of a column-parallel GEMM: the input gradient, combined over the
  // group while the weight gradient runs (on the input gathered again under
  // sequence parallelism, the call before the combine).
  const auto column_backward = [&](std::vector<KernelSpec>& list, const std::string& name, double in, double out) {
    gather_input(list, name + ".input");
    list.push_back(gemm(name + ".dgrad", x, T, in, out));
    combine(list, name + ".dgrad");
    list.push_back(weight_half(waiting_for_call(gemm(name + ".wgrad", x, in, out, T), tensor_parallel && sp ? 2 : 0)));
  };

  // Modules in model_modules' order: embedding, per layer attention and MLP, head.
  std::vector<ModuleParameters> parameters = model_modules(model, experts.parallel);
  if (tensor_parallel) split_parameters(model, t, parameters);
  std::size_t next = 0;
  auto module_work = [&] {
    ModuleWork work;
    static_cast<ModuleParameters&>(work) = parameters[next++];
    return work;
  };

  const auto dense_mlp = [&](ModuleWork& mlp) {
    const double first_out = swiglu ? 2 * x.ffn : x.ffn;
    const std::string first = swiglu ? "gate_up" : "up";
    mlp.forward.push_back(elementwise("mlp_norm", x, 2 * local_tokens * h));
    gathered_gemm(mlp.forward, first + ".input", first, first_out, h);
    mlp.forward.push_back(elementwise(swiglu ? "swiglu" : "gelu", x, (swiglu ? 3 : 2) * T * x.ffn));
    combined_gemm(mlp.forward, "down", x.ffn);
    mlp.forward.push_back(waiting_for_call(elementwise("residual", x, 3 * local_tokens * h), after_combine));
    mlp.backward.push_back(elementwise("residual.backward", x, 3 * local_tokens * h));
    row_backward(mlp.backward, "down", x.ffn, h);
    mlp.backward.push_back(elementwise(swiglu ? "swiglu.backward" : "gelu.backward", x, (swiglu ? 5 : 3) * T * x.ffn));
    column_backward(mlp.backward, first, h, first_out);
    mlp.backward.push_back(waiting_for_call(elementwise("mlp_norm.backward", x, 3 * local_tokens * h), after_combine));
  };

  std::vector<ModuleWork> modules;
  ModuleWork embedding = module_work();
  // Vocabulary-parallel: each GPU looks up the tokens of its part of the
  // vocabulary (zeros elsewhere), then the group sums.
  embedding.forward.push_back(elementwise("embedding", x, (model.positions == PositionKind::learned ? 5 : 2) * T * h));
  combine(embedding.forward, "embedding");
  gather_input(embedding.backward, "embedding.gradient");
  embedding.backward.push_back(weight_half(waiting_for_call(elementwise("embedding.backward", x, 3 * T * h), after_gather)));
  modules.push_back(std::move(embedding));

  for (int layer = 0; layer < model.layers; ++layer) {
    const double layer_activations = T * layer_activation_bytes_per_token(model, training, layer, parallel);

    ModuleWork attention = module_work();
    std::vector<KernelSpec> core_forward, core_backward;
    attention_core(core, training.flash_attention, core_forward, core_backward);
    attention.forward.push_back(elementwise("attention_norm", x, 2 * local_tokens * h));
    gathered_gemm(attention.forward, "qkv.input", "qkv", x.query + 2 * x.kv, h);
    attention.forward.push_back(elementwise("rotary", x, 2 * T * (x.query + x.kv)));
    exchange(attention.forward, "qkv", x.query + 2 * x.kv);
    const std::size_t core_at = attention.forward.size();
    attention.forward.insert(attention.forward.end(), core_forward.begin(), core_forward.end());
    then_wait(attention.forward, core_at);
    exchange(attention.forward, "context", x.query);
    const std::size_t out_proj_at = attention.forward.size();
    combined_gemm(attention.forward, "out_proj", x.query);
    then_wait(attention.forward, out_proj_at);
    attention.forward.push_back(waiting_for_call(elementwise("residual", x, 3 * local_tokens * h), after_combine));
    attention.backward.push_back(elementwise("residual.backward", x, 3 * local_tokens * h));
    row_backward(attention.backward, "out_proj", x.query, h);
    exchange(attention.backward, "context.backward", x.query);
    const std::size_t core_backward_at = attention.backward.size();
    attention.backward.insert(attention.backward.end(), core_backward.begin(), core_backward.end());
    then_wait(attention.backward, core_backward_at);
    exchange(attention.backward, "qkv.backward", x.query + 2 * x.kv);
    attention.backward.push_back(elementwise("rotary.backward", x, 2 * T * (x.query + x.kv)));
    then_wait(attention.backward, attention.backward.size() - 1);
    column_backward(attention.backward, "qkv", h, x.query + 2 * x.kv);
    attention.backward.push_back(waiting_for_call(elementwise("attention_norm.backward", x, 3 * local_tokens * h),
                                         after_combine));

    // The MLP block: one module, or a MoE layer's two (its routed experts last).
    std::vector<ModuleWork> feed_forward;
    if (model.moe_layer(layer)) {
      feed_forward.push_back(module_work());
      feed_forward.push_back(module_work());
      moe_block(model, x, experts, feed_forward[0], feed_forward[1]);
    } else {
      feed_forward.push_back(module_work());
      dense_mlp(feed_forward[0]);
    }
    switch (training.recompute) {
      case Recompute::none: attention.activation_bytes = layer_activations; break;
      case Recompute::selective:
        attention.activation_bytes = layer_activations;  // activation_memory.h already drops the scores
        if (!training.flash_attention) attention.recompute = core_forward;
        break;
      case Recompute::full: {
        // Only the layer input is kept; the backward rebuilds the whole layer
        // before the backward of its last module, the first of the layer.
        attention.activation_bytes = T * layer_input_bytes_per_token(model, training, parallel);
        ModuleWork& first_backward = feed_forward.back();
        first_backward.recompute = attention.forward;
        for (const ModuleWork& work : feed_forward) {
          first_backward.recompute.insert(first_backward.recompute.end(), work.forward.begin(), work.forward.end());
        }
        first_backward.recompute_working_bytes = layer_activations;
        break;
      }
    }
    modules.push_back(std::move(attention));
    for (ModuleWork& work : feed_forward) modules.push_back(std::move(work));
  }

  ModuleWork head = module_work();
  head.forward.push_back(elementwise("final_norm", x, 2 * local_tokens * h));
  gather_input(head.forward, "lm_head.input");
  head.forward.push_back(waiting_for_call(gemm("lm_head", x, T, x.vocab, h), after_gather));
  // Cross-entropy reads the logits and keeps their fp32 upcast for backward;
  // over a vocabulary split t ways it all-reduces three fp32 values per token.
  KernelSpec loss = elementwise("loss", x, T * x.vocab);
  loss.hbm_bytes = (x.e + 4) * T * x.vocab;
  head.forward.push_back(loss);
  if (tensor_parallel) {
    for (const char* value : {"loss.logit_max", "loss.target_logit", "loss.exp_sum"}) {
      head.forward.push_back(call(std::string(value) + ".all_reduce", CollectiveOp::all_reduce, 4 * T));
    }
  }
  // Backward order: loss, then the LM head's GEMMs, then the final norm.
  KernelSpec loss_backward = elementwise("loss.backward", x, T * x.vocab);
  loss_backward.hbm_bytes = (4 + x.e) * T * x.vocab;
  head.backward.push_back(loss_backward);
  column_backward(head.backward, "lm_head", h, x.vocab);
  head.backward.push_back(waiting_for_call(elementwise("final_norm.backward", x, 3 * local_tokens * h), after_combine));
  head.activation_bytes = T * head_activation_bytes_per_token(model, training, parallel);
  modules.push_back(std::move(head));
  return modules;
}

Op kernel_op(const KernelSpec& spec, std::string name, int stream, std::vector<std::uint32_t> deps) {
  Op op = make_op(OpKind::compute, std::move(name), stream, std::move(deps));
  op.kernel = spec.kernel;
  op.dtype = spec.dtype;
  op.flops = spec.flops;
  op.hbm_bytes = spec.hbm_bytes;
  op.gemm = spec.gemm;
  return op;
}

KernelSpec adam_step(double parameters) {
  constexpr double kAdamBytesPerParameter = 28;
  constexpr double kAdamFlopsPerParameter = 12;
  KernelSpec adam;
  adam.name = "optimizer.adam";
  adam.kernel = KernelClass::optimizer;
  adam.dtype = Dtype::fp32;
  adam.flops = kAdamFlopsPerParameter * parameters;
  adam.hbm_bytes = kAdamBytesPerParameter * parameters;
  return adam;
}

double model_flops_per_step(const ModelSpec& model, const TrainingConfig& training) {
  const double h = static_cast<double>(model.hidden);
  const double q = static_cast<double>(model.heads * model.head_dim);
  const double kv = static_cast<double>(model.kv_heads * model.head_dim);
  const double f = static_cast<double>(model.ffn_hidden);
  const double s = static_cast<double>(training.sequence_length);
  const double matrices = model.mlp == MlpKind::swiglu ? 3 : 2;
  const double dense_layer = 2 * (h * (q + 2 * kv) + q * h + matrices * h * f) + 4 * s * q;
  double moe_layer = 0;
  int moe_layers = 0;
  if (model.has_moe) {
    const MoeSpec& moe = model.moe;
    const double active_width = moe.experts_per_token * static_cast<double>(moe.expert_ffn_hidden) +
                                moe.shared_experts * static_cast<double>(moe.shared_expert_ffn_hidden);
    moe_layer = dense_layer - 2 * matrices * h * f + 2 * h * moe.experts + 2 * matrices * h * active_width;
    moe_layers = model.layers - moe.first_dense_layers;
  }
  const double per_token = (model.layers - moe_layers) * dense_layer + moe_layers * moe_layer +
                           2 * h * static_cast<double>(model.vocab);
  return 3 * per_token * static_cast<double>(training.global_batch_tokens());
}

}  // namespace shardsim::workloads
