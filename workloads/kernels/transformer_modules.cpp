// transformer_modules (transformer_kernels.h): the kernels and calls of
// every module on one GPU, built module by module.
#include "topology/base/json_input.h"
#include "workloads/kernels/attention_kernels.h"
#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/moe_kernels.h"
#include "workloads/kernels/mtp_kernels.h"
#include "workloads/kernels/tensor_parallel_gemms.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"

#include <string>
#include <utility>
#include <vector>

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

// One GPU's part of a layer: its tokens (split by DeepSpeed-Ulysses and
// context parallelism) and its heads, MLP width and vocabulary (split by
// tensor parallelism; Megatron pads the vocabulary to a multiple of the
// group).
LayerShapes gpu_layer_shapes(const ModelSpec& model, const TrainingConfig& training, const ModelParallelism& parallel) {
  const int t = parallel.tensor, u = parallel.ulysses, c = parallel.context;
  LayerShapes x{};
  x.batch = static_cast<double>(training.micro_batch_size);
  x.sequence = static_cast<double>(training.sequence_length);
  x.tokens = x.batch * x.sequence / (u * c);
  x.hidden = static_cast<double>(model.hidden);
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
  return x;
}

// DeepSpeed-Ulysses over u GPUs: the attention core runs on the whole
// sequence for 1/u of the heads, reached by an all-to-all of this GPU's q,
// k and v (one call for the three) and left by one of the context; the
// backward mirrors them. Each call waits for the kernel before it, the
// kernel after waits for it: nothing overlaps them (DeepSpeed's
// DistributedAttention).
LayerShapes attention_core_shapes(const LayerShapes& x, int u) {
  LayerShapes core = x;
  core.tokens = x.tokens * u;
  core.query = x.query / u;
  core.kv = x.kv / u;
  core.value = x.value / u;
  core.context = x.context / u;
  core.heads = x.heads / u;
  return core;
}

class ModuleListBuilder {
 public:
  ModuleListBuilder(const ModelSpec& model, const TrainingConfig& training, const ModelParallelism& parallel,
                    const ExpertParallelism& experts, KernelImplementation kernels)
      : model_(model),
        training_(training),
        parallel_(parallel),
        experts_(experts),
        kernels_(kernels),
        eager_(kernels == KernelImplementation::eager),
        x_(gpu_layer_shapes(model, training, parallel)),
        core_(attention_core_shapes(x_, parallel.ulysses)),
        linear_(x_, parallel),
        after_gather_(linear_.after_gather()),
        after_combine_(linear_.after_combine()),
        T_(x_.tokens),
        h_(x_.hidden),
        local_tokens_(T_ / parallel.sequence_shards()),
        parameters_(model_modules(model, experts.parallel)),
        sequence_split_parameters_(parameters_.size(), 0.0) {
    if (parallel.tensor > 1) sequence_split_parameters_ = split_parameters(model, parallel.tensor, parameters_);
  }

  // Modules in model_modules' order: embedding, per layer attention and
  // MLP (and an MTP depth's input module), head.
  std::vector<ModuleWork> build() {
    std::vector<ModuleWork> modules;
    modules.push_back(embedding());
    for (int layer = 0; layer < model_.head_layer(); ++layer) add_layer(layer, modules);
    modules.push_back(head());
    return modules;
  }

 private:
  ModuleWork next_module() {
    ModuleWork work;
    static_cast<ModuleParameters&>(work) = parameters_[next_];
    if (parallel_.sequence_parallel) work.sequence_parallel_parameters = sequence_split_parameters_[next_];
    ++next_;
    return work;
  }

  // Ulysses' all-to-all of `values_per_token` around the attention core.
  void exchange(std::vector<KernelSpec>& list, const std::string& name, double values_per_token) const {
    if (parallel_.ulysses > 1) {
      list.push_back(group_call(name + ".all_to_all", CallGroup::sequence_parallel, CollectiveOp::all_to_all,
                                x_.e * T_ * values_per_token));
    }
  }
  void then_wait(std::vector<KernelSpec>& list, std::size_t first) const {
    if (parallel_.ulysses > 1) list.at(first).waits_for_call = 1;
  }

