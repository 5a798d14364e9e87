// ModelSpec: a decoder-only transformer, as much of it as a training step
// needs (shapes, hence parameters, FLOPs, activations).
//
// Files: the strict shardsim format (workloads/models/*.json, every key
// required, `moe` and `mla` optional, head_dim too when `mla` sizes the
// heads) or a Hugging Face config.json
// (import/hf_config.h), which load_model() (import/model_file.h) tells apart
// by its "model_type".
//
//   {"name": "llama-7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32,
//    "head_dim": 128, "ffn_hidden": 11008, "vocab": 32000, "max_positions": 2048,
//    "mlp": "swiglu", "norm": "rmsnorm", "positions": "rotary",
//    "linear_biases": false, "tied_embeddings": false, "sources": ["..."]}
//
// mlp: "swiglu" (gate, up and down projections; LLaMA) or "gelu" (up and
// down; GPT). norm: "rmsnorm" (a weight) or "layernorm" (weight and bias).
// positions: "rotary" (no parameters) or "learned" (max_positions x hidden).
// mtp_layers (optional, 0 if absent): multi-token prediction depths trained
// beside the model (DeepSeek-V3, arXiv:2412.19437 section 2.2: one). Depth k
// embeds the tokens k ahead with the model's embedding, normalises them and
// the previous depth's hidden states (enorm, hnorm), projects the two
// concatenated back to the hidden size (eh_proj, 2h x h), runs one layer of
// the last layer's kind, and predicts through its own final norm and the
// model's LM head, with a loss of its own (Megatron-Core's
// MultiTokenPredictionLayer). A Hugging Face config's num_nextn_predict_layers
// is not read: transformers builds no MTP layers and drops their weights.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::workloads {

// Plausibility bounds of a model's sizes (validate_model; --scale says the
// same): forty times the widest published dense model's hidden size
// (25,600, the 1T GPT of Narayanan et al. 2021) and 64 times the largest
// vocabulary in use (256K). Beyond them a step's time overflows the
// simulated clock before any real model is near.
inline constexpr std::int64_t kMaxModelWidth = std::int64_t{1} << 20;  // hidden and FFN sizes
inline constexpr std::int64_t kMaxVocabulary = std::int64_t{1} << 24;

enum class MlpKind { gelu, swiglu };
enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { rotary, learned };

// Mixture of experts: `experts` routed experts of `expert_ffn_hidden`, of
// which each token uses `experts_per_token`, plus always-active shared
// experts; the first `first_dense_layers` layers keep a dense MLP.
struct MoeSpec {
  int experts = 0;
  int experts_per_token = 0;
  std::int64_t expert_ffn_hidden = 0;
  int shared_experts = 0;
  std::int64_t shared_expert_ffn_hidden = 0;
  int first_dense_layers = 0;
};

// Multi-head latent attention (DeepSeek): queries and keys/values go through
// low-rank projections; q_lora_rank 0 means queries are projected directly.
struct MlaSpec {
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;
  std::int64_t qk_nope_head_dim = 0;
  std::int64_t qk_rope_head_dim = 0;
  std::int64_t v_head_dim = 0;
};

struct ModelSpec {
  std::string name;
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t ffn_hidden = 0;
  std::int64_t vocab = 0;
  std::int64_t max_positions = 0;
  MlpKind mlp = MlpKind::swiglu;
  NormKind norm = NormKind::rmsnorm;
  PositionKind positions = PositionKind::rotary;
  bool linear_biases = false;
  bool tied_embeddings = false;
  bool has_moe = false;
  MoeSpec moe;
  bool has_mla = false;
  MlaSpec mla;
  int mtp_layers = 0;
  std::vector<std::string> sources;

  // Layers are numbered 0 .. layers - 1, then the MTP depths' layers
  // layers .. layers + mtp_layers - 1; the head comes after them.
  int head_layer() const { return layers + mtp_layers; }
  bool mtp_layer(int layer) const { return layer >= layers && layer < head_layer(); }
  // An MTP depth's layer is of the last layer's kind.
  bool moe_layer(int layer) const { return has_moe && std::min(layer, layers - 1) >= moe.first_dense_layers; }
  int routed_experts() const { return has_moe ? moe.experts : 0; }  // per MoE layer; 0 for a dense model
};

// Parameter counts, in parameters (not bytes).
struct ParameterCount {
  std::int64_t embedding = 0;     // token (and learned position) embeddings
  std::int64_t lm_head = 0;       // 0 when tied to the embedding
  std::int64_t final_norm = 0;
  std::int64_t attention = 0;     // all layers
  std::int64_t mlp = 0;           // all layers: dense MLPs, experts, routers
  std::int64_t layer_norms = 0;   // all layers
  // The MTP depths' own parameters (their layers, projections and norms; the
  // embedding and LM head they share are counted above).
  std::int64_t mtp = 0;
  std::int64_t total() const { return embedding + lm_head + final_norm + attention + mlp + layer_norms + mtp; }
};

std::int64_t attention_parameters(const ModelSpec& model);       // one layer
std::int64_t mlp_parameters(const ModelSpec& model, int layer);  // one layer, routed experts included
std::int64_t norm_parameters(const ModelSpec& model);            // one norm
ParameterCount count_parameters(const ModelSpec& model);
// Parameters of the routed experts, all layers (0 for a dense model).
double routed_expert_parameters(const ModelSpec& model);

// A module: the unit whose parameters are gathered and freed together under
// parameter sharding: the embedding, each layer's attention block (its norm
// included) and MLP block (likewise; a MoE layer's norm, router and shared
// experts, followed by a module of its routed experts), each MTP depth's
// input (enorm, hnorm, eh_proj; it borrows the embedding) and layer, and the
// head (final norm, LM head unless tied, each MTP depth's final norm).
struct ModuleParameters {
  // "embedding", "layer3.attention", "layer3.mlp", "layer3.experts", "mtp0.input", "mtp0.attention", "head"
  std::string name;
  int layer = -1;  // -1 for the embedding, ModelSpec::head_layer() for the head
  // A MoE layer's routed experts: split over the expert-parallel group, their
  // states sharded over the expert-data-parallel group (plan.h).
  bool routed_experts = false;
  double parameters = 0;
  // Elements of each parameter tensor, in the order the forward uses them:
  // the unit DeepSpeed hooks, prefetches and keeps persistent.
  std::vector<double> parameter_tensors;
  // Tensors another module owns and this one uses: the head's tied
  // embedding, an MTP depth's embedding. Sharded, they are gathered again for
  // this module, but stored, reduced and updated once, with their owner.
  std::vector<double> borrowed_tensors;
};
// With expert parallelism over `expert_parallel` ranks, a routed-experts
// module holds one rank's experts / expert_parallel of them.
std::vector<ModuleParameters> model_modules(const ModelSpec& model, int expert_parallel = 1);

// Checks shapes (positive sizes, heads dividing hidden where head_dim is not
// given, kv_heads dividing heads, MoE fields consistent); throws InputError
// naming `file` and the field.
void validate_model(const ModelSpec& model, const std::string& file);

ModelSpec parse_model_spec(const nlohmann::json& document, const std::string& file);

}  // namespace shardsim::workloads
