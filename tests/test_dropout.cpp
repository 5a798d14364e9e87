// Dropout's cost: one-byte masks written in forward and read in backward,
// and outside FlashAttention a pass of its own over every attention score.
// Checked by hand-counted bytes, the step time those bytes take at a round
// HBM bandwidth, Korthikanti et al.'s activation count, and the inputs that
// set it (training JSON, Megatron-LM flags and their defaults).
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/step/step_simulator.h"
#include "topology/base/json_input.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"

#include <catch2/catch.hpp>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// A GPT-2-style block (GELU, LayerNorm, learned positions) small enough to
// count by hand: 2 layers, h 512, 8 heads of 64.
ModelSpec gpt_model() {
  ModelSpec model = test::small_pipeline_model(2);
  model.name = "tiny-gpt";
  model.ffn_hidden = 4 * model.hidden;
  model.mlp = MlpKind::gelu;
  model.norm = NormKind::layernorm;
  model.positions = PositionKind::learned;
  model.linear_biases = true;
  return model;
}

TrainingConfig training(bool flash, double dropout, Recompute recompute = Recompute::none) {
  TrainingConfig t;
  t.sequence_length = 512;
  t.micro_batch_size = 2;
  t.global_batch_sequences = 2;
  t.flash_attention = flash;
  t.recompute = recompute;
  t.attention_dropout = dropout;
  t.hidden_dropout = dropout;
  return t;
}

struct PassBytes {
  double forward = 0, backward = 0, recompute = 0;
};

PassBytes kernel_bytes(const TrainingConfig& t, const ModelParallelism& parallel = {}) {
  PassBytes bytes;
  const auto sum = [](const std::vector<KernelSpec>& list) {
    double total = 0;
    for (const KernelSpec& spec : list) total += spec.hbm_bytes;
    return total;
  };
  for (const ModuleWork& work : transformer_modules(gpt_model(), t, parallel, {})) {
    bytes.forward += sum(work.forward);
    bytes.backward += sum(work.backward);
    bytes.recompute += sum(work.recompute);
  }
  return bytes;
}

}  // namespace

TEST_CASE("dropout adds its masks' bytes, and without flash attention a pass over every score", "[dropout][kernels]") {
  const double e = 2, layers = 2, h = 512, a = 8, s = 512, b = 2, T = b * s;
  // Per pass: attention dropout (2e + 1) bytes per score, each residual add
  // a mask byte per hidden value (two per layer), the embedding's dropout
  // (2e + 1) bytes per hidden value.
  const double embedding = (2 * e + 1) * T * h;
  const double masks = layers * 2 * T * h;
  const double scores = layers * (2 * e + 1) * b * a * s * s;
  SECTION("unfused attention") {
    const PassBytes off = kernel_bytes(training(false, 0)), on = kernel_bytes(training(false, 0.1));
    REQUIRE(on.forward - off.forward == Approx(scores + masks + embedding).epsilon(1e-12));
    REQUIRE(on.backward - off.backward == Approx(scores + masks + embedding).epsilon(1e-12));
  }
  SECTION("flash attention draws the mask in its kernel: only the hidden dropouts cost") {
    const PassBytes off = kernel_bytes(training(true, 0)), on = kernel_bytes(training(true, 0.1));
    REQUIRE(on.forward - off.forward == Approx(masks + embedding).epsilon(1e-12));
    REQUIRE(on.backward - off.backward == Approx(masks + embedding).epsilon(1e-12));
  }
  SECTION("tensor parallelism splits the scores by heads; sequence parallelism splits the hidden states too") {
    ModelParallelism tp;
    tp.tensor = 2;
    const PassBytes off = kernel_bytes(training(false, 0), tp), on = kernel_bytes(training(false, 0.1), tp);
    REQUIRE(on.forward - off.forward == Approx(scores / 2 + masks + embedding).epsilon(1e-12));
    tp.sequence_parallel = true;
    const PassBytes sp_off = kernel_bytes(training(false, 0), tp), sp_on = kernel_bytes(training(false, 0.1), tp);
    REQUIRE(sp_on.backward - sp_off.backward == Approx((scores + masks + embedding) / 2).epsilon(1e-12));
  }
  SECTION("full recompute drops again in the rebuilt forward") {
    const PassBytes off = kernel_bytes(training(false, 0, Recompute::full));
    const PassBytes on = kernel_bytes(training(false, 0.1, Recompute::full));
    REQUIRE(on.recompute - off.recompute == Approx(scores + masks).epsilon(1e-12));  // layers only, not the embedding
  }
}

