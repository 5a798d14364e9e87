#include "workloads/memory/activation_memory.h"

#include <algorithm>
#include <vector>

namespace shardsim::workloads {

namespace {

// Widths per token of the tensors attention keeps; the output has one value
// vector per query head, whatever the number of key/value heads.
struct AttentionWidths {
  double query, key, value, output;
};

AttentionWidths attention_widths(const ModelSpec& model) {
  if (model.has_mla) {
    const double qk = static_cast<double>(model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim);
    const double v = static_cast<double>(model.heads * model.mla.v_head_dim);
    return {model.heads * qk, model.heads * qk, v, v};
  }
  const double q = static_cast<double>(model.heads * model.head_dim);
  const double kv = static_cast<double>(model.kv_heads * model.head_dim);
  return {q, kv, kv, q};
}

double ffn_bytes_per_token(const ModelSpec& model, double ffn, double e,
                           KernelImplementation kernels = KernelImplementation::fused) {
  if (model.mlp != MlpKind::swiglu) return 2.0 * e * ffn;
  return (kernels == KernelImplementation::eager ? 4.0 : 3.0) * e * ffn;
}

// Eager attention saves keys and values repeated to the query heads.
bool repeats_key_values(const ModelSpec& model, KernelImplementation kernels) {
  return kernels == KernelImplementation::eager && !model.has_mla && model.kv_heads != model.heads;
}

}  // namespace

double layer_input_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                   const ModelParallelism& parallel) {
  return training.bytes_per_value * static_cast<double>(model.hidden) / parallel.sequence_shards();
}

namespace {

// A layer's bytes per token on one GPU: kept from the forward, and those
// selective recompute rebuilds, by the module that rebuilds them.
struct LayerBytes {
  double kept = 0;
  RecomputedBytes rebuilt;
};

LayerBytes layer_bytes(const ModelSpec& model, const TrainingConfig& training, int layer,
                       const ModelParallelism& parallel, const ExpertParallelism& experts,
                       KernelImplementation kernels) {
  const double e = training.bytes_per_value;
  const double h = static_cast<double>(model.hidden);
  const double t = parallel.tensor;
  const double shards = parallel.sequence_shards();
  const bool moe_layer = model.moe_layer(layer);
  LayerBytes bytes;
  // Each tensor split `ways`: along the sequence under sequence parallelism
  // (`shards`), or by heads or width under tensor parallelism (t); to
  // `rebuilt` when the module named there rebuilds it, else kept.
  const auto add = [&](double per_token, double ways, double* rebuilt) {
    (rebuilt != nullptr ? *rebuilt : bytes.kept) += per_token / ways;
  };
  const auto rebuilt_by = [&](bool RecomputeModules::*part, double& module) {
    return training.recomputes(part) ? &module : nullptr;
  };
  RecomputedBytes& r = bytes.rebuilt;

  // The norms' inputs, and their outputs, the first GEMMs' inputs.
  add(2 * e * h, shards, nullptr);
  add(e * h, shards, model.has_mla ? rebuilt_by(&RecomputeModules::norms, r.attention) : nullptr);
  add(e * h, shards, moe_layer ? rebuilt_by(&RecomputeModules::norms, r.mlp) : nullptr);
  if (training.drops_hidden()) add(2 * kDropoutMaskBytesPerValue * h, shards, nullptr);  // the residuals' masks

  AttentionWidths w = attention_widths(model);
  if (repeats_key_values(model, kernels)) w.key = w.value = w.query;
  add(e * (w.query + w.key + w.value), t, rebuilt_by(&RecomputeModules::mla_up_projections, r.attention));
  add(e * w.output, t, nullptr);
  if (model.has_mla) {
    // The latents' norms keep their inputs and the up-projections theirs:
    // the query latent twice, the key-value latent twice with the rotary key
    // beside its first copy.
    const MlaSpec& m = model.mla;
    add(e * static_cast<double>(2 * m.q_lora_rank + 2 * m.kv_lora_rank + m.qk_rope_head_dim), t, nullptr);
  }
  // A checkpointed core keeps its inputs (Q, K, V) and nothing of its own;
  // full recompute runs it without keeping the scores.
  double* core = rebuilt_by(&RecomputeModules::core_attention, r.attention);
  if (training.flash_attention) {
    add(4.0 * model.heads, t, core);  // the rows' log-sum-exps
  } else if (!training.rebuilds_layer(layer)) {
    // The softmax output; with dropout also its mask and the dropped
    // probabilities the context GEMM read (Korthikanti's 5 a s^2 b).
    const double scores = model.heads * static_cast<double>(training.sequence_length);
    add((training.drops_attention() ? 2 * e + kDropoutMaskBytesPerValue : e) * scores, t, core);
  }

  if (moe_layer) {
    const MoeSpec& moe = model.moe;
    const double routed_copies = experts.capacity_factor * moe.experts_per_token;
    const double f = static_cast<double>(moe.expert_ffn_hidden);
    // Each routed copy: its permuted input, the expert's output and the MLP's
    // tensors, of which the last is the activation's output.
    add(routed_copies * (ffn_bytes_per_token(model, f, e) - e * f + 2 * e * h), t, nullptr);
    add(routed_copies * e * f, t, rebuilt_by(&RecomputeModules::moe_activation, r.experts));
    add(moe.shared_experts * ffn_bytes_per_token(model, static_cast<double>(moe.shared_expert_ffn_hidden), e), t,
        rebuilt_by(&RecomputeModules::shared_experts, r.mlp));
    add(e * moe.experts, t, nullptr);  // the router's logits
    // The overlapped shared experts' first linear keeps the input it was
    // given, gathered along the sequence (moe_kernels.h).
    if (experts.shared_expert_overlap && moe.shared_experts > 0) bytes.kept += e * h * (1 - 1 / shards);
  } else {
    add(ffn_bytes_per_token(model, static_cast<double>(model.ffn_hidden), e, kernels), t,
        rebuilt_by(&RecomputeModules::dense_mlp, r.mlp));
  }
  return bytes;
}

}  // namespace

