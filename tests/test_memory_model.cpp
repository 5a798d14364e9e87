#include "topology/base/json_input.h"
#include "workloads/import/model_file.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

using namespace shardsim::workloads;

namespace {

const TrainingConfig& default_training() {
  static const TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
  return training;
}

double model_states(const std::string& plan_name, int gpus, const ModelSpec& model) {
  const Plan plan = load_plan(plan_name);
  return estimate_memory(model, default_training(), plan, resolve_factors(plan, gpus, 8, plan_name), gpus).model_states();
}

Plan amsp(int p, int g, int o) {
  Plan plan = load_plan("zero3");
  plan.factors = {p, g, o};
  return plan;
}

}  // namespace

TEST_CASE("ZeRO stages hold 16, 4 + 12/N, 2 + 14/N and 16/N bytes per parameter", "[memory]") {
  const ModelSpec model = load_model("llama-7b");
  const double psi = static_cast<double>(count_parameters(model).total());
  for (int n : {8, 64, 1024}) {
    INFO("N = " << n);
    REQUIRE(model_states("zero0", n, model) == Approx(16 * psi).epsilon(1e-12));
    REQUIRE(model_states("zero1", n, model) == Approx(4 * psi + 12 * psi / n).epsilon(1e-12));
    REQUIRE(model_states("zero2", n, model) == Approx(2 * psi + 14 * psi / n).epsilon(1e-12));
    REQUIRE(model_states("zero3", n, model) == Approx(16 * psi / n).epsilon(1e-12));
    // FSDP's strategies are the same shardings.
    REQUIRE(model_states("fsdp-full-shard", n, model) == model_states("zero3", n, model));
    REQUIRE(model_states("fsdp-shard-grad-op", n, model) == model_states("zero2", n, model));
  }
  // ZeRO++ adds its secondary copy, 2 Psi over the hpZ group of 8.
  REQUIRE(model_states("zeropp-hpz8", 64, model) == Approx(16 * psi / 64 + 2 * psi / 8).epsilon(1e-12));
}

TEST_CASE("AMSP model states are 2 Psi/f_P + 2 Psi/f_G + 12 Psi/f_OS", "[memory]") {
  const ModelSpec model = load_model("llama-13b");
  const double psi = static_cast<double>(count_parameters(model).total());
  for (const auto& [p, g, o] : std::vector<std::tuple<int, int, int>>{{1, 1, 8}, {4, 4, 8}, {8, 8, 32}, {2, 8, 64}, {1, 16, 16}}) {
    INFO(p << ", " << g << ", " << o);
    const Plan plan = amsp(p, g, o);
    const auto memory = estimate_memory(model, default_training(), plan, resolve_factors(plan, 64, 8, "p.json"), 64);
    REQUIRE(memory.model_states() == Approx(2 * psi / p + 2 * psi / g + 12 * psi / o).epsilon(1e-12));
  }
}

TEST_CASE("factor triples that break AMSP's rules are refused with the rule's name", "[memory][plan]") {
  REQUIRE_THROWS_WITH(resolve_factors(amsp(8, 4, 32), 64, 8, "p.json"),
                      "p.json: factors.gradients: breaks the dependency rule (f_P <= f_G <= f_OS, each dividing the "
                      "next): f_G = 4, f_P = 8");
  REQUIRE_THROWS_WITH(resolve_factors(amsp(1, 2, 6), 48, 8, "p.json"),
                      "p.json: factors.optimizer: breaks the mesh filter: a group within a node must divide its 8 "
                      "GPUs, got 6");
  REQUIRE_THROWS_WITH(resolve_factors(amsp(1, 1, 12), 48, 8, "p.json"),
                      "p.json: factors.optimizer: breaks the mesh filter: a group larger than a node must span whole "
                      "nodes of 8 GPUs, got 12");
  REQUIRE_THROWS_WITH(resolve_factors(amsp(1, 1, 16), 24, 8, "p.json"),
                      "p.json: factors.optimizer: 16 does not divide the 24 data-parallel GPUs");
  REQUIRE_THROWS_WITH(resolve_factors(amsp(1, 3, 3), 24, 8, "p.json"),
                      "p.json: factors.gradients: breaks the mesh filter: a group within a node must divide its 8 "
                      "GPUs, got 3");
  // "all" resolves to the data-parallel size, and named systems always pass.
  const ShardingFactors zero1 = resolve_factors(load_plan("zero1"), 48, 8, "zero1");
  REQUIRE((zero1.parameters == 1 && zero1.gradients == 1 && zero1.optimizer == 48));
  REQUIRE_NOTHROW(resolve_factors(load_plan("zero3"), 4, 8, "zero3"));
  REQUIRE(resolve_factors(load_plan("zero1"), 12, 8, "zero1").optimizer == 12);  // not whole nodes, still one group
  REQUIRE(resolve_factors(load_plan("zero1"), 3, 8, "zero1").optimizer == 3);
}

