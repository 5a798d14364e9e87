// Selective recompute by module (Megatron-Core's --recompute-modules): what
// each module drops from a layer's activations, counted by hand on a small
// MLA + MoE model; the kernels each module reruns and their FLOPs in closed
// form; the step's FLOPs growing by exactly those; launches and training
// configs read and refused; and simulated steps that run every op once,
// after its dependencies, under data, pipeline and expert parallelism.
#include "pipeline_checks.h"
#include "topology/base/json_input.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// small_pipeline_model's sizes (SwiGLU, RMSNorm, h 512, 8 heads, MLP 1408)
// with MLA (query latent 96, key-value latent 64, heads of 32 + 16 rotary
// query-key and 40 value dimensions) and, from its second layer on, MoE
// layers: 8 experts of width 704, 2 per token, one shared expert of 352.
ModelSpec mla_moe_model(int layers = 2) {
  ModelSpec model = test::small_moe_model(layers);
  model.name = "small-mla-moe";
  model.head_dim = 0;
  model.has_mla = true;
  model.mla = {96, 64, 32, 16, 40};
  model.moe.shared_experts = 1;
  model.moe.shared_expert_ffn_hidden = 352;
  model.moe.first_dense_layers = 1;
  return model;
}

TrainingConfig selective(RecomputeModules modules) {
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 1;
  training.global_batch_sequences = 8;
  training.recompute = Recompute::selective;
  training.recompute_modules = modules;
  return training;
}

RecomputeModules only(bool RecomputeModules::*part) {
  RecomputeModules modules;
  modules.core_attention = false;
  modules.*part = true;
  return modules;
}

RecomputeModules all_modules() {
  return {.core_attention = true, .norms = true, .mla_up_projections = true, .moe_activation = true,
          .dense_mlp = true, .shared_experts = true};
}

std::vector<std::string> names(const std::vector<KernelSpec>& list) {
  std::vector<std::string> found;
  for (const KernelSpec& spec : list) found.push_back(spec.name);
  return found;
}

double gemm_flops(const std::vector<KernelSpec>& list) {
  double flops = 0;
  for (const KernelSpec& spec : list) flops += spec.kernel == KernelClass::gemm && !spec.call ? spec.flops : 0.0;
  return flops;
}

// Bytes per token, bf16 (e = 2), one GPU, flash attention, no dropout.
constexpr double kE = 2, kH = 512;
constexpr double kQkv = kE * (8 * 48 + 8 * 48 + 8 * 40);  // Q, K, V after the up-projections
constexpr double kLogSumExps = 4 * 8;
constexpr double kDenseMlp = 3 * kE * 1408;     // SwiGLU: gate and up, their product
constexpr double kRoutedActivation = 2 * kE * 704;  // two copies' activation outputs
constexpr double kShared = 3 * kE * 352;

double kept_none(int layer) {
  const double common = 4 * kE * kH + kQkv + kE * 8 * 40 + kE * (2 * 96 + 2 * 64 + 16) + kLogSumExps;
  if (layer == 0) return common + kDenseMlp;
  return common + 2 * (3 * kE * 704 + 2 * kE * kH) + kShared + kE * 8;
}

}  // namespace