double layer_activation_bytes_per_token(const ModelSpec& model, const TrainingConfig& training, int layer,
                                        const ModelParallelism& parallel, const ExpertParallelism& experts,
                                        KernelImplementation kernels) {
  return layer_bytes(model, training, layer, parallel, experts, kernels).kept;
}

RecomputedBytes recomputed_bytes_per_token(const ModelSpec& model, const TrainingConfig& training, int layer,
                                           const ModelParallelism& parallel, const ExpertParallelism& experts,
                                           KernelImplementation kernels) {
  return layer_bytes(model, training, layer, parallel, experts, kernels).rebuilt;
}

// torchtitan/parallelisms/parallelize_llama.py at 157a12c5: no_recompute_list
// (aten.mm, the flash and efficient SDPA kernels), every second mm
// recomputed. The GEMMs in forward order and their outputs per token, as
// transformer_kernels.h lists them: eager wq, wk, wv, wo, then w1, w3, w2
// (a GELU MLP's up and down); fused qkv, out_proj, then gate_up (or up) and
// down. The first, third, ... are kept.
double ops_policy_kept_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                       const ModelParallelism& parallel, KernelImplementation kernels) {
  const double e = training.bytes_per_value, t = parallel.tensor;
  const AttentionWidths w = attention_widths(model);
  const double f = static_cast<double>(model.ffn_hidden), h = static_cast<double>(model.hidden);
  const bool swiglu = model.mlp == MlpKind::swiglu;
  std::vector<double> outputs;
  if (kernels == KernelImplementation::eager) {
    outputs = {w.query, w.key, w.value, h};
    if (swiglu) {
      outputs.insert(outputs.end(), {f, f, h});
    } else {
      outputs.insert(outputs.end(), {f, h});
    }
  } else {
    outputs = {w.query + w.key + w.value, h, swiglu ? 2 * f : f, h};
  }
  double kept_gemm_outputs = 0;
  for (std::size_t i = 0; i < outputs.size(); i += 2) kept_gemm_outputs += outputs[i];
  const double log_sum_exps = 4.0 * model.heads;
  return layer_input_bytes_per_token(model, training, parallel) + (e * (kept_gemm_outputs + w.output) + log_sum_exps) / t;
}

