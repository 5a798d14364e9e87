// Multi-head latent attention (DeepSeek-V2/V3) in the compiler: the
// projections' FLOPs against the attention weights worked out by hand, the
// core at its two head sizes, DeepSeek-V3's activated parameters against the
// published 37 B, what is refused, and a simulated step that is consistent.
#include "pipeline_checks.h"
#include "topology/placement.h"
#include "workloads/hf_config.h"
#include "workloads/step_compiler.h"
#include "workloads/transformer_kernels.h"

#include <catch2/catch.hpp>

#include <string>
#include <tuple>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// Latent ranks and head sizes small and distinct, so that a width in the
// wrong place changes a count: query latent 96, key-value latent 64, 8
// heads of 32 + 16 (rotary) query-key and 40 value dimensions.
ModelSpec tiny_mla_model(std::int64_t q_lora_rank = 96) {
  ModelSpec model = test::small_pipeline_model(2);
  model.name = "tiny-mla";
  model.head_dim = 0;
  model.has_mla = true;
  model.mla = {q_lora_rank, 64, 32, 16, 40};
  return model;
}

TrainingConfig tiny_training(bool flash_attention) {
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 2;
  training.global_batch_sequences = 2;
  training.flash_attention = flash_attention;
  return training;
}

// The attention's weight matrices, from DeepSeek-V2's equations (section
// 2.1): W^DQ, W^UQ and W^QR (together h x q_lora, q_lora x H (nope + rope)),
// W^DKV and W^KR (h x (kv_lora + rope)), W^UK and W^UV (kv_lora x H (nope +
// v)), W^O (H v x h).
double attention_weights(const ModelSpec& model) {
  const double h = static_cast<double>(model.hidden), H = model.heads;
  const double q_lora = 96, kv_lora = 64, nope = 32, rope = 16, v = 40;
  const double queries = model.mla.q_lora_rank > 0 ? h * q_lora + q_lora * H * (nope + rope) : h * H * (nope + rope);
  return queries + h * (kv_lora + rope) + kv_lora * H * (nope + v) + H * v * h;
}

}  // namespace

TEST_CASE("an MLA layer's projections do its weights' FLOPs, its core those of its two head sizes", "[mla][kernels]") {
  const double T = 1024, b = 2, s = 512, H = 8, qk = 48, v = 40;
  for (const std::int64_t q_lora : {std::int64_t{96}, std::int64_t{0}}) {
    for (const bool flash : {true, false}) {
      INFO("q_lora_rank " << q_lora << (flash ? ", FlashAttention" : ", unfused attention"));
      const ModelSpec model = tiny_mla_model(q_lora);
      const std::vector<ModuleWork> modules = transformer_modules(model, tiny_training(flash));
      const ModuleWork& attention = modules[1];
      REQUIRE(attention.name == "layer0.attention");
      // The module's parameters: the weights and three RMSNorms (the layer's,
      // the query latent's if any, the key-value latent's).
      REQUIRE(attention.parameters == attention_weights(model) + 512 + (q_lora > 0 ? 96 : 0) + 64);

      double projections = 0, projections_backward = 0, core = 0, core_backward = 0;
      for (const auto* list : {&attention.forward, &attention.backward}) {
        const bool forward = list == &attention.forward;
        for (const KernelSpec& spec : *list) {
          REQUIRE_FALSE(spec.call);  // no tensor parallelism, no calls
          const bool in_core = spec.kernel == KernelClass::attention || spec.name.rfind("attention.", 0) == 0;
          if (spec.kernel == KernelClass::elementwise) continue;
          (in_core ? (forward ? core : core_backward) : (forward ? projections : projections_backward)) += spec.flops;
        }
      }
      REQUIRE(projections == Approx(2 * T * attention_weights(model)));
      REQUIRE(projections_backward == Approx(2 * projections));  // input and weight gradients
      // Q K^T over the 48-wide query-key heads and P V over the 40-wide value
      // heads; FlashAttention skips the masked half and its backward costs 2.5x.
      const double every_score = 2 * b * s * s * H * (qk + v);
      REQUIRE(core == Approx(flash ? every_score / 2 : every_score));
      REQUIRE(core_backward == Approx(flash ? 2.5 * core : 2 * core));
    }
  }
}

