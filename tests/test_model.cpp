#include "topology/base/json_input.h"
#include "workloads/import/hf_config.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/model.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

using namespace shardsim::workloads;
using shardsim::InputError;

namespace {

std::int64_t total(const std::string& preset) { return count_parameters(load_model(preset)).total(); }

// Fields as they appear in the released config.json files.
const nlohmann::json kLlama7bConfig = {
    {"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 4096},
    {"intermediate_size", 11008}, {"num_attention_heads", 32}, {"num_hidden_layers", 32},
    {"max_position_embeddings", 2048}, {"rms_norm_eps", 1e-6}, {"vocab_size", 32000},
    {"tie_word_embeddings", false}, {"torch_dtype", "float16"}, {"bos_token_id", 1}};

const nlohmann::json kMixtralConfig = {
    {"model_type", "mixtral"}, {"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_attention_heads", 32},
    {"num_key_value_heads", 8}, {"num_hidden_layers", 32}, {"max_position_embeddings", 32768}, {"vocab_size", 32000},
    {"num_local_experts", 8}, {"num_experts_per_tok", 2}, {"tie_word_embeddings", false}, {"rope_theta", 1e6}};

const nlohmann::json kDeepSeekV3Config = {
    {"model_type", "deepseek_v3"}, {"hidden_size", 7168}, {"intermediate_size", 18432}, {"moe_intermediate_size", 2048},
    {"num_attention_heads", 128}, {"num_key_value_heads", 128}, {"num_hidden_layers", 61}, {"vocab_size", 129280},
    {"max_position_embeddings", 163840}, {"n_routed_experts", 256}, {"n_shared_experts", 1},
    {"num_experts_per_tok", 8}, {"first_k_dense_replace", 3}, {"q_lora_rank", 1536}, {"kv_lora_rank", 512},
    {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128}, {"tie_word_embeddings", false}};

}  // namespace

TEST_CASE("preset parameter counts are the published ones", "[model]") {
  // LLaMA: 4h^2 attention + 3 h ffn MLP + 2h norms per layer, untied
  // embeddings of 32000 x h, a final norm. 6.74B, 13.0B, 32.5B, 65.2B.
  REQUIRE(total("llama-7b") == 6'738'415'616);
  REQUIRE(total("llama-13b") == 13'015'864'320);
  REQUIRE(total("llama-30b") == 32'528'943'616);
  REQUIRE(total("llama-65b") == 65'285'660'672);
  // LLaMA-2-70B: grouped-query attention, 8 key-value heads: 69.0B.
  REQUIRE(total("llama2-70b") == 68'976'648'192);
  // Llama 3: the same layers with 8 key-value heads and untied 128,256 x h
  // embeddings: 8.03B, 70.6B, 405.9B (the released checkpoints' counts).
  REQUIRE(total("llama3-8b") == 32 * (2 * 4096LL * 4096 + 2 * 4096LL * 1024 + 3 * 4096LL * 14336 + 2 * 4096) +
                                    2 * 128256LL * 4096 + 4096);
  REQUIRE(total("llama3-8b") == 8'030'261'248);
  REQUIRE(total("llama3-70b") == 70'553'706'496);
  REQUIRE(total("llama3-405b") == 405'853'388'800);
  // GPT-3: (12h^2 + 13h) per layer, 50257 x h tied embedding and 2048 x h
  // learned positions, a final LayerNorm: 174.6B ("175B").
  REQUIRE(total("gpt3-175b") == 174'604'259'328);
  // ZeroPP shapes: 12 h^2 L + 13 h L dominate.
  const auto small = load_model("gpt-48l-5120h");
  REQUIRE(total("gpt-48l-5120h") == 48 * (12 * 5120LL * 5120 + 13 * 5120) + 50257LL * 5120 + 2048 * 5120 + 2 * 5120);
  REQUIRE(small.heads == 40);
  // Mixtral-8x7B: the same 46.7B as its transformers config (below).
  REQUIRE(total("mixtral-8x7b") == 46'702'792'704);
}

TEST_CASE("a transformers LLaMA config imports to the same model", "[model][hf]") {
  const ModelSpec model = parse_hf_config(kLlama7bConfig, "llama-7b/config.json");
  REQUIRE(model.name == "llama-7b/llama");  // the checkpoint's folder and the family
  REQUIRE(parse_hf_config(kLlama7bConfig, "config.json").name == "llama");
  REQUIRE(parse_hf_config(kLlama7bConfig, "./config.json").name == "llama");
  REQUIRE(count_parameters(model).total() == 6'738'415'616);
  REQUIRE(model.kv_heads == 32);   // missing num_key_value_heads: = heads
  REQUIRE(model.head_dim == 128);  // missing head_dim: hidden / heads
  REQUIRE(model.mlp == MlpKind::swiglu);
}

TEST_CASE("MoE and MLA configs import with their published sizes", "[model][hf]") {
  // Mixtral 8x7B: 46.7B parameters.
  const ModelSpec mixtral = parse_hf_config(kMixtralConfig, "mixtral/config.json");
  REQUIRE(mixtral.has_moe);
  REQUIRE(mixtral.moe.expert_ffn_hidden == 14336);  // no moe_intermediate_size: experts use intermediate_size
  REQUIRE(count_parameters(mixtral).total() == 46'702'792'704);
  // DeepSeek-V3: 671B without its multi-token-prediction module.
  const ModelSpec v3 = parse_hf_config(kDeepSeekV3Config, "deepseek-v3/config.json");
  REQUIRE(v3.has_mla);
  REQUIRE(v3.moe.shared_experts == 1);
  REQUIRE_FALSE(v3.moe_layer(2));
  REQUIRE(v3.moe_layer(3));
  REQUIRE(static_cast<double>(count_parameters(v3).total()) == Approx(671e9).epsilon(1e-3));
}

TEST_CASE("a model's modules partition its parameters into its tensors", "[model]") {
  // The published totals again, now as the sum of every module's tensors.
  const auto tensor_total = [](const ModelSpec& model) {
    double total = 0;
    for (const ModuleParameters& module : model_modules(model)) {
      for (double tensor : module.parameter_tensors) total += tensor;
    }
    return total;
  };
  REQUIRE(tensor_total(load_model("llama-7b")) == 6'738'415'616);
  REQUIRE(tensor_total(load_model("gpt3-175b")) == 174'604'259'328);
  REQUIRE(tensor_total(parse_hf_config(kMixtralConfig, "mixtral/config.json")) == 46'702'792'704);
  REQUIRE(tensor_total(parse_hf_config(kDeepSeekV3Config, "v3/config.json")) == Approx(671e9).epsilon(1e-3));
  // LLaMA-7B: embedding, 32 x (attention, MLP), head; a layer's attention is
  // its norm and the q, k, v, o projections.
  const std::vector<ModuleParameters> modules = model_modules(load_model("llama-7b"));
  REQUIRE(modules.size() == 66);
  REQUIRE(modules[1].name == "layer0.attention");
  REQUIRE(modules[1].parameter_tensors == std::vector<double>{4096, 4096.0 * 4096, 4096.0 * 4096, 4096.0 * 4096, 4096.0 * 4096});
}

TEST_CASE("bad model inputs are refused naming the file and field", "[model]") {
  auto zero_layers = kLlama7bConfig;
  zero_layers["num_hidden_layers"] = 0;
  REQUIRE_THROWS_WITH(parse_hf_config(zero_layers, "c.json"), "c.json: layers: a model needs at least one layer, got 0");
  auto unknown = kLlama7bConfig;
  unknown["model_type"] = "mamba";
  REQUIRE_THROWS_WITH(parse_hf_config(unknown, "c.json"), Catch::StartsWith("c.json: model_type: 'mamba' is not a family"));
  auto untyped = kLlama7bConfig;
  untyped.erase("model_type");
  REQUIRE_THROWS_WITH(parse_hf_config(untyped, "c.json"),
                      Catch::StartsWith("c.json: model_type: missing") && Catch::Contains("LlamaForCausalLM"));
  auto gqa = kLlama7bConfig;
  gqa["num_key_value_heads"] = 5;
  REQUIRE_THROWS_WITH(parse_hf_config(gqa, "c.json"), "c.json: kv_heads: must divide heads (32), got 5");
  auto typed = kLlama7bConfig;
  typed["hidden_size"] = "4096";
  REQUIRE_THROWS_WITH(parse_hf_config(typed, "c.json"), "c.json: hidden_size: must be a non-negative integer, got \"4096\"");

  auto spec = nlohmann::json::parse(R"({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4,
      "head_dim": 16, "ffn_hidden": 256, "vocab": 1000, "max_positions": 128, "mlp": "swiglu", "norm": "rmsnorm",
      "positions": "rotary", "linear_biases": false, "tied_embeddings": true, "sources": []})");
  REQUIRE(count_parameters(parse_model_spec(spec, "m.json")).total() ==
          2 * (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) + 1000 * 64 + 64);
  spec["layers"] = 0;
  REQUIRE_THROWS_WITH(parse_model_spec(spec, "m.json"), "m.json: layers: must be a positive integer, got 0");
  // 2^31 shared experts once narrowed to a negative count and an MFU of -45,896,052.
  auto moe = spec;
  moe["layers"] = 2;
  moe["moe"] = {{"experts", 8}, {"experts_per_token", 2}, {"expert_ffn_hidden", 128}, {"shared_experts", 2147483648LL},
                {"shared_expert_ffn_hidden", 128}, {"first_dense_layers", 0}};
  REQUIRE_THROWS_WITH(parse_model_spec(moe, "m.json"), "m.json: moe.shared_experts: is implausibly large");
  spec["layers"] = 2;
  // Widths past any real model's: --scale hidden=2147483647 once ran into the
  // simulated clock's end and reported it as an internal error.
  for (const auto& [field, value, bound] :
       {std::tuple{"hidden", (1LL << 20) + 1, "2^20"}, {"ffn_hidden", (1LL << 20) + 1, "2^20"},
        {"vocab", (1LL << 24) + 1, "2^24"}}) {
    auto wide = spec;
    wide[field] = value;
    REQUIRE_THROWS_WITH(parse_model_spec(wide, "m.json"),
                        "m.json: " + std::string(field) + ": " + std::to_string(value) + " is implausibly large (at most " +
                            bound + ")");
  }
  spec["dropout"] = 0.1;
  REQUIRE_THROWS_WITH(parse_model_spec(spec, "m.json"), "m.json: dropout: unknown field");
  spec.erase("dropout");
  spec["mtp_layers"] = 1;  // one MTP depth: its projection, three norms and a layer
  REQUIRE(count_parameters(parse_model_spec(spec, "m.json")).mtp ==
          2 * 64 * 64 + 3 * 64 + (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64));
  spec["mtp_layers"] = 3;
  REQUIRE_THROWS_WITH(parse_model_spec(spec, "m.json"),
                      "m.json: mtp_layers: must be between 0 and the number of layers (2), got 3");
  spec["mtp_layers"] = -1;
  REQUIRE_THROWS_WITH(parse_model_spec(spec, "m.json"), Catch::StartsWith("m.json: mtp_layers: must be a non-negative integer"));
  REQUIRE_THROWS_WITH(load_model("no-such-model"), Catch::Contains("no such model file or preset"));
}

TEST_CASE("a transformers config that lost its model_type is refused about model_type, not shardsim's name",
          "[model][hf]") {
  auto untyped = kLlama7bConfig;
  untyped.erase("model_type");
  const std::filesystem::path file = std::filesystem::temp_directory_path() / "shardsim-untyped-config.json";
  std::ofstream(file) << untyped.dump();
  REQUIRE_THROWS_WITH(load_model(file.string()), Catch::Contains("model_type: missing") &&
                                                     Catch::Contains("LlamaForCausalLM"));
  std::filesystem::remove(file);
}
