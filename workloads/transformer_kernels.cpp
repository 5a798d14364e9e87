#include "workloads/transformer_kernels.h"

#include "topology/json_input.h"
#include "workloads/activation_memory.h"

namespace shardsim::workloads {

namespace {

// FlashAttention's backward runs five GEMM-sized products to the forward's two.
constexpr double kFlashBackwardOverForward = 2.5;

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

// Forward GEMM (T, out, in) and its two backward GEMMs.
void linear(const std::string& name, const Shapes& x, double in, double out, std::vector<KernelSpec>& forward,
            std::vector<KernelSpec>& backward) {
  forward.push_back(gemm(name, x, x.tokens, out, in));
  backward.push_back(gemm(name + ".dgrad", x, x.tokens, in, out));
  backward.push_back(gemm(name + ".wgrad", x, in, out, x.tokens));
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

}  // namespace

std::vector<ModuleWork> transformer_modules(const ModelSpec& model, const TrainingConfig& training) {
  if (model.has_moe || model.has_mla) {
    throw InputError(model.name + ": MoE and MLA layers are parsed but not yet compiled into a training step");
  }
  Shapes x{};
  x.batch = static_cast<double>(training.micro_batch_size);
  x.sequence = static_cast<double>(training.sequence_length);
  x.tokens = x.batch * x.sequence;
  x.hidden = static_cast<double>(model.hidden);
  x.query = static_cast<double>(model.heads * model.head_dim);
  x.kv = static_cast<double>(model.kv_heads * model.head_dim);
  x.ffn = static_cast<double>(model.ffn_hidden);
  x.vocab = static_cast<double>(model.vocab);
  x.heads = model.heads;
  x.e = training.bytes_per_value;
  x.dtype = training.fp16 ? Dtype::fp16 : Dtype::bf16;
  x.gemm_dtype = training.fp8_gemms ? Dtype::fp8 : x.dtype;
  const double T = x.tokens, h = x.hidden;
  const bool swiglu = model.mlp == MlpKind::swiglu;
  // Modules in model_modules' order: embedding, per layer attention and MLP, head.
  const std::vector<ModuleParameters> parameters = model_modules(model);
  std::size_t next = 0;
  auto module_work = [&] {
    ModuleWork work;
    static_cast<ModuleParameters&>(work) = parameters[next++];
    return work;
  };

  std::vector<ModuleWork> modules;
  ModuleWork embedding = module_work();
  embedding.forward.push_back(elementwise("embedding", x, (model.positions == PositionKind::learned ? 5 : 2) * T * h));
  embedding.backward.push_back(elementwise("embedding.backward", x, 3 * T * h));
  modules.push_back(std::move(embedding));

  for (int layer = 0; layer < model.layers; ++layer) {
    const double layer_activations = T * layer_activation_bytes_per_token(model, training, layer);

    ModuleWork attention = module_work();
    std::vector<KernelSpec> core_forward, core_backward;
    attention_core(x, training.flash_attention, core_forward, core_backward);
    attention.forward.push_back(elementwise("attention_norm", x, 2 * T * h));
    attention.forward.push_back(gemm("qkv", x, T, x.query + 2 * x.kv, h));
    attention.forward.push_back(elementwise("rotary", x, 2 * T * (x.query + x.kv)));
    attention.forward.insert(attention.forward.end(), core_forward.begin(), core_forward.end());
    attention.forward.push_back(gemm("out_proj", x, T, h, x.query));
    attention.forward.push_back(elementwise("residual", x, 3 * T * h));
    attention.backward.push_back(elementwise("residual.backward", x, 3 * T * h));
    attention.backward.push_back(gemm("out_proj.dgrad", x, T, x.query, h));
    attention.backward.push_back(gemm("out_proj.wgrad", x, x.query, h, T));
    attention.backward.insert(attention.backward.end(), core_backward.begin(), core_backward.end());
    attention.backward.push_back(elementwise("rotary.backward", x, 2 * T * (x.query + x.kv)));
    attention.backward.push_back(gemm("qkv.dgrad", x, T, h, x.query + 2 * x.kv));
    attention.backward.push_back(gemm("qkv.wgrad", x, h, x.query + 2 * x.kv, T));
    attention.backward.push_back(elementwise("attention_norm.backward", x, 3 * T * h));

    ModuleWork mlp = module_work();
    const double first_out = swiglu ? 2 * x.ffn : x.ffn;
    mlp.forward.push_back(elementwise("mlp_norm", x, 2 * T * h));
    mlp.forward.push_back(gemm(swiglu ? "gate_up" : "up", x, T, first_out, h));
    mlp.forward.push_back(elementwise(swiglu ? "swiglu" : "gelu", x, (swiglu ? 3 : 2) * T * x.ffn));
    mlp.forward.push_back(gemm("down", x, T, h, x.ffn));
    mlp.forward.push_back(elementwise("residual", x, 3 * T * h));
    mlp.backward.push_back(elementwise("residual.backward", x, 3 * T * h));
    mlp.backward.push_back(gemm("down.dgrad", x, T, x.ffn, h));
    mlp.backward.push_back(gemm("down.wgrad", x, x.ffn, h, T));
    mlp.backward.push_back(elementwise(swiglu ? "swiglu.backward" : "gelu.backward", x, (swiglu ? 5 : 3) * T * x.ffn));
    mlp.backward.push_back(gemm(std::string(swiglu ? "gate_up" : "up") + ".dgrad", x, T, h, first_out));
    mlp.backward.push_back(gemm(std::string(swiglu ? "gate_up" : "up") + ".wgrad", x, h, first_out, T));
    mlp.backward.push_back(elementwise("mlp_norm.backward", x, 3 * T * h));

    switch (training.recompute) {
      case Recompute::none: attention.activation_bytes = layer_activations; break;
      case Recompute::selective:
        attention.activation_bytes = layer_activations;  // activation_memory.h already drops the scores
        if (!training.flash_attention) attention.recompute = core_forward;
        break;
      case Recompute::full:
        // Only the layer input is kept; the backward rebuilds the whole layer
        // (attention then MLP) before the MLP's backward, the first of the layer.
        attention.activation_bytes = x.e * T * h;
        mlp.recompute = attention.forward;
        mlp.recompute.insert(mlp.recompute.end(), mlp.forward.begin(), mlp.forward.end());
        mlp.recompute_working_bytes = layer_activations;
        break;
    }
    modules.push_back(std::move(attention));
    modules.push_back(std::move(mlp));
  }

  ModuleWork head = module_work();
  head.forward.push_back(elementwise("final_norm", x, 2 * T * h));
  linear("lm_head", x, h, x.vocab, head.forward, head.backward);
  // Cross-entropy reads the logits and keeps their fp32 upcast for backward.
  KernelSpec loss = elementwise("loss", x, T * x.vocab);
  loss.hbm_bytes = (x.e + 4) * T * x.vocab;
  head.forward.push_back(loss);
  KernelSpec loss_backward = elementwise("loss.backward", x, T * x.vocab);
  loss_backward.hbm_bytes = (4 + x.e) * T * x.vocab;
  // Backward order: loss, then the LM head's GEMMs, then the final norm.
  head.backward.insert(head.backward.begin(), loss_backward);
  head.backward.push_back(elementwise("final_norm.backward", x, 3 * T * h));
  head.activation_bytes = T * (2 * x.e * h + (x.e + 4) * x.vocab);
  modules.push_back(std::move(head));
  return modules;
}

double model_flops_per_step(const ModelSpec& model, const TrainingConfig& training) {
  const double h = static_cast<double>(model.hidden);
  const double q = static_cast<double>(model.heads * model.head_dim);
  const double kv = static_cast<double>(model.kv_heads * model.head_dim);
  const double f = static_cast<double>(model.ffn_hidden);
  const double s = static_cast<double>(training.sequence_length);
  const double matrices = model.mlp == MlpKind::swiglu ? 3 : 2;
  const double per_token_layer = 2 * (h * (q + 2 * kv) + q * h + matrices * h * f) + 4 * s * q;
  const double per_token = model.layers * per_token_layer + 2 * h * static_cast<double>(model.vocab);
  return 3 * per_token * static_cast<double>(training.global_batch_tokens());
}

}  // namespace shardsim::workloads
