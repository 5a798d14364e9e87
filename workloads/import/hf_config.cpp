#include "workloads/import/hf_config.h"

#include "topology/base/json_input.h"

#include <filesystem>
#include <optional>
#include <set>

namespace shardsim::workloads {

namespace {

// How a transformers family lays out its blocks.
struct Family {
  MlpKind mlp;
  NormKind norm;
  PositionKind positions;
  bool linear_biases;
  bool tied_embeddings_default;  // the family config class's default
  bool gpt2_names;               // n_embd, n_layer, ... instead of hidden_size, ...
};

std::optional<Family> family_of(const std::string& model_type) {
  static const std::set<std::string> llama_like = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                                                   "qwen3_moe", "deepseek_v2", "deepseek_v3", "olmo2"};
  if (llama_like.count(model_type)) return Family{MlpKind::swiglu, NormKind::rmsnorm, PositionKind::rotary, false, false, false};
  if (model_type == "gemma" || model_type == "gemma2") {
    return Family{MlpKind::swiglu, NormKind::rmsnorm, PositionKind::rotary, false, true, false};  // gated GELU: same shapes
  }
  if (model_type == "gpt2") return Family{MlpKind::gelu, NormKind::layernorm, PositionKind::learned, true, true, true};
  if (model_type == "gpt_neox") return Family{MlpKind::gelu, NormKind::layernorm, PositionKind::rotary, true, false, false};
  return std::nullopt;
}

// Reads optional fields of a foreign file, checking types and naming the field.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& document, std::string file) : document_(document), file_(std::move(file)) {}

  std::optional<std::int64_t> integer(const std::string& key) const {
    const auto it = document_.find(key);
    if (it == document_.end() || it->is_null()) return std::nullopt;
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0) {
      throw_input_error(file_, key, "must be a non-negative integer, got " + it->dump());
    }
    return it->get<std::int64_t>();
  }
  std::int64_t required(const std::string& key) const {
    const auto value = integer(key);
    if (!value) throw_input_error(file_, key, "missing required field");
    return *value;
  }
  std::int64_t first_of(const std::vector<std::string>& keys, std::int64_t fallback) const {
    for (const auto& key : keys) {
      if (const auto value = integer(key)) return *value;
    }
    return fallback;
  }
  std::optional<bool> boolean(const std::string& key) const {
    const auto it = document_.find(key);
    if (it == document_.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) throw_input_error(file_, key, "must be true or false, got " + it->dump());
    return it->get<bool>();
  }

 private:
  const nlohmann::json& document_;
  std::string file_;
};

int narrow(std::int64_t value, const std::string& file, const std::string& key) {
  if (value > (1 << 30)) throw_input_error(file, key, "is implausibly large");
  return static_cast<int>(value);
}

// A config.json says only its family; the folder it came in names the
// checkpoint ("Llama-2-7b-hf/llama"). A path without a named folder gives
// the family alone, whatever the working directory, so outputs do not
// depend on where shardsim ran.
std::string model_name_from_path(const std::string& file, const std::string& model_type) {
  const std::string folder = std::filesystem::path(file).parent_path().filename().string();
  return folder.empty() || folder == "." || folder == ".." ? model_type : folder + "/" + model_type;
}

}  // namespace