double mtp_input_activation_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                            const ModelParallelism& parallel) {
  return 4.0 * training.bytes_per_value * static_cast<double>(model.hidden) / parallel.sequence_shards();
}

double head_activation_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                       const ModelParallelism& parallel) {
  const double e = training.bytes_per_value;
  const double prediction = 2.0 * e * static_cast<double>(model.hidden) / parallel.sequence_shards() +
                            kFloat32Bytes * static_cast<double>(model.vocab) / parallel.tensor;
  return (1 + model.mtp_layers) * prediction;
}

LossWorkingBytes head_working_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                              const ModelParallelism& parallel, KernelImplementation kernels) {
  const double e = training.bytes_per_value;
  const double logits = static_cast<double>(model.vocab) / parallel.tensor;
  // Eager: the bf16 logits, their fp32 copy; nll_loss's gradient, log_softmax's.
  if (kernels == KernelImplementation::eager) {
    return {{e * logits, kFloat32Bytes * logits}, {kFloat32Bytes * logits, kFloat32Bytes * logits}};
  }
  return {{e * logits}, {e * logits}};
}

ActivationFootprint activation_footprint(const ModelSpec& model, const TrainingConfig& training,
                                         const ModelParallelism& parallel, const ExpertParallelism& experts,
                                         KernelImplementation kernels) {
  // DeepSpeed-Ulysses holds 1/u of the tokens outside attention and 1/u of
  // the heads inside it: 1/u of every per-token activation.
  const double tokens = static_cast<double>(training.tokens_per_micro_batch()) / parallel.ulysses;
  ActivationFootprint footprint;
  double largest_layer = 0, largest_rebuilt = 0;
  const bool ops_policy = training.recompute == Recompute::ops;
  for (int layer = 0; layer < model.head_layer(); ++layer) {
    // An MTP depth's input, kept beside its layer's (under full recompute
    // the embeddings it looks up, a second layer input).
    const bool mtp = model.mtp_layer(layer);
    const double input = mtp ? tokens * mtp_input_activation_bytes_per_token(model, training, parallel) : 0.0;
    const double layer_input = tokens * layer_input_bytes_per_token(model, training, parallel);
    const double full = tokens * layer_activation_bytes_per_token(model, training, layer, parallel, experts, kernels);
    const bool rebuilt_whole = training.rebuilds_layer(layer) || ops_policy;
    if (rebuilt_whole) largest_layer = std::max(largest_layer, full + input);
    // Selective recompute rebuilds one module's parts at a time.
    const RecomputedBytes rebuilt = recomputed_bytes_per_token(model, training, layer, parallel, experts, kernels);
    largest_rebuilt = std::max({largest_rebuilt, rebuilt.attention, rebuilt.mlp, rebuilt.experts});
    if (training.rebuilds_layer(layer)) {
      footprint.layers_bytes += (mtp ? 2 : 1) * layer_input;
    } else if (ops_policy) {
      footprint.layers_bytes += tokens * ops_policy_kept_bytes_per_token(model, training, parallel, kernels) + input;
    } else {
      footprint.layers_bytes += full + input;
    }
  }
  footprint.recompute_working_bytes =
      training.recompute == Recompute::selective ? tokens * largest_rebuilt : largest_layer;
  footprint.head_bytes = tokens * head_activation_bytes_per_token(model, training, parallel);
  const LossWorkingBytes loss = head_working_bytes_per_token(model, training, parallel, kernels);
  footprint.head_working_bytes = tokens * std::max(loss.forward_total(), loss.backward_total());
  return footprint;
}

}  // namespace shardsim::workloads