TEST_CASE("each recompute module drops its tensors from the layer, counted by hand", "[recompute][memory]") {
  const ModelSpec model = mla_moe_model();
  REQUIRE(layer_activation_bytes_per_token(model, selective({.core_attention = false}), 0) == kept_none(0));
  REQUIRE(layer_activation_bytes_per_token(model, selective({.core_attention = false}), 1) == kept_none(1));
  TrainingConfig none = selective({});
  none.recompute = Recompute::none;  // the modules are read under selective recompute only
  REQUIRE(layer_activation_bytes_per_token(model, none, 1) == kept_none(1));

  struct Case {
    bool RecomputeModules::*part;
    double dense_attention, dense_mlp, moe_attention, moe_mlp, moe_experts;
  };
  // layernorm: MLA's input norm is a kernel of its own, and so is a MoE
  // layer's MLP norm; a dense MLP's norm is fused into its first GEMM.
  const Case cases[] = {{&RecomputeModules::core_attention, kLogSumExps, 0, kLogSumExps, 0, 0},
                        {&RecomputeModules::norms, kE * kH, 0, kE * kH, kE * kH, 0},
                        {&RecomputeModules::mla_up_projections, kQkv, 0, kQkv, 0, 0},
                        {&RecomputeModules::moe_activation, 0, 0, 0, 0, kRoutedActivation},
                        {&RecomputeModules::dense_mlp, 0, kDenseMlp, 0, 0, 0},
                        {&RecomputeModules::shared_experts, 0, 0, 0, kShared, 0}};
  for (const Case& c : cases) {
    const TrainingConfig training = selective(only(c.part));
    INFO(recompute_label(training));
    const RecomputedBytes dense = recomputed_bytes_per_token(model, training, 0);
    const RecomputedBytes moe = recomputed_bytes_per_token(model, training, 1);
    REQUIRE(dense.attention == c.dense_attention);
    REQUIRE(dense.mlp == c.dense_mlp);
    REQUIRE(dense.experts == 0);
    REQUIRE(moe.attention == c.moe_attention);
    REQUIRE(moe.mlp == c.moe_mlp);
    REQUIRE(moe.experts == c.moe_experts);
    REQUIRE(layer_activation_bytes_per_token(model, training, 0) == kept_none(0) - c.dense_attention - c.dense_mlp);
    REQUIRE(layer_activation_bytes_per_token(model, training, 1) ==
            kept_none(1) - c.moe_attention - c.moe_mlp - c.moe_experts);
  }

  // All of them: what is left is the norms' inputs, the attention output,
  // the latents, each routed copy's input, output and activation input,
  // and the router's logits. Under tensor parallelism over 2 with sequence
  // parallelism the whole-width tensors split along the sequence, the rest
  // by heads and widths: everything halves.
  const TrainingConfig all = selective(all_modules());
  const double left_dense = 3 * kE * kH + kE * 8 * 40 + kE * 336;
  REQUIRE(layer_activation_bytes_per_token(model, all, 0) == left_dense);
  REQUIRE(layer_activation_bytes_per_token(model, all, 1) ==
          2 * kE * kH + kE * 8 * 40 + kE * 336 + 2 * (2 * kE * 704 + 2 * kE * kH) + kE * 8);
  ModelParallelism tp2;
  tp2.tensor = 2;
  tp2.sequence_parallel = true;
  REQUIRE(layer_activation_bytes_per_token(model, all, 0, tp2) == left_dense / 2);

  // The footprint rebuilds one module's parts at a time: the largest, the
  // dense MLP's.
  const ActivationFootprint footprint = activation_footprint(model, all);
  REQUIRE(footprint.recompute_working_bytes == 512 * kDenseMlp);
  REQUIRE(footprint.layers_bytes == 512 * (layer_activation_bytes_per_token(model, all, 0) +
                                           layer_activation_bytes_per_token(model, all, 1)));

  // Without flash attention core_attn drops the softmax probabilities, s a e per token.
  TrainingConfig unfused = selective({});
  unfused.flash_attention = false;
  const ModelSpec dense = test::small_pipeline_model(1);
  REQUIRE(recomputed_bytes_per_token(dense, unfused, 0).attention == 512 * 8 * kE);
}