ModelSpec parse_hf_config(const nlohmann::json& document, const std::string& file) {
  if (!document.is_object()) throw_input_error(file, "(root)", "must be a JSON object");
  const auto type_it = document.find("model_type");
  if (type_it == document.end() || !type_it->is_string()) {
    std::string hint;
    const auto architectures = document.find("architectures");
    if (architectures != document.end() && architectures->is_array() && !architectures->empty() &&
        architectures->front().is_string()) {
      // e.g. LlamaForCausalLM: its family is the name before "For", lower-cased ("llama").
      hint = " (architectures names " + architectures->front().get<std::string>().substr(0, 80) +
             "; add its family, e.g. \"model_type\": \"llama\" for LlamaForCausalLM)";
    }
    throw_input_error(file, "model_type",
                      type_it == document.end() ? "missing: a transformers config.json names its model_type" + hint
                                                : "must be a string naming the model's family, e.g. \"llama\"");
  }
  const std::string model_type = type_it->get<std::string>();
  const auto family = family_of(model_type);
  if (!family) {
    throw_input_error(file, "model_type",
                      "'" + model_type + "' is not a family shardsim knows the block layout of (llama, mistral, "
                      "mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3, olmo2, gemma, gemma2, "
                      "gpt2, gpt_neox); write a shardsim model file instead");
  }
  const FieldReader fields(document, file);
  ModelSpec model;
  const auto name = document.find("_name_or_path");
  model.name = name != document.end() && name->is_string() && !name->get<std::string>().empty()
                   ? name->get<std::string>()
                   : model_name_from_path(file, model_type);
  model.mlp = family->mlp;
  model.norm = family->norm;
  model.positions = family->positions;
  model.linear_biases = family->linear_biases;

  const bool gpt2 = family->gpt2_names;
  model.hidden = fields.required(gpt2 ? "n_embd" : "hidden_size");
  model.layers = narrow(fields.required(gpt2 ? "n_layer" : "num_hidden_layers"), file, "num_hidden_layers");
  model.heads = narrow(fields.required(gpt2 ? "n_head" : "num_attention_heads"), file, "num_attention_heads");
  model.kv_heads = narrow(fields.first_of({"num_key_value_heads"}, model.heads), file, "num_key_value_heads");
  model.head_dim = fields.first_of({"head_dim"}, model.heads > 0 ? model.hidden / model.heads : 0);
  model.ffn_hidden = gpt2 ? fields.first_of({"n_inner"}, 4 * model.hidden) : fields.required("intermediate_size");
  model.vocab = fields.required("vocab_size");
  model.max_positions = fields.required(gpt2 ? "n_positions" : "max_position_embeddings");
  model.tied_embeddings = fields.boolean("tie_word_embeddings").value_or(family->tied_embeddings_default);

  const std::int64_t experts = fields.first_of({"num_local_experts", "num_experts", "n_routed_experts"}, 0);
  if (experts > 0) {
    model.has_moe = true;
    MoeSpec& moe = model.moe;
    moe.experts = narrow(experts, file, "num_experts");
    moe.experts_per_token = narrow(fields.required("num_experts_per_tok"), file, "num_experts_per_tok");
    moe.expert_ffn_hidden = fields.first_of({"moe_intermediate_size"}, model.ffn_hidden);
    if (const auto shared = fields.integer("n_shared_experts"); shared && *shared > 0) {
      moe.shared_experts = narrow(*shared, file, "n_shared_experts");  // DeepSeek: each of expert size
      moe.shared_expert_ffn_hidden = moe.expert_ffn_hidden;
    } else if (const auto size = fields.integer("shared_expert_intermediate_size"); size && *size > 0) {
      moe.shared_experts = 1;  // Qwen2-MoE: one shared expert of this size
      moe.shared_expert_ffn_hidden = *size;
    }
    moe.first_dense_layers = narrow(fields.first_of({"first_k_dense_replace"}, 0), file, "first_k_dense_replace");
  }
  if (const auto kv_lora = fields.integer("kv_lora_rank"); kv_lora && *kv_lora > 0) {
    model.has_mla = true;
    model.mla.kv_lora_rank = *kv_lora;
    model.mla.q_lora_rank = fields.first_of({"q_lora_rank"}, 0);
    model.mla.qk_nope_head_dim = fields.required("qk_nope_head_dim");
    model.mla.qk_rope_head_dim = fields.required("qk_rope_head_dim");
    model.mla.v_head_dim = fields.required("v_head_dim");
  }
  model.sources = {"imported from " + file + " (transformers config.json, model_type " + model_type + ")"};
  validate_model(model, file);
  return model;
}

}  // namespace shardsim::workloads