  ModuleWork embedding();
  void add_layer(int layer, std::vector<ModuleWork>& modules);
  // The attention module's kernels; [up_begin, up_end) are MLA's
  // up-projections (mla_up_proj reruns them).
  void attention(ModuleWork& attention, const std::vector<KernelSpec>& core_forward,
                 const std::vector<KernelSpec>& core_backward, std::size_t& up_begin, std::size_t& up_end) const;
  void dense_mlp(ModuleWork& mlp) const;
  void eager_swiglu(ModuleWork& mlp) const;
  void eager_projections(std::vector<KernelSpec>& forward, bool rotary) const;
  void eager_projections_backward(std::vector<KernelSpec>& backward, bool rotary) const;
  void eager_rotary(std::vector<KernelSpec>& list, const std::string& name, double width) const;
  void rerun_unkept_ops(ModuleWork& attention, std::vector<ModuleWork>& feed_forward, double layer_activations) const;
  // MLA's widths per token on this GPU: the query and key-value latents, the
  // rotary key, the rotary part of each of this GPU's heads' queries and of
  // their keys (the shared rotary key repeated), and what the key-value
  // up-projection makes (the rest of each head's key, and its value).
  struct LatentWidths {
    double q_lora, kv_lora, rope, heads_rotary, kv_up;
  };
  LatentWidths latent_widths() const {
    const double rope = static_cast<double>(model_.mla.qk_rope_head_dim);
    const double heads_rotary = x_.heads * rope;
    return {static_cast<double>(model_.mla.q_lora_rank), static_cast<double>(model_.mla.kv_lora_rank), rope,
            heads_rotary, x_.kv - heads_rotary + x_.value};
  }
  std::size_t latent_projections(std::vector<KernelSpec>& forward) const;
  void latent_projections_backward(std::vector<KernelSpec>& backward) const;
  void recompute_selectively(int layer, ModuleWork& attention, std::vector<ModuleWork>& feed_forward,
                             const std::vector<KernelSpec>& core_forward, const MoeForwardParts& moe_parts,
                             std::size_t up_begin, std::size_t up_end) const;
  ModuleWork head();

  const ModelSpec& model_;
  const TrainingConfig& training_;
  const ModelParallelism& parallel_;
  const ExpertParallelism& experts_;
  const KernelImplementation kernels_;
  const bool eager_;
  const LayerShapes x_;
  const LayerShapes core_;
  const TensorParallelGemms linear_;  // the linear layers and the calls around them
  const int after_gather_, after_combine_;
  const double T_, h_;
  const double local_tokens_;  // what norms and residuals see
  std::vector<ModuleParameters> parameters_;
  std::vector<double> sequence_split_parameters_;
  std::size_t next_ = 0;
};

ModuleWork ModuleListBuilder::embedding() {
  const LayerShapes& x = x_;
  ModuleWork embedding = next_module();
  // Vocabulary-parallel: each GPU looks up the tokens of its part of the
  // vocabulary (zeros elsewhere), then the group sums.
  embedding.forward.push_back(elementwise("embedding", x, (model_.positions == PositionKind::learned ? 5 : 2) * T_ * h_));
  linear_.combine(embedding.forward, "embedding", h_);
  // Megatron-LM drops the embeddings (hidden dropout) once the group has
  // summed them, on this GPU's part of the sequence.
  if (training_.drops_hidden()) {
    embedding.forward.push_back(
        waiting_for_call(masked_dropout("embedding.dropout", x, local_tokens_ * h_), after_combine_));
    embedding.backward.push_back(masked_dropout("embedding.dropout.backward", x, local_tokens_ * h_));
  }
  linear_.gather_input(embedding.backward, "embedding.gradient", h_);
  embedding.backward.push_back(
      weight_half(waiting_for_call(elementwise("embedding.backward", x, 3 * T_ * h_), after_gather_)));
  return embedding;
}