TEST_CASE("each module reruns its own kernels before its backward, FLOPs in closed form", "[recompute][kernels]") {
  const ModelSpec model = mla_moe_model();
  const double T = 512;
  const std::vector<ModuleWork> modules = transformer_modules(model, selective(all_modules()));
  const ModuleWork& attention = test::named(modules, "layer1.attention");
  const std::vector<std::string> attention_names = names(attention.recompute);
  // The input norm, the up-projections with the rotary embedding and the
  // concatenation, then the core (forward, and backward's own rerun).
  REQUIRE(std::vector<std::string>(attention_names.begin(), attention_names.begin() + 5) ==
          std::vector<std::string>{"attention_norm", "q_up", "kv_up", "rotary", "qk_concat"});
  REQUIRE(attention.recompute.size() > 5);
  for (std::size_t i = 5; i < attention.recompute.size(); ++i) {
    REQUIRE(attention.recompute[i].kernel == KernelClass::attention);
  }
  // q_up: 96 -> 8 x 48; kv_up: 64 -> 8 x (32 + 40).
  REQUIRE(gemm_flops(attention.recompute) == 2 * T * 96 * 384 + 2 * T * 64 * 576);
  REQUIRE(attention.recompute_working_bytes == T * (kE * kH + kQkv + kLogSumExps));

  const ModuleWork& dense_mlp = test::named(modules, "layer0.mlp");
  REQUIRE(names(dense_mlp.recompute) == std::vector<std::string>{"gate_up", "swiglu", "down"});
  REQUIRE(gemm_flops(dense_mlp.recompute) == 2 * T * kH * 2 * 1408 + 2 * T * 1408 * kH);
  REQUIRE(dense_mlp.recompute_working_bytes == T * kDenseMlp);

  const ModuleWork& block = test::named(modules, "layer1.mlp");
  REQUIRE(names(block.recompute) ==
          std::vector<std::string>{"mlp_norm", "shared.gate_up", "shared.swiglu", "shared.down"});
  REQUIRE(gemm_flops(block.recompute) == 2 * T * kH * 2 * 352 + 2 * T * 352 * kH);
  const ModuleWork& experts = test::named(modules, "layer1.experts");
  REQUIRE(names(experts.recompute) == std::vector<std::string>{"swiglu"});
  REQUIRE(experts.recompute_working_bytes == T * kRoutedActivation);

  // Under tensor parallelism over 2 with sequence parallelism the reruns
  // make their calls again: the latents and the MLP input gathered along
  // the sequence (whole: 512 tokens), the MLP output reduce-scattered.
  ModelParallelism tp2;
  tp2.tensor = 2;
  tp2.sequence_parallel = true;
  const std::vector<ModuleWork> split = transformer_modules(model, selective(all_modules()), tp2);
  std::vector<std::pair<std::string, double>> calls;
  for (const std::string module : {"layer1.attention", "layer0.mlp"}) {
    for (const KernelSpec& spec : test::named(split, module).recompute) {
      if (spec.call) calls.emplace_back(spec.name, spec.call->bytes);
    }
  }
  REQUIRE(calls == std::vector<std::pair<std::string, double>>{{"q_up.input.all_gather", kE * T * 96},
                                                                 {"kv_up.input.all_gather", kE * T * 64},
                                                                 {"gate_up.input.all_gather", kE * T * kH},
                                                                 {"down.reduce_scatter", kE * T * kH}});
}

TEST_CASE("a step's FLOPs grow by exactly what the modules rerun", "[recompute][step]") {
  // Two micro-batches on 2 data-parallel GPUs of 4 layers (one dense, three MoE), experts whole on every GPU.
  StepConfig config = test::pipeline_step("zero1", 4, 2, 2);
  config.model = mla_moe_model(4);
  const auto compute_flops = [](const Program& program) {
    double flops = 0;
    for (const Op& op : program.program_of(0).ops) flops += op.kind == OpKind::compute ? op.flops : 0.0;
    return flops;
  };
  const double none = compute_flops(compile(config));
  config.training.recompute = Recompute::selective;
  config.training.recompute_modules = all_modules();
  const Program program = compile(config);
  validate_program(program);
  double rerun = 0;
  for (const ModuleWork& work : transformer_modules(config.model, config.training)) {
    for (const KernelSpec& spec : work.recompute) rerun += spec.call ? 0.0 : spec.flops;
  }
  REQUIRE(rerun > 0);
  REQUIRE(compute_flops(program) == Approx(none + 2 * rerun).epsilon(1e-12));
  test::require_consistent_step(program, test::pipeline_world());
}

