#include "workloads/kernels/transformer_kernels.h"

#include "topology/base/json_input.h"
#include "workloads/kernels/attention_kernels.h"
#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/moe_kernels.h"
#include "workloads/kernels/mtp_kernels.h"
#include "workloads/kernels/tensor_parallel_gemms.h"
#include "workloads/memory/activation_memory.h"

#include <initializer_list>
#include <utility>

namespace shardsim::workloads {

namespace {

// Whether tensor i of `module` (in model_modules' order) stays whole on
// every GPU of a tensor-parallel group: norms, learned positions, a MoE
// layer's router and MLA's down-projections and latent norms.
bool whole_under_tensor_parallelism(const ModelSpec& model, const ModuleParameters& module, std::size_t i) {
  const std::size_t norms = model.norm == NormKind::layernorm ? 2 : 1;
  if (module.layer < 0) return i > 0;  // the embedding: its learned positions follow the token embedding
  // The head: norms but for the LM head after the first.
  if (module.layer == model.head_layer()) return model.tied_embeddings || i != norms;
  if (model.mtp_layer(module.layer) && module.name.ends_with(".input")) return i < 2 * norms;  // enorm, hnorm, eh_proj
  if (i < norms) return true;  // every other module starts with its norms
  // The router, the tensor after a MoE layer's MLP-block norms.
  if (module.name.ends_with(".mlp") && model.moe_layer(module.layer)) return i == norms;
  if (model.has_mla && module.name.ends_with(".attention")) {
    // q_down, q_norm, q_up (or q_proj alone), kv_down, kv_norm, kv_up, out_proj.
    const std::size_t at = i - norms;
    return model.mla.q_lora_rank > 0 ? at == 0 || at == 1 || at == 3 || at == 4 : at == 1 || at == 2;
  }
  return false;
}

// One GPU's part of each module under tensor parallelism over t GPUs: the
// whole tensors above, every other one 1/t (the few biases of row-parallel
// linears, which Megatron keeps whole, counted split too). A MoE layer's
// routed experts stay whole on every GPU (expert tensor parallelism 1).
// Returns each module's whole parameters that run on a GPU's part of the
// sequence under sequence parallelism: all but the embedding's, which are
// added before the sequence is scattered.
std::vector<double> split_parameters(const ModelSpec& model, int t, std::vector<ModuleParameters>& modules) {
  std::vector<double> sequence_split(modules.size(), 0.0);
  for (std::size_t m = 0; m < modules.size(); ++m) {
    ModuleParameters& module = modules[m];
    if (module.routed_experts) continue;
    module.parameters = 0;
    for (std::size_t i = 0; i < module.parameter_tensors.size(); ++i) {
      if (!whole_under_tensor_parallelism(model, module, i)) {
        module.parameter_tensors[i] /= t;
      } else if (module.layer >= 0) {
        sequence_split[m] += module.parameter_tensors[i];
      }
      module.parameters += module.parameter_tensors[i];
    }
    for (double& tensor : module.borrowed_tensors) tensor /= t;  // the tied embedding, vocabulary-parallel
  }
  return sequence_split;
}

using SplitCount = std::pair<const char*, std::int64_t>;

// "what (count) must divide over the N over GPUs" for the first count that
// `ways` does not divide; empty if it divides them all.
std::string split_problem(int ways, const char* over, std::initializer_list<SplitCount> counts) {
  for (const auto& [what, count] : counts) {
    if (count % ways != 0) {
      return std::string(what) + " (" + std::to_string(count) + ") must divide over the " + std::to_string(ways) + " " +
             over + " GPUs";
    }
  }
  return "";
}

// Entries [begin, end) of a forward list, to run again in backward. A
// kernel there that waits for a call listed before `begin` finds what the
// call delivered kept from the forward.
std::vector<KernelSpec> rerun(const std::vector<KernelSpec>& list, std::size_t begin, std::size_t end) {
  std::vector<KernelSpec> again(list.begin() + static_cast<std::ptrdiff_t>(begin),
                                list.begin() + static_cast<std::ptrdiff_t>(end));
  int calls = 0;
  for (KernelSpec& spec : again) {
    if (spec.on_side_stream) continue;
    if (spec.call) {
      ++calls;
    } else if (spec.waits_for_call > calls) {
      spec.waits_for_call = 0;
    }
  }
  return again;
}

}  // namespace

void require_model_parallel_split(const ModelSpec& model, const TrainingConfig& training,
                                  const ModelParallelism& parallel) {
  const int t = parallel.tensor, u = parallel.ulysses, c = parallel.context;
  if (model.has_mla && u > 1) {
    throw InputError(model.name + ": MLA layers are compiled without DeepSpeed-Ulysses (Ulysses " + std::to_string(u) +
                     ")");
  }
  // The MLA models (DeepSeek-V2/V3) are MoE models, which Megatron-LM runs
  // with sequence parallelism under tensor parallelism; MLA without it is
  // not modelled.
  if (model.has_mla && t > 1 && !parallel.sequence_parallel) {
    throw InputError(model.name + ": MLA layers under tensor parallelism are compiled with sequence parallelism "
                     "(tensor " + std::to_string(t) + ")");
  }
  if (u > 1 && t > 1) throw InputError(model.name + ": DeepSpeed-Ulysses is compiled without tensor parallelism");
  if (c > 1 && !training.flash_attention) {
    throw InputError(model.name + ": context parallelism runs on fused (flash) attention, as Transformer Engine's does");
  }
  if (model.has_moe && t > 1 && !parallel.sequence_parallel) {
    throw InputError(model.name + ": MoE layers under tensor parallelism need sequence parallelism (Megatron-LM "
                     "asserts it)");
  }
  const auto require_split = [&](int ways, const char* over, std::initializer_list<SplitCount> counts) {
    const std::string problem = split_problem(ways, over, counts);
    if (!problem.empty()) throw InputError(model.name + ": " + problem);
  };
  const SplitCount heads{"heads", model.heads}, kv_heads{"kv_heads", model.kv_heads};
  require_split(u, "DeepSpeed-Ulysses", {heads, kv_heads});
  const std::string sequence = sequence_split_problem(training.sequence_length, parallel);
  if (!sequence.empty()) throw InputError(model.name + ": " + sequence);
  require_split(t, "tensor-parallel", {heads, kv_heads, {"ffn_hidden", model.ffn_hidden}});
  if (model.mtp_layers > 0) {
    require_split(t, "tensor-parallel", {{"hidden (the MTP projection's outputs)", model.hidden}});
  }
  if (model.has_moe) {
    require_split(t, "tensor-parallel",
                  {{"shared experts' width", model.moe.shared_experts * model.moe.shared_expert_ffn_hidden}});
  }
}

std::string sequence_split_problem(std::int64_t sequence_length, const ModelParallelism& parallel) {
  const int t = parallel.tensor, u = parallel.ulysses, c = parallel.context;
  const SplitCount sequence{"sequence_length", sequence_length};
  std::string problem = split_problem(u, "DeepSpeed-Ulysses", {sequence});
  // Megatron-LM cuts the sequence into 2c chunks, rank i keeping chunks i and
  // 2c - 1 - i, so that every rank does the same causal attention work.
  if (problem.empty() && c > 1) problem = split_problem(2 * c, "(twice the) context-parallel", {sequence});
  // Sequence parallelism splits each context-parallel rank's tokens over the
  // tensor-parallel group (Megatron-LM asserts that they divide).
  if (problem.empty() && parallel.sequence_parallel && t > 1) {
    problem = split_problem(t * c, c > 1 ? "sequence- and context-parallel" : "sequence-parallel", {sequence});
  }
  return problem;
}

std::vector<ModuleWork> transformer_modules(const ModelSpec& model, const TrainingConfig& training,
                                            const ModelParallelism& parallel, const ExpertParallelism& experts) {
  require_model_parallel_split(model, training, parallel);
  // Megatron-Core raises both.
  if (training.recomputes(&RecomputeModules::mla_up_projections) && !model.has_mla) {
    throw InputError(model.name + ": selective recompute of mla_up_proj needs multi-head latent attention");
  }
  if (training.recomputes(&RecomputeModules::shared_experts) && experts.shared_expert_overlap) {
    throw InputError(model.name + ": selective recompute of shared_experts cannot run with the shared experts "
                     "overlapped (--moe-shared-expert-overlap)");
  }
  const int t = parallel.tensor, u = parallel.ulysses, c = parallel.context;
  LayerShapes x{};
  x.batch = static_cast<double>(training.micro_batch_size);
  x.sequence = static_cast<double>(training.sequence_length);
  x.tokens = x.batch * x.sequence / (u * c);  // this GPU's part of the sequence (DeepSpeed-Ulysses, context parallelism)
  x.hidden = static_cast<double>(model.hidden);
  // This GPU's heads, MLP width and vocabulary (Megatron pads the vocabulary
  // to a multiple of the group).
  if (model.has_mla) {
    // Every head has its own key after the up-projection: no-position part
    // plus the rotary part shared by the heads.
    const MlaSpec& m = model.mla;
    x.query = x.kv = static_cast<double>(model.heads / t * (m.qk_nope_head_dim + m.qk_rope_head_dim));
    x.value = x.context = static_cast<double>(model.heads / t * m.v_head_dim);
  } else {
    x.query = static_cast<double>(model.heads / t * model.head_dim);
    x.kv = static_cast<double>(model.kv_heads / t * model.head_dim);
    x.value = x.kv;
    x.context = x.query;
  }
  x.ffn = static_cast<double>(model.ffn_hidden / t);
  x.vocab = static_cast<double>((model.vocab + t - 1) / t);
  x.heads = model.heads / t;
  x.e = training.bytes_per_value;
  x.dtype = value_dtype(training);
  x.gemm_dtype = training.fp8_gemms ? Dtype::fp8 : x.dtype;
  x.hidden_dropout = training.drops_hidden();
  const double T = x.tokens, h = x.hidden;
  const bool tensor_parallel = t > 1;
  const double local_tokens = T / parallel.sequence_shards();  // what norms and residuals see
  const bool swiglu = model.mlp == MlpKind::swiglu;

  // DeepSpeed-Ulysses over u GPUs: the attention core runs on the whole
  // sequence for 1/u of the heads, reached by an all-to-all of this GPU's
  // q, k and v (one call for the three) and left by one of the context; the
  // backward mirrors them. Each call waits for the kernel before it, the
  // kernel after waits for it: nothing overlaps them (DeepSpeed's
  // DistributedAttention).
  LayerShapes core = x;
  core.tokens = x.tokens * u;
  core.query = x.query / u;
  core.kv = x.kv / u;
  core.value = x.value / u;
  core.context = x.context / u;
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

  // The linear layers and the calls around them (nothing without tensor parallelism).
  const TensorParallelGemms linear(x, parallel);
  const int after_gather = linear.after_gather(), after_combine = linear.after_combine();

  // Modules in model_modules' order: embedding, per layer attention and MLP, head.
  std::vector<ModuleParameters> parameters = model_modules(model, experts.parallel);
  std::vector<double> sequence_split_parameters(parameters.size(), 0.0);
  if (tensor_parallel) sequence_split_parameters = split_parameters(model, t, parameters);
  std::size_t next = 0;
  auto module_work = [&] {
    ModuleWork work;
    static_cast<ModuleParameters&>(work) = parameters[next];
    if (parallel.sequence_parallel) work.sequence_parallel_parameters = sequence_split_parameters[next];
    ++next;
    return work;
  };

  const auto dense_mlp = [&](ModuleWork& mlp) {
    const double first_out = swiglu ? 2 * x.ffn : x.ffn;
    const std::string first = swiglu ? "gate_up" : "up";
    mlp.forward.push_back(elementwise("mlp_norm", x, 2 * local_tokens * h));
    linear.gathered_gemm(mlp.forward, first + ".input", first, first_out, h);
    mlp.forward.push_back(elementwise(swiglu ? "swiglu" : "gelu", x, (swiglu ? 3 : 2) * T * x.ffn));
    linear.combined_gemm(mlp.forward, "down", x.ffn);
    mlp.forward.push_back(waiting_for_call(residual_add("residual", x, local_tokens * h), after_combine));
    mlp.backward.push_back(residual_add("residual.backward", x, local_tokens * h));
    linear.row_backward(mlp.backward, "down", x.ffn, h);
    mlp.backward.push_back(elementwise(swiglu ? "swiglu.backward" : "gelu.backward", x, (swiglu ? 5 : 3) * T * x.ffn));
    linear.column_backward(mlp.backward, first, h, first_out);
    mlp.backward.push_back(waiting_for_call(elementwise("mlp_norm.backward", x, 3 * local_tokens * h), after_combine));
  };

  // Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, section
  // 2.1): queries through a rank-q_lora bottleneck with its norm (or one
  // projection), keys and values up-projected from a normed rank-kv_lora
  // latent, which the same down-projection extends by one rotary key for all
  // heads; rotary embedding on the queries' and that key's rotary parts,
  // then each head's query and key concatenated from their two parts. Under
  // tensor parallelism (header): down-projections and latent norms on this
  // GPU's local tokens, each latent and the rotary key gathered along the
  // sequence, the up-projections column-parallel over this GPU's heads.
  const double q_lora = static_cast<double>(model.mla.q_lora_rank);
  const double kv_lora = static_cast<double>(model.mla.kv_lora_rank);
  const double rope = static_cast<double>(model.mla.qk_rope_head_dim);
  // The rotary part of each of this GPU's heads' queries, and of their keys
  // (the shared rotary key repeated); the up-projection makes the rest of
  // each head's key and its value.
  const double heads_rotary = x.heads * rope;
  const double kv_up = x.kv - heads_rotary + x.value;
  // A linear every GPU of the group holds whole (Transformer Engine's
  // "duplicated" mode), on this GPU's tokens: forward, and its backward.
  const auto duplicated = [&](const std::string& name, double n, double k) {
    return gemm(name, x, local_tokens, n, k);
  };
  const auto duplicated_backward = [&](std::vector<KernelSpec>& list, const std::string& name, double in, double out,
                                       int waits_for_call) {
    list.push_back(waiting_for_call(gemm(name + ".dgrad", x, local_tokens, in, out), waits_for_call));
    list.push_back(weight_half(gemm(name + ".wgrad", x, in, out, local_tokens)));
  };
  // A column-parallel up-projection on its latent gathered along the sequence.
  const auto up_projection = [&](std::vector<KernelSpec>& list, const std::string& name, double n, double k) {
    linear.gather_input(list, name + ".input", k);
    list.push_back(waiting_for_call(gemm(name, x, T, n, k), after_gather));
  };
  // Returns where the up-projections begin (mla_up_proj reruns from there).
  const auto latent_projections = [&](std::vector<KernelSpec>& forward) {
    if (q_lora > 0) forward.push_back(duplicated("q_down", q_lora, h));
    forward.push_back(duplicated("kv_down", kv_lora + rope, h));
    linear.gather_input(forward, "k_rope", rope);
    forward.push_back(waiting_for_call(elementwise("kv_norm", x, 2 * local_tokens * kv_lora), after_gather));
    if (q_lora > 0) {
      forward.push_back(elementwise("q_norm", x, 2 * local_tokens * q_lora));
    }
    const std::size_t up_begin = forward.size();
    if (q_lora > 0) {
      up_projection(forward, "q_up", x.query, q_lora);
    } else {
      up_projection(forward, "q_proj", x.query, h);
    }
    up_projection(forward, "kv_up", kv_up, kv_lora);
    forward.push_back(elementwise("rotary", x, 2 * T * (heads_rotary + rope)));
    forward.push_back(elementwise("qk_concat", x, 2 * T * (x.query + x.kv)));
    return up_begin;
  };
  // The backward of the rotary key's gather is a reduce-scatter, which sums
  // the partial gradients each GPU's heads make of it.
  const auto latent_projections_backward = [&](std::vector<KernelSpec>& backward) {
    backward.push_back(elementwise("qk_concat.backward", x, 2 * T * (x.query + x.kv)));
    backward.push_back(elementwise("rotary.backward", x, 2 * T * (heads_rotary + rope)));
    linear.column_backward(backward, "kv_up", kv_lora, kv_up);
    backward.push_back(waiting_for_call(elementwise("kv_norm.backward", x, 3 * local_tokens * kv_lora), after_combine));
    linear.combine(backward, "k_rope.gradient", rope);
    duplicated_backward(backward, "kv_down", h, kv_lora + rope, after_combine);
    if (q_lora > 0) {
      linear.column_backward(backward, "q_up", q_lora, x.query);
      backward.push_back(waiting_for_call(elementwise("q_norm.backward", x, 3 * local_tokens * q_lora), after_combine));
      duplicated_backward(backward, "q_down", h, q_lora, 0);
    } else {
      linear.column_backward(backward, "q_proj", h, x.query);
    }
  };

  std::vector<ModuleWork> modules;
  ModuleWork embedding = module_work();
  // Vocabulary-parallel: each GPU looks up the tokens of its part of the
  // vocabulary (zeros elsewhere), then the group sums.
  embedding.forward.push_back(elementwise("embedding", x, (model.positions == PositionKind::learned ? 5 : 2) * T * h));
  linear.combine(embedding.forward, "embedding", h);
  // Megatron-LM drops the embeddings (hidden dropout) once the group has
  // summed them, on this GPU's part of the sequence.
  if (training.drops_hidden()) {
    embedding.forward.push_back(waiting_for_call(masked_dropout("embedding.dropout", x, local_tokens * h), after_combine));
    embedding.backward.push_back(masked_dropout("embedding.dropout.backward", x, local_tokens * h));
  }
  linear.gather_input(embedding.backward, "embedding.gradient", h);
  embedding.backward.push_back(weight_half(waiting_for_call(elementwise("embedding.backward", x, 3 * T * h), after_gather)));
  modules.push_back(std::move(embedding));

  for (int layer = 0; layer < model.head_layer(); ++layer) {
    const double layer_activations = T * layer_activation_bytes_per_token(model, training, layer, parallel, experts);
    // An MTP depth: its input module, then a layer as any other.
    std::vector<KernelSpec> checkpointed_input;
    if (model.mtp_layer(layer)) {
      ModuleWork input = module_work();
      checkpointed_input = mtp_input(model, x, parallel, linear, local_tokens, input);
      const double kept = training.recompute == Recompute::full
                              ? layer_input_bytes_per_token(model, training, parallel)
                              : mtp_input_activation_bytes_per_token(model, training, parallel);
      input.activation_bytes = T * kept;
      modules.push_back(std::move(input));
    }

    ModuleWork attention = module_work();
    std::vector<KernelSpec> core_forward, core_backward;
    attention_core(core, training, core_forward, core_backward);
    if (c > 1) context_parallel_ring(c, x.e * T * (x.kv + x.value), core_forward, core_backward);
    attention.forward.push_back(elementwise("attention_norm", x, 2 * local_tokens * h));
    // Learned positions were added to the embedding; only rotary ones touch Q and K.
    const bool rotary = model.positions == PositionKind::rotary;
    std::size_t up_begin = 0, up_end = 0;
    if (model.has_mla) {
      up_begin = latent_projections(attention.forward);
      up_end = attention.forward.size();
    } else {
      linear.gathered_gemm(attention.forward, "qkv.input", "qkv", x.query + 2 * x.kv, h);
      if (rotary) attention.forward.push_back(elementwise("rotary", x, 2 * T * (x.query + x.kv)));
    }
    exchange(attention.forward, "qkv", x.query + x.kv + x.value);
    const std::size_t core_at = attention.forward.size();
    attention.forward.insert(attention.forward.end(), core_forward.begin(), core_forward.end());
    then_wait(attention.forward, core_at);
    exchange(attention.forward, "context", x.context);
    const std::size_t out_proj_at = attention.forward.size();
    linear.combined_gemm(attention.forward, "out_proj", x.context);
    then_wait(attention.forward, out_proj_at);
    attention.forward.push_back(waiting_for_call(residual_add("residual", x, local_tokens * h), after_combine));
    attention.backward.push_back(residual_add("residual.backward", x, local_tokens * h));
    linear.row_backward(attention.backward, "out_proj", x.context, h);
    exchange(attention.backward, "context.backward", x.context);
    const std::size_t core_backward_at = attention.backward.size();
    attention.backward.insert(attention.backward.end(), core_backward.begin(), core_backward.end());
    then_wait(attention.backward, core_backward_at);
    exchange(attention.backward, "qkv.backward", x.query + x.kv + x.value);
    const std::size_t after_exchange = attention.backward.size();
    if (model.has_mla) {
      latent_projections_backward(attention.backward);
    } else {
      if (rotary) attention.backward.push_back(elementwise("rotary.backward", x, 2 * T * (x.query + x.kv)));
      linear.column_backward(attention.backward, "qkv", h, x.query + 2 * x.kv);
    }
    then_wait(attention.backward, after_exchange);
    attention.backward.push_back(waiting_for_call(elementwise("attention_norm.backward", x, 3 * local_tokens * h),
                                         after_combine));

    // The MLP block: one module, or a MoE layer's two (its routed experts last).
    std::vector<ModuleWork> feed_forward;
    MoeForwardParts moe_parts;
    const bool moe = model.moe_layer(layer);
    if (moe) {
      feed_forward.push_back(module_work());
      feed_forward.push_back(module_work());
      moe_parts = moe_block(model, x, parallel, linear, experts, feed_forward[0], feed_forward[1]);
    } else {
      feed_forward.push_back(module_work());
      dense_mlp(feed_forward[0]);
    }
    switch (training.recompute) {
      case Recompute::none: attention.activation_bytes = layer_activations; break;
      case Recompute::selective: {
        // Each module reruns its parts (training.h) before its backward, in
        // forward order; what they make lives until that backward has run.
        attention.activation_bytes = layer_activations;
        const auto rebuild = [&](ModuleWork& work, bool RecomputeModules::*part, std::size_t begin, std::size_t end) {
          if (!training.recomputes(part) || begin == end) return;
          const std::vector<KernelSpec> again = rerun(work.forward, begin, end);
          work.recompute.insert(work.recompute.end(), again.begin(), again.end());
        };
        if (model.has_mla) rebuild(attention, &RecomputeModules::norms, 0, 1);
        rebuild(attention, &RecomputeModules::mla_up_projections, up_begin, up_end);
        if (training.recomputes(&RecomputeModules::core_attention)) {
          attention.recompute.insert(attention.recompute.end(), core_forward.begin(), core_forward.end());
        }
        ModuleWork& block = feed_forward.front();
        if (moe) {
          rebuild(block, &RecomputeModules::norms, moe_parts.norm, moe_parts.norm + 1);
          rebuild(block, &RecomputeModules::shared_experts, moe_parts.shared_begin, moe_parts.shared_end);
          rebuild(feed_forward.back(), &RecomputeModules::moe_activation, moe_parts.activation,
                  moe_parts.activation + 1);
        } else {
          // The dense MLP but its norm and residual add.
          rebuild(block, &RecomputeModules::dense_mlp, 1, block.forward.size() - 1);
        }
        const RecomputedBytes rebuilt = recomputed_bytes_per_token(model, training, layer, parallel, experts);
        attention.recompute_working_bytes = T * rebuilt.attention;
        block.recompute_working_bytes = T * rebuilt.mlp;
        if (moe) feed_forward.back().recompute_working_bytes = T * rebuilt.experts;
        break;
      }
      case Recompute::full: {
        // Only the layer input is kept; the backward rebuilds the whole layer
        // before the backward of its last module, the first of the layer (an
        // MTP depth's from its projection on).
        attention.activation_bytes = T * layer_input_bytes_per_token(model, training, parallel);
        ModuleWork& first_backward = feed_forward.back();
        first_backward.recompute = checkpointed_input;
        first_backward.recompute.insert(first_backward.recompute.end(), attention.forward.begin(), attention.forward.end());
        for (const ModuleWork& work : feed_forward) {
          first_backward.recompute.insert(first_backward.recompute.end(), work.forward.begin(), work.forward.end());
        }
        first_backward.recompute_working_bytes =
            layer_activations +
            (checkpointed_input.empty() ? 0.0 : T * mtp_input_activation_bytes_per_token(model, training, parallel));
        break;
      }
    }
    modules.push_back(std::move(attention));
    for (ModuleWork& work : feed_forward) modules.push_back(std::move(work));
  }

  // The head: a prediction from the last layer's hidden states, then one
  // from each MTP depth's, through its own final norm and the shared LM head.
  ModuleWork head = module_work();
  for (int depth = -1; depth < model.mtp_layers; ++depth) {
    const std::string prefix = depth < 0 ? "" : "mtp" + std::to_string(depth) + ".";
    head.forward.push_back(elementwise(prefix + "final_norm", x, 2 * local_tokens * h));
    linear.gather_input(head.forward, prefix + "lm_head.input", h);
    head.forward.push_back(waiting_for_call(gemm(prefix + "lm_head", x, T, x.vocab, h), after_gather));
    // Cross-entropy reads the logits and keeps their fp32 upcast for backward;
    // over a vocabulary split t ways it all-reduces three fp32 values per token.
    KernelSpec loss = elementwise(prefix + "loss", x, T * x.vocab);
    loss.hbm_bytes = (x.e + 4) * T * x.vocab;
    head.forward.push_back(loss);
    if (tensor_parallel) {
      for (const char* value : {"loss.logit_max", "loss.target_logit", "loss.exp_sum"}) {
        head.forward.push_back(group_call(prefix + value + ".all_reduce", CallGroup::tensor_parallel,
                                          CollectiveOp::all_reduce, 4 * T));
      }
    }
    // Backward order: loss, then the LM head's GEMMs, then the final norm.
    KernelSpec loss_backward = elementwise(prefix + "loss.backward", x, T * x.vocab);
    loss_backward.hbm_bytes = (4 + x.e) * T * x.vocab;
    head.backward.push_back(loss_backward);
    linear.column_backward(head.backward, prefix + "lm_head", h, x.vocab);
    head.backward.push_back(
        waiting_for_call(elementwise(prefix + "final_norm.backward", x, 3 * local_tokens * h), after_combine));
  }
  head.activation_bytes = T * head_activation_bytes_per_token(model, training, parallel);
  modules.push_back(std::move(head));
  return modules;
}

Op kernel_op(const KernelSpec& spec, int stream) {
  Op op = make_op(OpKind::compute, stream);
  op.kernel = spec.kernel;
  op.dtype = spec.dtype;
  op.attention_kernel = spec.attention_kernel;
  op.flops = spec.flops;
  op.hbm_bytes = spec.hbm_bytes;
  op.gemm = spec.gemm;
  return op;
}

double optimizer_bytes_per_parameter(const OptimizerStep& step) {
  constexpr double kMainBytes = 4;    // fp32 main gradients and master weights
  constexpr double kFusedAdam = 28;   // read gradient, master, m, v; write master, m, v
  const double g = step.gradient_bytes_per_value;
  const double to_main_gradients = g < kMainBytes ? g + kMainBytes : 0;
  const double unscale = step.loss_scaling ? 2 * kMainBytes : 0;
  const double norm = kMainBytes;
  const double to_model_weights = kMainBytes + step.weight_bytes_per_value;
  return to_main_gradients + unscale + norm + kFusedAdam + to_model_weights;
}

KernelSpec optimizer_step(const OptimizerStep& step) {
  constexpr double kAdamFlopsPerParameter = 12;
  KernelSpec adam;
  adam.name = "optimizer.adam";
  adam.kernel = KernelClass::optimizer;
  adam.dtype = Dtype::fp32;
  adam.flops = kAdamFlopsPerParameter * step.shard_parameters;
  adam.hbm_bytes = optimizer_bytes_per_parameter(step) * step.shard_parameters + step.zeroed_gradient_bytes;
  return adam;
}

}  // namespace shardsim::workloads