void ModuleListBuilder::dense_mlp(ModuleWork& mlp) const {
  const LayerShapes& x = x_;
  const bool swiglu = model_.mlp == MlpKind::swiglu;
  if (eager_ && swiglu) {
    eager_swiglu(mlp);
    return;
  }
  const double first_out = swiglu ? 2 * x.ffn : x.ffn;
  const std::string first = swiglu ? "gate_up" : "up";
  mlp.forward.push_back(elementwise("mlp_norm", x, 2 * local_tokens_ * h_));
  linear_.gathered_gemm(mlp.forward, first + ".input", first, first_out, h_);
  mlp.forward.push_back(elementwise(swiglu ? "swiglu" : "gelu", x, (swiglu ? 3 : 2) * T_ * x.ffn));
  linear_.combined_gemm(mlp.forward, "down", x.ffn);
  mlp.forward.push_back(waiting_for_call(residual_add("residual", x, local_tokens_ * h_), after_combine_));
  mlp.backward.push_back(residual_add("residual.backward", x, local_tokens_ * h_));
  linear_.row_backward(mlp.backward, "down", x.ffn, h_);
  mlp.backward.push_back(elementwise(swiglu ? "swiglu.backward" : "gelu.backward", x, (swiglu ? 5 : 3) * T_ * x.ffn));
  linear_.column_backward(mlp.backward, first, h_, first_out);
  mlp.backward.push_back(waiting_for_call(elementwise("mlp_norm.backward", x, 3 * local_tokens_ * h_), after_combine_));
}

// torchtitan's FeedForward (torchtitan/models/llama/model.py at 157a12c5):
// w2(silu(w1(x)) * w3(x)), each op its own kernel. Backward: MulBackward's
// two products, SiLU's backward, and the two input gradients of the norm's
// output (from w1 and w3) summed by autograd.
void ModuleListBuilder::eager_swiglu(ModuleWork& mlp) const {
  const LayerShapes& x = x_;
  const double T = T_, h = h_, f = x.ffn;
  mlp.forward.push_back(elementwise("mlp_norm", x, 2 * T * h));
  mlp.forward.push_back(gemm("w1", x, T, f, h));
  mlp.forward.push_back(elementwise("silu", x, 2 * T * f));
  mlp.forward.push_back(gemm("w3", x, T, f, h));
  mlp.forward.push_back(elementwise("swiglu.mul", x, 3 * T * f));
  mlp.forward.push_back(gemm("w2", x, T, h, f));
  mlp.forward.push_back(residual_add("residual", x, T * h));
  mlp.backward.push_back(residual_add("residual.backward", x, T * h));
  mlp.backward.push_back(gemm("w2.dgrad", x, T, f, h));
  mlp.backward.push_back(weight_half(gemm("w2.wgrad", x, f, h, T)));
  mlp.backward.push_back(elementwise("swiglu.mul.backward.gate", x, 3 * T * f));
  mlp.backward.push_back(elementwise("swiglu.mul.backward.up", x, 3 * T * f));
  mlp.backward.push_back(gemm("w3.dgrad", x, T, h, f));
  mlp.backward.push_back(weight_half(gemm("w3.wgrad", x, h, f, T)));
  mlp.backward.push_back(elementwise("silu.backward", x, 3 * T * f));
  mlp.backward.push_back(gemm("w1.dgrad", x, T, h, f));
  mlp.backward.push_back(weight_half(gemm("w1.wgrad", x, h, f, T)));
  mlp.backward.push_back(elementwise("mlp_norm.output_gradient.add", x, 3 * T * h));
  mlp.backward.push_back(elementwise("mlp_norm.backward", x, 3 * T * h));
}

// torchtitan's apply_rotary_emb on one tensor of `width` values per token:
// x.float() (read e, write 4 bytes a value), the complex64 product with the
// frequencies (4 in, 4 out; the s x head_dim/2 frequencies, broadcast over
// the batch and heads, are not counted), .type_as(x) back (4 in, e out).
// Its backward is the same three passes: the gradient to fp32, the product
// with the conjugate frequencies, back to the training dtype.
void ModuleListBuilder::eager_rotary(std::vector<KernelSpec>& list, const std::string& name, double width) const {
  const double values = T_ * width, e = x_.e;
  list.push_back(memory_pass(name + ".upcast", x_.dtype, values, e + kFloat32Bytes));
  list.push_back(memory_pass(name + ".multiply", x_.dtype, values, 2 * kFloat32Bytes));
  list.push_back(memory_pass(name + ".downcast", x_.dtype, values, kFloat32Bytes + e));
}

