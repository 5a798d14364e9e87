// Multi-head latent attention (DeepSeek-V2/V3) in the compiler: the
// projections' FLOPs against the attention weights worked out by hand, the
// core at its two head sizes, DeepSeek-V3's activated parameters against the
// published 37 B; under tensor parallelism (Megatron-Core's MLASelfAttention)
// the split and whole weights, the FLOPs conserved over the group, every
// gathered latent reduce-scattered back, the whole weights' gradients summed
// once a step; what is refused, and simulated steps that are consistent.
#include "pipeline_checks.h"
#include "topology/placement.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/hf_config.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/model_flops.h"
#include "workloads/kernels/transformer_kernels.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

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

// The weights every GPU of a tensor-parallel group holds whole: the layer's
// RMSNorm, W^DQ and the query latent's norm (if any), W^DKV with W^KR, and
// the key-value latent's norm.
double whole_attention_weights(const ModelSpec& model) {
  const double h = static_cast<double>(model.hidden), q_lora = 96, kv_lora = 64, rope = 16;
  return h + (model.mla.q_lora_rank > 0 ? h * q_lora + q_lora : 0) + h * (kv_lora + rope) + kv_lora;
}

// GEMM and attention-core FLOPs of a kernel list, calls left out.
double matrix_flops(const std::vector<KernelSpec>& list) {
  double flops = 0;
  for (const KernelSpec& spec : list) {
    if (!spec.call && (spec.kernel == KernelClass::gemm || spec.kernel == KernelClass::attention)) flops += spec.flops;
  }
  return flops;
}

// The bytes of each call of `op` in a kernel list, sorted.
std::vector<double> call_bytes(const std::vector<KernelSpec>& list, CollectiveOp op) {
  std::vector<double> bytes;
  for (const KernelSpec& spec : list) {
    if (spec.call && spec.call->op == op) {
      REQUIRE(spec.call->group == CallGroup::tensor_parallel);
      bytes.push_back(spec.call->bytes);
    }
  }
  std::sort(bytes.begin(), bytes.end());
  return bytes;
}

ModelParallelism tensor_parallel(int t) {
  ModelParallelism parallel;
  parallel.tensor = t;
  parallel.sequence_parallel = t > 1;
  return parallel;
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

TEST_CASE("under tensor parallelism an MLA layer splits its heads t ways, down-projections and latent norms stay "
          "whole on each GPU's tokens",
          "[mla][megatron][kernels]") {
  const double T = 1024, h = 512, e = 2, q_lora = 96, kv_lora = 64, rope = 16;
  for (const std::int64_t q_rank : {std::int64_t{96}, std::int64_t{0}}) {
    const ModelSpec model = tiny_mla_model(q_rank);
    const double whole = whole_attention_weights(model);
    const double split = attention_weights(model) + h + (q_rank > 0 ? q_lora : 0) + kv_lora - whole;
    double unsplit_forward = 0, unsplit_backward = 0;
    for (const int t : {1, 2, 4, 8}) {
      INFO("q_lora_rank " << q_rank << ", tensor " << t);
      const std::vector<ModuleWork> modules = transformer_modules(model, tiny_training(true), tensor_parallel(t));
      const ModuleWork& attention = modules[1];
      REQUIRE(attention.name == "layer0.attention");
      REQUIRE(attention.parameters == Approx(whole + split / t).epsilon(1e-12));
      // Their gradients are partial sums over each GPU's tokens under
      // sequence parallelism; so are the MLP block's norm's and the final norm's.
      REQUIRE(attention.sequence_parallel_parameters == (t > 1 ? whole : 0));
      REQUIRE(modules[2].sequence_parallel_parameters == (t > 1 ? h : 0));
      REQUIRE(modules.back().sequence_parallel_parameters == (t > 1 ? h : 0));
      REQUIRE(modules.front().sequence_parallel_parameters == 0);

      // The down-projections on T / t tokens and the up-projections, core and
      // output projection on T tokens of H / t heads: the work splits exactly.
      const double forward = matrix_flops(attention.forward), backward = matrix_flops(attention.backward);
      if (t == 1) {
        unsplit_forward = forward;
        unsplit_backward = backward;
      }
      REQUIRE(forward * t == Approx(unsplit_forward).epsilon(1e-12));
      REQUIRE(backward * t == Approx(unsplit_backward).epsilon(1e-12));

      // Forward: the rotary key, the query latent (or, without one, the
      // hidden states for q_proj) and the key-value latent gathered along the
      // sequence; the output projection reduce-scattered. No hidden-state
      // gather for the down-projections, which use this GPU's tokens.
      const double q_in = q_rank > 0 ? q_lora : h;
      std::vector<double> gathered = {e * T * rope, e * T * q_in, e * T * kv_lora};
      std::sort(gathered.begin(), gathered.end());
      if (t == 1) gathered.clear();
      REQUIRE(call_bytes(attention.forward, CollectiveOp::all_gather) == gathered);
      REQUIRE(call_bytes(attention.forward, CollectiveOp::reduce_scatter) ==
              (t > 1 ? std::vector<double>{e * T * h} : std::vector<double>{}));
      // Backward: every gathered input comes back as its gradient's
      // reduce-scatter; the output projection's output gradient and the
      // up-projections' inputs are gathered (again) for the GEMMs.
      REQUIRE(call_bytes(attention.backward, CollectiveOp::reduce_scatter) == gathered);
      std::vector<double> regathered = {e * T * h, e * T * q_in, e * T * kv_lora};
      std::sort(regathered.begin(), regathered.end());
      if (t == 1) regathered.clear();
      REQUIRE(call_bytes(attention.backward, CollectiveOp::all_gather) == regathered);
      REQUIRE(call_bytes(attention.forward, CollectiveOp::all_reduce).empty());
      REQUIRE(call_bytes(attention.backward, CollectiveOp::all_reduce).empty());
    }
  }
}

TEST_CASE("MLA layers under Ulysses, or tensor parallelism without sequence parallelism, are refused with the reason",
          "[mla][input]") {
  ModelParallelism ulysses;
  ulysses.ulysses = 2;
  REQUIRE_THROWS_WITH(transformer_modules(tiny_mla_model(), tiny_training(true), ulysses),
                      "tiny-mla: MLA layers are compiled without DeepSpeed-Ulysses (Ulysses 2)");
  ModelParallelism tensor = tensor_parallel(2);
  tensor.sequence_parallel = false;
  REQUIRE_THROWS_WITH(transformer_modules(tiny_mla_model(), tiny_training(true), tensor),
                      "tiny-mla: MLA layers under tensor parallelism are compiled with sequence parallelism (tensor 2)");
  ModelParallelism heads = tensor_parallel(16);
  REQUIRE_THROWS_WITH(transformer_modules(tiny_mla_model(), tiny_training(true), heads),
                      "tiny-mla: heads (8) must divide over the 16 tensor-parallel GPUs");
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
    const Program program = compile(config);
    test::require_consistent_step(program, test::pipeline_world());
  }
}

