#include "workloads/inputs/model.h"

#include "topology/base/json_input.h"

#include <stdexcept>

namespace shardsim::workloads {

namespace {

using Tensors = std::vector<std::int64_t>;

std::int64_t sum(const Tensors& tensors) {
  std::int64_t total = 0;
  for (std::int64_t t : tensors) total += t;
  return total;
}

void append(Tensors& to, const Tensors& more) { to.insert(to.end(), more.begin(), more.end()); }

Tensors norm_tensors(const ModelSpec& model) {
  return model.norm == NormKind::layernorm ? Tensors{model.hidden, model.hidden} : Tensors{model.hidden};
}

Tensors attention_tensors(const ModelSpec& model) {
  const std::int64_t h = model.hidden;
  if (model.has_mla) {
    const MlaSpec& m = model.mla;
    const std::int64_t qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
    // Queries through a rank-q_lora bottleneck (with its norm), or directly.
    Tensors tensors = m.q_lora_rank > 0 ? Tensors{h * m.q_lora_rank, m.q_lora_rank, m.q_lora_rank * model.heads * qk_head}
                                        : Tensors{h * model.heads * qk_head};
    // Keys and values from a shared rank-kv_lora latent (with its norm) plus a
    // decoupled rotary key shared by the heads.
    append(tensors, {h * (m.kv_lora_rank + m.qk_rope_head_dim), m.kv_lora_rank,
                     m.kv_lora_rank * model.heads * (m.qk_nope_head_dim + m.v_head_dim), model.heads * m.v_head_dim * h});
    return tensors;
  }
  const std::int64_t q = model.heads * model.head_dim;
  const std::int64_t kv = model.kv_heads * model.head_dim;
  Tensors tensors = {h * q, h * kv, h * kv};
  if (model.linear_biases) append(tensors, {q, kv, kv});
  tensors.push_back(q * h);
  if (model.linear_biases) tensors.push_back(h);
  return tensors;
}

// Gate (SwiGLU), up and down projections, with their biases.
Tensors ffn_tensors(const ModelSpec& model, std::int64_t ffn) {
  const std::int64_t h = model.hidden;
  const bool swiglu = model.mlp == MlpKind::swiglu;
  Tensors tensors = swiglu ? Tensors{h * ffn, h * ffn} : Tensors{h * ffn};
  if (model.linear_biases) tensors.insert(tensors.end(), swiglu ? 2 : 1, ffn);
  tensors.push_back(ffn * h);
  if (model.linear_biases) tensors.push_back(h);
  return tensors;
}

// A MoE layer's MLP block without its routed experts: router and shared experts.
Tensors dense_moe_tensors(const ModelSpec& model) {
  const MoeSpec& moe = model.moe;
  Tensors tensors = {model.hidden * moe.experts};  // router
  for (int expert = 0; expert < moe.shared_experts; ++expert) {
    append(tensors, ffn_tensors(model, moe.shared_expert_ffn_hidden));
  }
  return tensors;
}

Tensors routed_expert_tensors(const ModelSpec& model, int experts) {
  Tensors tensors;
  for (int expert = 0; expert < experts; ++expert) append(tensors, ffn_tensors(model, model.moe.expert_ffn_hidden));
  return tensors;
}

Tensors mlp_tensors(const ModelSpec& model, int layer) {
  if (!model.moe_layer(layer)) return ffn_tensors(model, model.ffn_hidden);
  Tensors tensors = dense_moe_tensors(model);
  append(tensors, routed_expert_tensors(model, model.moe.experts));
  return tensors;
}

Tensors embedding_tensors(const ModelSpec& model) {
  Tensors tensors = {model.vocab * model.hidden};
  if (model.positions == PositionKind::learned) tensors.push_back(model.max_positions * model.hidden);
  return tensors;
}

// An MTP depth's input: enorm, hnorm, then eh_proj (2h in, h out).
Tensors mtp_input_tensors(const ModelSpec& model) {
  Tensors tensors = norm_tensors(model);
  append(tensors, norm_tensors(model));
  tensors.push_back(2 * model.hidden * model.hidden);
  return tensors;
}

ModuleParameters module(std::string name, int layer, const Tensors& tensors) {
  ModuleParameters m;
  m.name = std::move(name);
  m.layer = layer;
  m.parameters = static_cast<double>(sum(tensors));
  m.parameter_tensors.assign(tensors.begin(), tensors.end());
  return m;
}

}  // namespace

std::int64_t norm_parameters(const ModelSpec& model) { return sum(norm_tensors(model)); }
std::int64_t attention_parameters(const ModelSpec& model) { return sum(attention_tensors(model)); }
std::int64_t mlp_parameters(const ModelSpec& model, int layer) { return sum(mlp_tensors(model, layer)); }

std::vector<ModuleParameters> model_modules(const ModelSpec& model, int expert_parallel) {
  if (expert_parallel < 1 || (model.has_moe && model.moe.experts % expert_parallel != 0)) {
    throw std::logic_error(model.name + ": expert parallelism " + std::to_string(expert_parallel) +
                           " does not divide the experts (resolve_expert_factors checks plans)");
  }
  std::vector<ModuleParameters> modules;
  const Tensors embedding = embedding_tensors(model);
  modules.push_back(module("embedding", -1, embedding));
  for (int layer = 0; layer < model.head_layer(); ++layer) {
    const bool mtp = model.mtp_layer(layer);
    const std::string prefix =
        mtp ? "mtp" + std::to_string(layer - model.layers) + "." : "layer" + std::to_string(layer) + ".";
    if (mtp) {
      modules.push_back(module(prefix + "input", layer, mtp_input_tensors(model)));
      modules.back().borrowed_tensors.assign(embedding.begin(), embedding.end());
    }
    Tensors attention = norm_tensors(model), mlp = norm_tensors(model);
    append(attention, attention_tensors(model));
    const bool moe = model.moe_layer(layer);
    append(mlp, moe ? dense_moe_tensors(model) : mlp_tensors(model, layer));
    modules.push_back(module(prefix + "attention", layer, attention));
    modules.push_back(module(prefix + "mlp", layer, mlp));
    if (moe) {
      modules.push_back(module(prefix + "experts", layer, routed_expert_tensors(model, model.moe.experts / expert_parallel)));
      modules.back().routed_experts = true;
    }
  }
  Tensors head = norm_tensors(model);
  if (!model.tied_embeddings) head.push_back(model.vocab * model.hidden);
  for (int depth = 0; depth < model.mtp_layers; ++depth) append(head, norm_tensors(model));
  modules.push_back(module("head", model.head_layer(), head));
  if (model.tied_embeddings) modules.back().borrowed_tensors.push_back(static_cast<double>(model.vocab * model.hidden));
  return modules;
}

ParameterCount count_parameters(const ModelSpec& model) {
  ParameterCount count;
  count.embedding = model.vocab * model.hidden;
  if (model.positions == PositionKind::learned) count.embedding += model.max_positions * model.hidden;
  count.lm_head = model.tied_embeddings ? 0 : model.vocab * model.hidden;
  count.final_norm = norm_parameters(model);
  for (int layer = 0; layer < model.layers; ++layer) {
    count.attention += attention_parameters(model);
    count.mlp += mlp_parameters(model, layer);
    count.layer_norms += 2 * norm_parameters(model);
  }
  for (int layer = model.layers; layer < model.head_layer(); ++layer) {
    count.mtp += sum(mtp_input_tensors(model)) + attention_parameters(model) + mlp_parameters(model, layer) +
                 3 * norm_parameters(model);  // the layer's two and the depth's final norm
  }
  return count;
}

double routed_expert_parameters(const ModelSpec& model) {
  if (!model.has_moe) return 0;
  double moe_layers = 0;
  for (int layer = 0; layer < model.head_layer(); ++layer) moe_layers += model.moe_layer(layer) ? 1 : 0;
  return moe_layers * static_cast<double>(sum(routed_expert_tensors(model, model.moe.experts)));
}

void validate_model(const ModelSpec& model, const std::string& file) {
  auto fail = [&](const std::string& field, const std::string& what) { throw_input_error(file, field, what); };
  if (model.layers < 1) fail("layers", "a model needs at least one layer, got " + std::to_string(model.layers));
  if (model.hidden < 1) fail("hidden", "must be positive");
  if (model.hidden > kMaxModelWidth) fail("hidden", std::to_string(model.hidden) + " is implausibly large (at most 2^20)");
  if (model.ffn_hidden > kMaxModelWidth) {
    fail("ffn_hidden", std::to_string(model.ffn_hidden) + " is implausibly large (at most 2^20)");
  }
  if (model.vocab > kMaxVocabulary) fail("vocab", std::to_string(model.vocab) + " is implausibly large (at most 2^24)");
  if (model.heads < 1) fail("heads", "must be positive");
  if (model.kv_heads < 1 || model.heads % model.kv_heads != 0) {
    fail("kv_heads", "must divide heads (" + std::to_string(model.heads) + "), got " + std::to_string(model.kv_heads));
  }
  if (!model.has_mla && model.head_dim < 1) fail("head_dim", "must be positive");
  if (model.ffn_hidden < 1) fail("ffn_hidden", "must be positive");
  if (model.vocab < 1) fail("vocab", "must be positive");
  if (model.max_positions < 1) fail("max_positions", "must be positive");
  // DeepSeek-V3 trains one depth; more depths than layers is surely a typo.
  if (model.mtp_layers < 0 || model.mtp_layers > model.layers) {
    fail("mtp_layers", "must be between 0 and the number of layers (" + std::to_string(model.layers) + "), got " +
                           std::to_string(model.mtp_layers));
  }
  if (model.has_moe) {
    const MoeSpec& moe = model.moe;
    if (moe.experts < 1) fail("moe.experts", "must be positive");
    if (moe.experts_per_token < 1 || moe.experts_per_token > moe.experts) {
      fail("moe.experts_per_token", "must be between 1 and the number of experts (" + std::to_string(moe.experts) + ")");
    }
    if (moe.expert_ffn_hidden < 1) fail("moe.expert_ffn_hidden", "must be positive");
    if (moe.shared_experts > 0 && moe.shared_expert_ffn_hidden < 1) {
      fail("moe.shared_expert_ffn_hidden", "must be positive when there are shared experts");
    }
    if (moe.first_dense_layers > model.layers) fail("moe.first_dense_layers", "exceeds the number of layers");
  }
  if (model.has_mla && (model.mla.kv_lora_rank < 1 || model.mla.v_head_dim < 1 ||
                        model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim < 1)) {
    fail("mla", "kv_lora_rank, v_head_dim and the query/key head dims must be positive");
  }
}

namespace {

int positive_int(JsonObjectReader& reader, const std::string& key) {
  const auto value = reader.positive_integer(key);
  if (value > (1 << 30)) reader.fail(key, "is implausibly large");
  return static_cast<int>(value);
}

int non_negative_int(JsonObjectReader& reader, const std::string& key) {
  const auto value = reader.non_negative_integer(key);
  if (value > (1 << 30)) reader.fail(key, "is implausibly large");
  return static_cast<int>(value);
}

}  // namespace

ModelSpec parse_model_spec(const nlohmann::json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  ModelSpec model;
  model.name = reader.string("name");
  model.layers = positive_int(reader, "layers");
  model.hidden = reader.positive_integer("hidden");
  model.heads = positive_int(reader, "heads");
  model.kv_heads = positive_int(reader, "kv_heads");
  // Latent attention sizes its heads in `mla`; a head_dim beside it is unused.
  model.head_dim = reader.has("mla") && !reader.has("head_dim") ? 0 : reader.positive_integer("head_dim");
  model.ffn_hidden = reader.positive_integer("ffn_hidden");
  model.vocab = reader.positive_integer("vocab");
  model.max_positions = reader.positive_integer("max_positions");
  model.mlp = reader.choice("mlp", {"swiglu", "gelu"}) == "swiglu" ? MlpKind::swiglu : MlpKind::gelu;
  model.norm = reader.choice("norm", {"rmsnorm", "layernorm"}) == "rmsnorm" ? NormKind::rmsnorm : NormKind::layernorm;
  model.positions =
      reader.choice("positions", {"rotary", "learned"}) == "rotary" ? PositionKind::rotary : PositionKind::learned;
  model.linear_biases = reader.boolean("linear_biases");
  model.tied_embeddings = reader.boolean("tied_embeddings");
  if (reader.has("moe")) {
    auto moe = reader.object("moe");
    model.has_moe = true;
    model.moe.experts = positive_int(moe, "experts");
    model.moe.experts_per_token = positive_int(moe, "experts_per_token");
    model.moe.expert_ffn_hidden = moe.positive_integer("expert_ffn_hidden");
    model.moe.shared_experts = non_negative_int(moe, "shared_experts");
    model.moe.shared_expert_ffn_hidden = moe.non_negative_integer("shared_expert_ffn_hidden");
    model.moe.first_dense_layers = non_negative_int(moe, "first_dense_layers");
    moe.finish();
  }
  if (reader.has("mla")) {
    auto mla = reader.object("mla");
    model.has_mla = true;
    model.mla.q_lora_rank = mla.non_negative_integer("q_lora_rank");
    model.mla.kv_lora_rank = mla.positive_integer("kv_lora_rank");
    model.mla.qk_nope_head_dim = mla.positive_integer("qk_nope_head_dim");
    model.mla.qk_rope_head_dim = mla.positive_integer("qk_rope_head_dim");
    model.mla.v_head_dim = mla.positive_integer("v_head_dim");
    mla.finish();
  }
  if (reader.has("mtp_layers")) {
    model.mtp_layers = static_cast<int>(std::min<std::int64_t>(reader.non_negative_integer("mtp_layers"), 1 << 30));
  }
  model.sources = reader.string_list("sources");
  reader.finish();
  validate_model(model, file);
  return model;
}

}  // namespace shardsim::workloads