TEST_CASE("activations per token follow the tensor-by-tensor count", "[memory][activations]") {
  // GPT block (GELU, 4h MLP), bf16, no dropout, no flash attention:
  // attention 2h + 2h + 6h + 2h and softmax 2as; MLP 2h + 2h + 2 x 2 x 4h.
  // That is 32h + 2as (Korthikanti et al.'s 34h + 5as less the dropout masks).
  const ModelSpec gpt = load_model("gpt3-175b");
  TrainingConfig training = default_training();
  training.sequence_length = 2048;
  training.flash_attention = false;
  const double h = 12288, a = 96, s = 2048;
  REQUIRE(layer_activation_bytes_per_token(gpt, training, 0) == Approx(32 * h + 2 * a * s));
  // Selective recompute drops the softmax term; flash attention keeps 4 bytes per head instead.
  training.recompute = Recompute::selective;
  REQUIRE(layer_activation_bytes_per_token(gpt, training, 0) == Approx(32 * h));
  training.recompute = Recompute::none;
  training.flash_attention = true;
  REQUIRE(layer_activation_bytes_per_token(gpt, training, 0) == Approx(32 * h + 4 * a));

  // LLaMA-7B, SwiGLU, flash: 16h + 3 x 2 x 11008 + 4 x 32 = 131712 bytes per token and layer.
  const ModelSpec llama = load_model("llama-7b");
  const TrainingConfig flash = default_training();
  REQUIRE(layer_activation_bytes_per_token(llama, flash, 0) == 131712);
  const double tokens = 4096;
  const auto footprint = activation_footprint(llama, flash);
  REQUIRE(footprint.layers_bytes == Approx(32 * tokens * 131712));
  // The head keeps its two inputs and the loss's fp32 softmax; Megatron-Core's
  // loss holds the bf16 logits beside it in the forward, and the bf16 cast
  // of their gradient beside its fp32 one in the backward.
  REQUIRE(footprint.head_bytes == Approx(tokens * (2 * 2 * 4096 + 4 * 32000)));
  REQUIRE(footprint.head_working_bytes == Approx(tokens * 2 * 32000));
  REQUIRE(footprint.total() == Approx(footprint.layers_bytes + footprint.head_bytes + footprint.head_working_bytes));
  // Eager cross_entropy(logits.float()): bf16 logits, their fp32 copy and the
  // log-softmax in the forward (6 bytes a logit on top of the 4 kept); both
  // fp32 gradients in the backward (8).
  const LossWorkingBytes eager = head_working_bytes_per_token(llama, flash, {}, KernelImplementation::eager);
  REQUIRE(eager.forward == std::vector<double>{2 * 32000, 4 * 32000});
  REQUIRE(eager.backward == std::vector<double>{4 * 32000, 4 * 32000});
  // Full recompute keeps each layer's input and rebuilds one layer at a time.
  TrainingConfig full = flash;
  full.recompute = Recompute::full;
  const auto recomputed = activation_footprint(llama, full);
  REQUIRE(recomputed.layers_bytes == Approx(32 * tokens * 2 * 4096));
  REQUIRE(recomputed.recompute_working_bytes == Approx(tokens * 131712));
}