TEST_CASE("Megatron-LM runs an MLA model with MoE layers under tensor, context and expert parallelism: consistent, "
          "and each stage sums its whole weights' gradients over the group once",
          "[mla][megatron][step]") {
  ModelSpec model = tiny_mla_model();
  model.has_moe = true;
  model.moe.experts = 8;
  model.moe.experts_per_token = 2;
  model.moe.expert_ffn_hidden = 704;
  model.moe.first_dense_layers = 1;
  const double h = 512;
  for (const auto& [tensor, context, data] : {std::tuple{2, 1, 4}, std::tuple{2, 2, 2}, std::tuple{4, 1, 2}}) {
    INFO("tensor " << tensor << ", context " << context << ", data " << data);
    StepConfig config = test::pipeline_step("megatron-tp4-pp4", 2, data, 4);
    config.model = model;
    ModelParallelism& mp = config.plan.model_parallel;
    mp = tensor_parallel(tensor);
    mp.pipeline = 2;
    mp.context = context;
    config.plan.experts = {4, topology::MoeLayout::expert_data};
    const Program program = compile(config);
    test::require_consistent_step(program, test::pipeline_world());

    // One layer a stage: layer 0 dense, layer 1 MoE with its router (h x 8)
    // and the final norm. Gradients are reduced in fp32.
    const double stage_whole[2] = {whole_attention_weights(model) + h, whole_attention_weights(model) + h + h * 8 + h};
    for (int rank = 0; rank < program.ranks; ++rank) {
      const int stage = rank / (tensor * context * data);  // Megatron's order tp-cp-dp-pp
      int calls = 0;
      for (const Op& op : program.program_of(rank).ops) {
        if (op.kind != OpKind::collective || op.name != "grad.sequence_parallel.all_reduce") continue;
        ++calls;
        REQUIRE(op.collective == CollectiveOp::all_reduce);
        REQUIRE(program.communicators[static_cast<std::size_t>(op.communicator)].name == "tensor_parallel");
        REQUIRE(op.bytes == Approx(4 * stage_whole[stage]).epsilon(1e-12));
      }
      REQUIRE(calls == 1);
    }
  }
}