TEST_CASE("selective recompute by module runs every op once in pipelined, sharded and combined-1F1B steps",
          "[recompute][step]") {
  // Megatron-LM: TP 2 with sequence parallelism, 2 stages.
  StepConfig megatron = test::pipeline_step("megatron-dp", 4, 2, 4);
  megatron.model = mla_moe_model(4);
  megatron.plan.model_parallel.pipeline = 2;
  megatron.plan.model_parallel.tensor = 2;
  megatron.plan.model_parallel.sequence_parallel = true;
  megatron.training.recompute = Recompute::selective;
  megatron.training.recompute_modules = all_modules();
  const Program pipelined = compile(megatron);
  validate_program(pipelined);
  test::require_consistent_step(pipelined, test::pipeline_world());

  // ZeRO-3: each module's parameters are gathered before its rerun.
  StepConfig zero3 = test::pipeline_step("zero3", 4, 16, 1);
  zero3.model = mla_moe_model(4);
  zero3.training.recompute = Recompute::selective;
  zero3.training.recompute_modules = {.core_attention = false, .mla_up_projections = true, .dense_mlp = true};
  const Program sharded = compile(zero3);
  validate_program(sharded);
  test::require_consistent_step(sharded, test::pipeline_world());

  // Megatron-Bridge's MoE recipes: layernorm and moe_act under the combined
  // 1F1B, the experts' activation rerun with their backward.
  StepConfig combined = test::pipeline_step("megatron-dp", 4, 8, 4);
  combined.model = mla_moe_model(4);
  combined.plan.model_parallel.pipeline = 2;
  combined.plan.model_parallel.virtual_stages = 2;
  combined.training.recompute = Recompute::selective;
  combined.training.recompute_modules = {.core_attention = false, .norms = true, .moe_activation = true};
  test::require_consistent_combined_1f1b(combined);
}