TEST_CASE("DeepSeek-V3 activates the published 37 B parameters per token", "[mla][moe][model]") {
  // The preset and the released config.json are the same model.
  const ModelSpec preset = load_model("deepseek-v3");
  const nlohmann::json config = {
      {"model_type", "deepseek_v3"}, {"hidden_size", 7168}, {"intermediate_size", 18432},
      {"moe_intermediate_size", 2048}, {"num_attention_heads", 128}, {"num_key_value_heads", 128},
      {"num_hidden_layers", 61}, {"vocab_size", 129280}, {"max_position_embeddings", 163840},
      {"n_routed_experts", 256}, {"n_shared_experts", 1}, {"num_experts_per_tok", 8}, {"first_k_dense_replace", 3},
      {"q_lora_rank", 1536}, {"kv_lora_rank", 512}, {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64},
      {"v_head_dim", 128}, {"tie_word_embeddings", false}};
  const ModelSpec model = parse_hf_config(config, "deepseek-v3/config.json");
  REQUIRE(count_parameters(preset).total() == count_parameters(model).total());
  REQUIRE(static_cast<double>(count_parameters(preset).total()) == Approx(671e9).epsilon(1e-3));
  TrainingConfig training;
  training.sequence_length = 4096;
  training.micro_batch_size = 1;
  training.global_batch_sequences = 1024;
  const double h = 7168, H = 128, vocab = 129280, tokens = 4096.0 * 1024;
  // Per layer: the attention's weights (above) and its core, 2 s H (qk + v)
  // per token; 3 dense layers of 3 h x 18432; 58 MoE layers of 8 routed and
  // 1 shared expert of 3 h x 2048 and the router (h x 256); the LM head.
  const double attention = h * 1536 + 1536 * H * 192 + h * 576 + 512 * H * 256 + H * 128 * h;
  const double dense = 3 * h * 18432, moe = 9 * 3 * h * 2048 + h * 256;
  const double active = 61 * attention + 3 * dense + 58 * moe + vocab * h;
  const double core = 61 * 2 * 4096.0 * H * (192 + 128);
  REQUIRE(model_flops_per_step(model, training) == Approx(3 * tokens * (2 * active + core)).epsilon(1e-12));
  REQUIRE(model_flops_per_step(preset, training) == model_flops_per_step(model, training));
  // DeepSeek-AI 2024 (arXiv:2412.19437, abstract): 37 B activated for each
  // token, which counts the embedding too.
  REQUIRE(active + vocab * h == Approx(37e9).epsilon(0.015));
}

TEST_CASE("MLA layers under tensor, Ulysses or context parallelism are refused with the reason", "[mla][input]") {
  for (const auto& [tensor, ulysses, context] : {std::tuple{2, 1, 1}, std::tuple{1, 2, 1}, std::tuple{1, 1, 2}}) {
    ModelParallelism parallel;
    parallel.tensor = tensor;
    parallel.ulysses = ulysses;
    parallel.context = context;
    REQUIRE_THROWS_WITH(transformer_modules(tiny_mla_model(), tiny_training(true), parallel),
                        Catch::StartsWith("tiny-mla: MLA layers are compiled without tensor, DeepSpeed-Ulysses or "
                                          "context parallelism"));
  }
}

TEST_CASE("a step of an MLA model with MoE layers runs every op once, in order, and fits", "[mla][step]") {
  for (const std::string plan : {"zero1", "zero3"}) {
    INFO(plan);
    StepConfig config = test::pipeline_step(plan, 2, 16, 2);
    config.model = tiny_mla_model();
    config.model.has_moe = true;
    config.model.moe.experts = 8;
    config.model.moe.experts_per_token = 2;
    config.model.moe.expert_ffn_hidden = 704;
    config.model.moe.shared_experts = 1;
    config.model.moe.shared_expert_ffn_hidden = 704;
    config.model.moe.first_dense_layers = 1;
    config.plan.experts = {8, topology::MoeLayout::expert_data};
    const Program program = compile_step(config);
    test::require_consistent_step(program, test::pipeline_world());
  }
}