// torchtitan's Attention.forward up to the attention core: wq, wk and wv as
// three GEMMs, the rotary embedding of queries and keys, and repeat_kv,
// whose expand + reshape copies keys and values to every query head when
// there are fewer key/value heads (the transposes SDPA takes are views).
void ModuleListBuilder::eager_projections(std::vector<KernelSpec>& forward, bool rotary) const {
  const LayerShapes& x = x_;
  forward.push_back(gemm("wq", x, T_, x.query, h_));
  forward.push_back(gemm("wk", x, T_, x.kv, h_));
  forward.push_back(gemm("wv", x, T_, x.value, h_));
  if (rotary) {
    eager_rotary(forward, "rotary.q", x.query);
    eager_rotary(forward, "rotary.k", x.kv);
  }
  if (x.kv < x.query) {
    forward.push_back(elementwise("repeat_kv.k", x, T_ * (x.kv + x.query)));
    forward.push_back(elementwise("repeat_kv.v", x, T_ * (x.value + x.context)));
  }
}

// The backward of eager_projections: repeat_kv's gradient summed over the
// copies of each head, the rotary backward, and each projection's GEMMs, the
// three input gradients of the norm's output summed by autograd (two adds).
void ModuleListBuilder::eager_projections_backward(std::vector<KernelSpec>& backward, bool rotary) const {
  const LayerShapes& x = x_;
  if (x.kv < x.query) {
    backward.push_back(elementwise("repeat_kv.v.backward", x, T_ * (x.context + x.value)));
    backward.push_back(elementwise("repeat_kv.k.backward", x, T_ * (x.query + x.kv)));
  }
  if (rotary) {
    eager_rotary(backward, "rotary.k.backward", x.kv);
    eager_rotary(backward, "rotary.q.backward", x.query);
  }
  const auto projection_backward = [&](const std::string& name, double width) {
    backward.push_back(gemm(name + ".dgrad", x, T_, h_, width));
    backward.push_back(weight_half(gemm(name + ".wgrad", x, h_, width, T_)));
  };
  const KernelSpec add = elementwise("attention_norm.output_gradient.add", x, 3 * T_ * h_);
  projection_backward("wv", x.value);
  projection_backward("wk", x.kv);
  backward.push_back(add);
  projection_backward("wq", x.query);
  backward.push_back(add);
}

// torchtitan's "ops" policy (training.h): the layer's forward kernels rerun
// in backward, but the GEMMs it keeps (the odd ones in forward order) and
// the fused attention, before the backward of the layer's last module.
void ModuleListBuilder::rerun_unkept_ops(ModuleWork& attention, std::vector<ModuleWork>& feed_forward,
                                         double layer_activations) const {
  ModuleWork& first_backward = feed_forward.back();
  int gemms = 0;
  const auto rerun_from = [&](const std::vector<KernelSpec>& forward) {
    for (const KernelSpec& spec : forward) {
      if (spec.call || spec.kernel == KernelClass::attention) continue;
      if (spec.kernel == KernelClass::gemm && ++gemms % 2 == 1) continue;
      KernelSpec again = spec;
      again.waits_for_call = 0;
      first_backward.recompute.push_back(std::move(again));
    }
  };
  rerun_from(attention.forward);
  for (const ModuleWork& work : feed_forward) rerun_from(work.forward);
  attention.activation_bytes = T_ * ops_policy_kept_bytes_per_token(model_, training_, parallel_, kernels_);
  first_backward.recompute_working_bytes = layer_activations;
}

// Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, section 2.1):
// queries through a rank-q_lora bottleneck with its norm (or one
// projection), keys and values up-projected from a normed rank-kv_lora
// latent, which the same down-projection extends by one rotary key for all
// heads; rotary embedding on the queries' and that key's rotary parts, then
// each head's query and key concatenated from their two parts. Under tensor
// parallelism (transformer_kernels.h): down-projections and latent norms on
// this GPU's local tokens, each latent and the rotary key gathered along the
// sequence, the up-projections column-parallel over this GPU's heads.
// Returns where the up-projections begin (mla_up_proj reruns from there).
std::size_t ModuleListBuilder::latent_projections(std::vector<KernelSpec>& forward) const {
  const LayerShapes& x = x_;
  const auto [q_lora, kv_lora, rope, heads_rotary, kv_up] = latent_widths();
  // A linear every GPU of the group holds whole (Transformer Engine's
  // "duplicated" mode), on this GPU's tokens.
  const auto duplicated = [&](const std::string& name, double n, double k) {
    return gemm(name, x, local_tokens_, n, k);
  };
  // A column-parallel up-projection on its latent gathered along the sequence.
  const auto up_projection = [&](const std::string& name, double n, double k) {
    linear_.gather_input(forward, name + ".input", k);
    forward.push_back(waiting_for_call(gemm(name, x, T_, n, k), after_gather_));
  };
  if (q_lora > 0) forward.push_back(duplicated("q_down", q_lora, h_));
  forward.push_back(duplicated("kv_down", kv_lora + rope, h_));
  linear_.gather_input(forward, "k_rope", rope);
  forward.push_back(waiting_for_call(elementwise("kv_norm", x, 2 * local_tokens_ * kv_lora), after_gather_));
  if (q_lora > 0) {
    forward.push_back(elementwise("q_norm", x, 2 * local_tokens_ * q_lora));
  }
  const std::size_t up_begin = forward.size();
  if (q_lora > 0) {
    up_projection("q_up", x.query, q_lora);
  } else {
    up_projection("q_proj", x.query, h_);
  }
  up_projection("kv_up", kv_up, kv_lora);
  forward.push_back(elementwise("rotary", x, 2 * T_ * (heads_rotary + rope)));
  forward.push_back(elementwise("qk_concat", x, 2 * T_ * (x.query + x.kv)));
  return up_begin;
}

// The backward of the rotary key's gather is a reduce-scatter, which sums
// the partial gradients each GPU's heads make of it.
void ModuleListBuilder::latent_projections_backward(std::vector<KernelSpec>& backward) const {
  const LayerShapes& x = x_;
  const auto [q_lora, kv_lora, rope, heads_rotary, kv_up] = latent_widths();
  // A duplicated linear's backward (latent_projections).
  const auto duplicated_backward = [&](const std::string& name, double in, double out, int waits_for_call) {
    backward.push_back(waiting_for_call(gemm(name + ".dgrad", x, local_tokens_, in, out), waits_for_call));
    backward.push_back(weight_half(gemm(name + ".wgrad", x, in, out, local_tokens_)));
  };
  backward.push_back(elementwise("qk_concat.backward", x, 2 * T_ * (x.query + x.kv)));
  backward.push_back(elementwise("rotary.backward", x, 2 * T_ * (heads_rotary + rope)));
  linear_.column_backward(backward, "kv_up", kv_lora, kv_up);
  backward.push_back(waiting_for_call(elementwise("kv_norm.backward", x, 3 * local_tokens_ * kv_lora), after_combine_));
  linear_.combine(backward, "k_rope.gradient", rope);
  duplicated_backward("kv_down", h_, kv_lora + rope, after_combine_);
  if (q_lora > 0) {
    linear_.column_backward(backward, "q_up", q_lora, x.query);
    backward.push_back(waiting_for_call(elementwise("q_norm.backward", x, 3 * local_tokens_ * q_lora), after_combine_));
    duplicated_backward("q_down", h_, q_lora, 0);
  } else {
    linear_.column_backward(backward, "q_proj", h_, x.query);
  }
}