TEST_CASE("on one GPU the step grows by dropout's bytes over the HBM bandwidth", "[dropout][step]") {
  // The test profile's HBM moves 1 TB/s and its GEMMs run at a fixed rate,
  // so the element-wise passes are the only thing dropout changes.
  const test::World world(test::cluster_spec(test::uniform_nodes_json(1, 8, 100e9)), test::uniform_profile(0));
  const auto step_seconds = [&](const TrainingConfig& t) {
    StepConfig config;
    config.model = gpt_model();
    config.training = t;
    config.plan = load_plan("zero0");
    config.data_parallel = 1;
    config.gpus_per_node = 8;
    const Program program = compile(config);
    const auto timeline = sim::simulate(program, world.cluster(), world.router(), world.profile(), {});
    return seconds_from_picoseconds(timeline.step_time);
  };
  for (const Recompute recompute : {Recompute::none, Recompute::full}) {
    INFO("recompute " << to_string(recompute));
    const PassBytes off = kernel_bytes(training(false, 0, recompute));
    const PassBytes on = kernel_bytes(training(false, 0.1, recompute));
    const double extra_bytes = (on.forward + on.backward + on.recompute) - (off.forward + off.backward + off.recompute);
    REQUIRE(extra_bytes > 0);
    REQUIRE(step_seconds(training(false, 0.1, recompute)) - step_seconds(training(false, 0, recompute)) ==
            Approx(extra_bytes / 1e12).epsilon(1e-9));
  }
}

TEST_CASE("with dropout the activation count is Korthikanti et al.'s 34 s b h + 5 a s^2 b", "[dropout][memory]") {
  const ModelSpec gpt = load_model("gpt3-175b");
  TrainingConfig t = training(false, 0.1);
  t.sequence_length = 2048;
  const double h = 12288, a = 96, s = 2048;
  REQUIRE(layer_activation_bytes_per_token(gpt, t, 0) == Approx(34 * h + 5 * a * s));
  // Under tensor parallelism over 8 GPUs (section 4.2.2): s b h (10 + 24/t + 5 a s / h t);
  // with sequence parallelism everything is split.
  ModelParallelism tp;
  tp.tensor = 8;
  REQUIRE(layer_activation_bytes_per_token(gpt, t, 0, tp) == Approx(10 * h + 24 * h / 8 + 5 * a * s / 8));
  tp.sequence_parallel = true;
  REQUIRE(layer_activation_bytes_per_token(gpt, t, 0, tp) == Approx((34 * h + 5 * a * s) / 8));
  // Selective recompute drops the 5 a s^2 b; flash attention keeps no scores and no score mask.
  t.recompute = Recompute::selective;
  REQUIRE(layer_activation_bytes_per_token(gpt, t, 0) == Approx(34 * h));
  t.recompute = Recompute::none;
  t.flash_attention = true;
  REQUIRE(layer_activation_bytes_per_token(gpt, t, 0) == Approx(34 * h + 4 * a));
}

TEST_CASE("dropout is read from the training config and from Megatron-LM's flags, with Megatron's defaults",
          "[dropout][input]") {
  nlohmann::json doc = {{"sequence_length", 2048},   {"micro_batch_size", 1},    {"global_batch", {{"sequences", 8}}},
                        {"precision", "bf16"},       {"fp8_gemms", false},       {"recompute", "none"},
                        {"flash_attention", false}};
  const TrainingConfig none = parse_training_config(doc, "t.json");
  REQUIRE_FALSE(none.drops_attention());
  REQUIRE_FALSE(none.drops_hidden());
  doc["dropout"] = {{"attention", 0.1}};
  const TrainingConfig attention_only = parse_training_config(doc, "t.json");
  REQUIRE(attention_only.attention_dropout == 0.1);
  REQUIRE_FALSE(attention_only.drops_hidden());
  doc["dropout"] = {{"hidden", 1.0}};
  REQUIRE_THROWS_WITH(parse_training_config(doc, "t.json"),
                      "t.json: dropout.hidden: must be a probability below 1 (1 drops everything)");
  doc["dropout"] = {{"attn", 0.1}};
  REQUIRE_THROWS_WITH(parse_training_config(doc, "t.json"), Catch::Contains("t.json: dropout.attn"));

  const auto import = [&](const std::string& flags) {
    return parse_megatron_args(flags, "args.sh", load_model("llama-7b"), none, 16, 8).training;
  };
  // arguments.py: --attention-dropout 0.1 and --hidden-dropout 0.1 unless given.
  const TrainingConfig defaults = import("--bf16");
  REQUIRE(defaults.attention_dropout == 0.1);
  REQUIRE(defaults.hidden_dropout == 0.1);
  const TrainingConfig llama = import("--bf16 --attention-dropout 0.0 --hidden-dropout 0");
  REQUIRE_FALSE(llama.drops_attention());
  REQUIRE_FALSE(llama.drops_hidden());
  REQUIRE_THROWS_WITH(import("--bf16 --hidden-dropout 1.5"),
                      "args.sh: --hidden-dropout (line 1): must be a probability in [0, 1), got \"1.5\"");
  REQUIRE_THROWS_WITH(import("--bf16 --attention-dropout x"), Catch::Contains("--attention-dropout (line 1)"));
}