TEST_CASE("a Megatron launch's --recompute-modules is read as Megatron-Core reads it", "[recompute][megatron-args]") {
  const ModelSpec deepseek = load_model("deepseek-v3");
  const TrainingConfig base = load_training_config("seq4096-mbs1-4m-tokens");
  const std::string launch = "--expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --bf16 ";
  const auto job = [&](const std::string& flags, const ModelSpec& model) {
    return parse_megatron_args(launch + flags, "args.sh", model, base, 64, 8);
  };
  const auto refusal = [&](const std::string& flags, const ModelSpec& model) -> std::string {
    try {
      job(flags, model);
    } catch (const InputError& e) {
      return e.what();
    }
    return "accepted";
  };

  const MegatronJob recipe =
      job("--moe-grouped-gemm --recompute-granularity selective --recompute-modules mla_up_proj layernorm moe_act "
          "--micro-batch-size 1", deepseek);
  REQUIRE(recipe.training.recompute == Recompute::selective);
  REQUIRE(recipe.training.recompute_modules ==
          RecomputeModules{.core_attention = false, .norms = true, .mla_up_projections = true, .moe_activation = true});
  REQUIRE(recompute_label(recipe.training) == "selective (layernorm mla_up_proj moe_act)");
  REQUIRE(recipe.plan.experts.parallel == 8);  // the list ended at the next flag

  // Megatron-Core's default, the attention core, which under fused attention
  // is rerun for nothing: said in a note.
  const MegatronJob default_modules = job("--recompute-activations", deepseek);
  REQUIRE(default_modules.training.recompute_modules == RecomputeModules{});
  REQUIRE(std::any_of(default_modules.notes.begin(), default_modules.notes.end(), [](const std::string& note) {
    return note.find("reruns the fused attention's forward") != std::string::npos;
  }));
  REQUIRE(job("--recompute-granularity selective --recompute-modules", deepseek).training.recompute_modules ==
          RecomputeModules{.core_attention = false});
  const MegatronJob full = job("--recompute-granularity full --recompute-method uniform --recompute-modules mlp", deepseek);
  REQUIRE(full.training.recompute == Recompute::full);
  REQUIRE_THAT(full.notes.back(), Catch::Contains("--recompute-modules is read under --recompute-granularity selective"));

  REQUIRE_THAT(refusal("--recompute-granularity selective --recompute-modules moe", deepseek),
               Catch::Contains("args.sh: --recompute-modules (line 1): \"moe\" (recomputing the whole MoE layer) is not "
                               "modelled"));
  REQUIRE_THAT(refusal("--recompute-granularity selective --recompute-modules core_attn mlp_act", deepseek),
               Catch::Contains("\"mlp_act\" is not a module selective recompute rebuilds; expected core_attn, layernorm"));
  REQUIRE_THAT(refusal("--recompute-granularity selective --recompute-modules moe_act", deepseek),
               Catch::Contains("--recompute-modules (line 1): moe_act is recomputed with --moe-grouped-gemm only"));
  REQUIRE_THAT(refusal("--recompute-granularity selective --recompute-modules mla_up_proj", load_model("mixtral-8x7b")),
               Catch::Contains("mla_up_proj needs --multi-latent-attention"));
  REQUIRE_THAT(refusal("--moe-shared-expert-overlap --recompute-granularity selective --recompute-modules shared_experts",
                       deepseek),
               Catch::Contains("shared_experts cannot be recomputed with --moe-shared-expert-overlap"));
  REQUIRE_THAT(refusal("--moe-layer-recompute", deepseek),
               Catch::Contains("--moe-layer-recompute (line 1): recomputes the whole MoE layer"));
}

TEST_CASE("a training config names its recompute modules under selective recompute only", "[recompute][input]") {
  const auto parse = [](const std::string& recompute, const std::string& modules) {
    return parse_training_config(nlohmann::json::parse(R"({"sequence_length": 4096, "micro_batch_size": 1,
        "global_batch": {"sequences": 8}, "precision": "bf16", "fp8_gemms": false, "flash_attention": true,
        "recompute": ")" + recompute + "\"" + (modules.empty() ? "" : ", \"recompute_modules\": " + modules) + "}"),
                                 "training.json");
  };
  REQUIRE(parse("selective", "").recompute_modules == RecomputeModules{});
  REQUIRE(parse("selective", R"(["mlp", "shared_experts"])").recompute_modules ==
          RecomputeModules{.core_attention = false, .dense_mlp = true, .shared_experts = true});
  REQUIRE_THROWS_WITH(parse("full", R"(["mlp"])"),
                      Catch::Contains("training.json: recompute_modules: names what selective recompute rebuilds, but "
                                      "recompute is \"full\""));
  REQUIRE_THROWS_WITH(parse("selective", R"(["attention"])"),
                      Catch::Contains("training.json: recompute_modules: \"attention\" is not a module"));
  // What the model cannot rebuild is refused when the step is compiled.
  TrainingConfig training = selective(only(&RecomputeModules::mla_up_projections));
  REQUIRE_THROWS_WITH(transformer_modules(test::small_pipeline_model(2), training),
                      Catch::Contains("small: selective recompute of mla_up_proj needs multi-head latent attention"));
  training = selective(only(&RecomputeModules::shared_experts));
  ExpertParallelism overlapped;
  overlapped.shared_expert_overlap = true;
  REQUIRE_THROWS_WITH(transformer_modules(mla_moe_model(), training, {}, overlapped),
                      Catch::Contains("cannot run with the shared experts overlapped"));
}