void ModuleListBuilder::attention(ModuleWork& attention, const std::vector<KernelSpec>& core_forward,
                                  const std::vector<KernelSpec>& core_backward, std::size_t& up_begin,
                                  std::size_t& up_end) const {
  const LayerShapes& x = x_;
  attention.forward.push_back(elementwise("attention_norm", x, 2 * local_tokens_ * h_));
  // Learned positions were added to the embedding; only rotary ones touch Q and K.
  const bool rotary = model_.positions == PositionKind::rotary;
  if (model_.has_mla) {
    up_begin = latent_projections(attention.forward);
    up_end = attention.forward.size();
  } else if (eager_) {
    eager_projections(attention.forward, rotary);
  } else {
    linear_.gathered_gemm(attention.forward, "qkv.input", "qkv", x.query + 2 * x.kv, h_);
    if (rotary) attention.forward.push_back(elementwise("rotary", x, 2 * T_ * (x.query + x.kv)));
  }
  exchange(attention.forward, "qkv", x.query + x.kv + x.value);
  const std::size_t core_at = attention.forward.size();
  attention.forward.insert(attention.forward.end(), core_forward.begin(), core_forward.end());
  then_wait(attention.forward, core_at);
  exchange(attention.forward, "context", x.context);
  const std::size_t out_proj_at = attention.forward.size();
  linear_.combined_gemm(attention.forward, "out_proj", x.context);
  then_wait(attention.forward, out_proj_at);
  attention.forward.push_back(waiting_for_call(residual_add("residual", x, local_tokens_ * h_), after_combine_));
  attention.backward.push_back(residual_add("residual.backward", x, local_tokens_ * h_));
  linear_.row_backward(attention.backward, "out_proj", x.context, h_);
  exchange(attention.backward, "context.backward", x.context);
  const std::size_t core_backward_at = attention.backward.size();
  attention.backward.insert(attention.backward.end(), core_backward.begin(), core_backward.end());
  then_wait(attention.backward, core_backward_at);
  exchange(attention.backward, "qkv.backward", x.query + x.kv + x.value);
  const std::size_t after_exchange = attention.backward.size();
  if (model_.has_mla) {
    latent_projections_backward(attention.backward);
  } else if (eager_) {
    eager_projections_backward(attention.backward, rotary);
  } else {
    if (rotary) attention.backward.push_back(elementwise("rotary.backward", x, 2 * T_ * (x.query + x.kv)));
    linear_.column_backward(attention.backward, "qkv", h_, x.query + 2 * x.kv);
  }
  then_wait(attention.backward, after_exchange);
  attention.backward.push_back(
      waiting_for_call(elementwise("attention_norm.backward", x, 3 * local_tokens_ * h_), after_combine_));
}

// Each module reruns its parts (training.h) before its backward, in forward
// order; what they make lives until that backward has run.
void ModuleListBuilder::recompute_selectively(int layer, ModuleWork& attention, std::vector<ModuleWork>& feed_forward,
                                              const std::vector<KernelSpec>& core_forward,
                                              const MoeForwardParts& moe_parts, std::size_t up_begin,
                                              std::size_t up_end) const {
  const auto rebuild = [&](ModuleWork& work, bool RecomputeModules::*part, std::size_t begin, std::size_t end) {
    if (!training_.recomputes(part) || begin == end) return;
    const std::vector<KernelSpec> again = rerun(work.forward, begin, end);
    work.recompute.insert(work.recompute.end(), again.begin(), again.end());
  };
  if (model_.has_mla) rebuild(attention, &RecomputeModules::norms, 0, 1);
  rebuild(attention, &RecomputeModules::mla_up_projections, up_begin, up_end);
  if (training_.recomputes(&RecomputeModules::core_attention)) {
    attention.recompute.insert(attention.recompute.end(), core_forward.begin(), core_forward.end());
  }
  const bool moe = model_.moe_layer(layer);
  ModuleWork& block = feed_forward.front();
  if (moe) {
    rebuild(block, &RecomputeModules::norms, moe_parts.norm, moe_parts.norm + 1);
    rebuild(block, &RecomputeModules::shared_experts, moe_parts.shared_begin, moe_parts.shared_end);
    rebuild(feed_forward.back(), &RecomputeModules::moe_activation, moe_parts.activation, moe_parts.activation + 1);
  } else {
    // The dense MLP but its norm and residual add.
    rebuild(block, &RecomputeModules::dense_mlp, 1, block.forward.size() - 1);
  }
  const RecomputedBytes rebuilt = recomputed_bytes_per_token(model_, training_, layer, parallel_, experts_);
  attention.recompute_working_bytes = T_ * rebuilt.attention;
  block.recompute_working_bytes = T_ * rebuilt.mlp;
  if (moe) feed_forward.back().recompute_working_bytes = T_ * rebuilt.experts;
}