TEST_CASE("an MoE layer keeps each routed token copy, padding included", "[memory][activations][moe]") {
  // Mixtral-8x7B, bf16, flash attention, per token and layer:
  //   hidden states 4 e h = 32768; Q, K, V and the attention output
  //   2 (4096 + 2 x 1024) + 2 x 4096 = 20480; log-sum-exps 4 x 32 = 128;
  //   router logits 2 x 8 = 16;
  //   per routed copy: permuted input 2 h, gate, up and product 3 x 2 x 14336,
  //   expert output 2 h: 16384 + 86016 = 102400, times c k copies.
  const ModelSpec mixtral = load_model("mixtral-8x7b");
  const TrainingConfig training = default_training();
  const double fixed = 32768 + 20480 + 128 + 16;
  ExpertParallelism experts;
  REQUIRE(layer_activation_bytes_per_token(mixtral, training, 0, {}, experts) == Approx(fixed + 2 * 102400));
  // A capacity factor of 1.25 pads every expert's slots to 1.25 x its share.
  experts.capacity_factor = 1.25;
  REQUIRE(layer_activation_bytes_per_token(mixtral, training, 0, {}, experts) == Approx(fixed + 2.5 * 102400));
  // The footprint and the memory estimate take the plan's capacity factor.
  const double tokens = 4096;
  REQUIRE(activation_footprint(mixtral, training, {}, experts).layers_bytes ==
          Approx(32 * tokens * (fixed + 2.5 * 102400)));
  Plan plan = load_plan("zero3");
  plan.experts.capacity_factor = 1.25;
  const ShardingFactors factors = resolve_factors(plan, 64, 8, "zero3");
  const double padded = estimate_memory(mixtral, training, plan, factors, 64).activations;
  plan.experts.capacity_factor = 1.0;
  const double even = estimate_memory(mixtral, training, plan, factors, 64).activations;
  REQUIRE(padded - even == Approx(32 * tokens * 0.5 * 102400));
}

TEST_CASE("gradient accumulation fills the global batch, or the batch is refused", "[memory][training]") {
  const TrainingConfig& training = default_training();  // 4M tokens of 4096 = 1024 sequences
  REQUIRE(training.global_batch_sequences == 1024);
  REQUIRE(gradient_accumulation_steps(training, 8, "t.json") == 128);
  REQUIRE(gradient_accumulation_steps(training, 1024, "t.json") == 1);
  REQUIRE_THROWS_WITH(gradient_accumulation_steps(training, 3, "t.json"),
                      "t.json: global_batch: 1024 sequences is not a multiple of micro-batch 1 x 3 data-parallel ranks");
  auto document = nlohmann::json::parse(R"({"sequence_length": 4096, "micro_batch_size": 1,
      "global_batch": {"tokens": 1000}, "precision": "bf16", "fp8_gemms": false, "recompute": "none",
      "flash_attention": true})");
  REQUIRE_THROWS_WITH(parse_training_config(document, "t.json"),
                      "t.json: global_batch.tokens: 1000 tokens is not a whole number of 4096-token sequences");
  document["global_batch"]["tokens"] = 4096;
  document["sequence_length"] = (1LL << 24) + 1;
  REQUIRE_THROWS_WITH(parse_training_config(document, "t.json"),
                      "t.json: sequence_length: 16777217 tokens is implausibly long (at most 2^24)");
  document["sequence_length"] = 4096;
  document["micro_batch_size"] = (1LL << 20) + 1;
  REQUIRE_THROWS_WITH(parse_training_config(document, "t.json"),
                      "t.json: micro_batch_size: 1048577 sequences is implausibly many (at most 2^20)");
}

TEST_CASE("sharding more never needs more memory", "[memory]") {
  const ModelSpec model = load_model("llama-30b");
  double previous = 1e300;
  for (const std::string plan : {"zero0", "zero1", "zero2", "zero3"}) {
    const double states = model_states(plan, 64, model);
    REQUIRE(states < previous);
    previous = states;
  }
}