void ModuleListBuilder::add_layer(int layer, std::vector<ModuleWork>& modules) {
  const double layer_activations =
      T_ * layer_activation_bytes_per_token(model_, training_, layer, parallel_, experts_, kernels_);
  // An MTP depth: its input module, then a layer as any other.
  std::vector<KernelSpec> checkpointed_input;
  if (model_.mtp_layer(layer)) {
    ModuleWork input = next_module();
    checkpointed_input = mtp_input(model_, x_, parallel_, linear_, local_tokens_, input);
    const double kept = training_.rebuilds_layer(layer)
                            ? layer_input_bytes_per_token(model_, training_, parallel_)
                            : mtp_input_activation_bytes_per_token(model_, training_, parallel_);
    input.activation_bytes = T_ * kept;
    modules.push_back(std::move(input));
  }

  ModuleWork attention_module = next_module();
  std::vector<KernelSpec> core_forward, core_backward;
  attention_core(core_, training_, core_forward, core_backward);
  if (parallel_.context > 1) {
    context_parallel_ring(parallel_.context, x_.e * T_ * (x_.kv + x_.value), core_forward, core_backward);
  }
  std::size_t up_begin = 0, up_end = 0;
  attention(attention_module, core_forward, core_backward, up_begin, up_end);

  // The MLP block: one module, or a MoE layer's two (its routed experts last).
  std::vector<ModuleWork> feed_forward;
  MoeForwardParts moe_parts;
  if (model_.moe_layer(layer)) {
    feed_forward.push_back(next_module());
    feed_forward.push_back(next_module());
    moe_parts = moe_block(model_, x_, parallel_, linear_, experts_, feed_forward[0], feed_forward[1]);
  } else {
    feed_forward.push_back(next_module());
    dense_mlp(feed_forward[0]);
  }
  switch (training_.recompute) {
    case Recompute::none: attention_module.activation_bytes = layer_activations; break;
    case Recompute::selective:
      attention_module.activation_bytes = layer_activations;
      recompute_selectively(layer, attention_module, feed_forward, core_forward, moe_parts, up_begin, up_end);
      break;
    case Recompute::ops: rerun_unkept_ops(attention_module, feed_forward, layer_activations); break;
    case Recompute::full: {
      if (!training_.rebuilds_layer(layer)) {  // between the layers a recompute_interval rebuilds
        attention_module.activation_bytes = layer_activations;
        break;
      }
      // Only the layer input is kept; the backward rebuilds the whole layer
      // before the backward of its last module, the first of the layer (an
      // MTP depth's from its projection on).
      attention_module.activation_bytes = T_ * layer_input_bytes_per_token(model_, training_, parallel_);
      ModuleWork& first_backward = feed_forward.back();
      first_backward.recompute = checkpointed_input;
      first_backward.recompute.insert(first_backward.recompute.end(), attention_module.forward.begin(),
                                      attention_module.forward.end());
      for (const ModuleWork& work : feed_forward) {
        first_backward.recompute.insert(first_backward.recompute.end(), work.forward.begin(), work.forward.end());
      }
      first_backward.recompute_working_bytes =
          layer_activations +
          (checkpointed_input.empty() ? 0.0 : T_ * mtp_input_activation_bytes_per_token(model_, training_, parallel_));
      break;
    }
  }
  modules.push_back(std::move(attention_module));
  for (ModuleWork& work : feed_forward) modules.push_back(std::move(work));
}

// The head: a prediction from the last layer's hidden states, then one from
// each MTP depth's, through its own final norm and the shared LM head.
ModuleWork ModuleListBuilder::head() {
  const LayerShapes& x = x_;
  ModuleWork head = next_module();
  for (int depth = -1; depth < model_.mtp_layers; ++depth) {
    const std::string prefix = depth < 0 ? "" : "mtp" + std::to_string(depth) + ".";
    head.forward.push_back(elementwise(prefix + "final_norm", x, 2 * local_tokens_ * h_));
    linear_.gather_input(head.forward, prefix + "lm_head.input", h_);
    head.forward.push_back(waiting_for_call(gemm(prefix + "lm_head", x, T_, x.vocab, h_), after_gather_));
    // Cross-entropy reads the logits and keeps their fp32 upcast for backward;
    // over a vocabulary split t ways it all-reduces three fp32 values per token.
    // Eager cross_entropy(pred.float()): the upcast, then log_softmax (read,
    // write) and the negative log-likelihood of the targets (T values).
    const double logits = T_ * x.vocab;
    if (eager_) {
      head.forward.push_back(memory_pass(prefix + "loss.upcast", Dtype::fp32, logits, x.e + kFloat32Bytes));
      head.forward.push_back(memory_pass(prefix + "loss.log_softmax", Dtype::fp32, logits, 2 * kFloat32Bytes));
    } else {
      KernelSpec loss = elementwise(prefix + "loss", x, logits);
      loss.hbm_bytes = (x.e + kFloat32Bytes) * logits;
      head.forward.push_back(loss);
    }
    if (parallel_.tensor > 1) {
      for (const char* value : {"loss.logit_max", "loss.target_logit", "loss.exp_sum"}) {
        head.forward.push_back(group_call(prefix + value + ".all_reduce", CallGroup::tensor_parallel,
                                          CollectiveOp::all_reduce, 4 * T_));
      }
    }
    // Backward order: loss, then the LM head's GEMMs, then the final norm.
    if (eager_) {
      // nll_loss_backward writes a zeroed gradient of the log-probabilities
      // with the targets' entries set; log_softmax_backward reads it and the
      // log-probabilities and writes the logits' gradient, which the
      // upcast's backward casts back to the training dtype.
      head.backward.push_back(memory_pass(prefix + "loss.backward.nll", Dtype::fp32, logits, kFloat32Bytes));
      head.backward.push_back(
          memory_pass(prefix + "loss.backward.log_softmax", Dtype::fp32, logits, 3 * kFloat32Bytes));
      head.backward.push_back(memory_pass(prefix + "loss.backward.downcast", Dtype::fp32, logits, kFloat32Bytes + x.e));
    } else {
      KernelSpec loss_backward = elementwise(prefix + "loss.backward", x, logits);
      loss_backward.hbm_bytes = (kFloat32Bytes + x.e) * logits;
      head.backward.push_back(loss_backward);
    }
    linear_.column_backward(head.backward, prefix + "lm_head", h_, x.vocab);
    head.backward.push_back(
        waiting_for_call(elementwise(prefix + "final_norm.backward", x, 3 * local_tokens_ * h_), after_combine_));
  }
  head.activation_bytes = T_ * head_activation_bytes_per_token(model_, training_, parallel_);
  const LossWorkingBytes loss_working = head_working_bytes_per_token(model_, training_, parallel_, kernels_);
  for (double bytes : loss_working.forward) head.forward_working.push_back(T_ * bytes);
  for (double bytes : loss_working.backward) head.backward_working.push_back(T_ * bytes);
  return head;
}

}  // namespace

std::vector<ModuleWork> transformer_modules(const ModelSpec& model, const TrainingConfig& training,
                                            const ModelParallelism& parallel, const ExpertParallelism& experts,
                                            KernelImplementation kernels) {
  require_model_parallel_split(model, training, parallel);
  require_kernel_implementation(model, training, parallel, kernels);
  // Megatron-Core raises both.
  if (training.recomputes(&RecomputeModules::mla_up_projections) && !model.has_mla) {
    throw InputError(model.name + ": selective recompute of mla_up_proj needs multi-head latent attention");
  }
  if (training.recomputes(&RecomputeModules::shared_experts) && experts.shared_expert_overlap) {
    throw InputError(model.name + ": selective recompute of shared_experts cannot run with the shared experts "
                     "overlapped (--moe-shared-expert-overlap)");
  }
  return ModuleListBuilder(model, training, parallel, experts, kernels).build();
}

}  // namespace shardsim::workloads
