// The kernels each framework launches for one LLaMA layer, against a hand
// count; torchtitan's recompute options; FSDP2's copies and fp32 reduction;
// torch's foreach AdamW.
#include "workloads/compile/step_compiler.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// h 64, 4 query heads and 2 key/value heads of 16, SwiGLU width 96, rotary
// positions; one sequence of 32 tokens in bf16.
ModelSpec small_llama(int layers = 1) {
  ModelSpec model;
  model.name = "small-llama";
  model.layers = layers;
  model.hidden = 64;
  model.heads = 4;
  model.kv_heads = 2;
  model.head_dim = 16;
  model.ffn_hidden = 96;
  model.vocab = 100;
  model.max_positions = 32;
  model.mlp = MlpKind::swiglu;
  model.norm = NormKind::rmsnorm;
  model.positions = PositionKind::rotary;
  return model;
}

TrainingConfig small_training(Recompute recompute = Recompute::none) {
  TrainingConfig training;
  training.sequence_length = 32;
  training.micro_batch_size = 1;
  training.global_batch_sequences = 1;
  training.recompute = recompute;
  return training;
}

struct ListTotals {
  int kernels = 0;
  double bytes = 0, gemm_flops = 0;
};

// Every kernel but the attention core (flash attention, priced on its own).
ListTotals totals(const std::vector<KernelSpec>& list) {
  ListTotals t;
  for (const KernelSpec& spec : list) {
    if (spec.call || spec.kernel == KernelClass::attention) continue;
    ++t.kernels;
    t.bytes += spec.hbm_bytes;
    if (spec.kernel == KernelClass::gemm) t.gemm_flops += spec.flops;
  }
  return t;
}

const ModuleWork& module_named(const std::vector<ModuleWork>& modules, const std::string& name) {
  const auto it = std::find_if(modules.begin(), modules.end(), [&](const ModuleWork& m) { return m.name == name; });
  REQUIRE(it != modules.end());
  return *it;
}

}  // namespace

TEST_CASE("eager kernels of a LLaMA layer match a hand count of torchtitan's ops") {
  const std::vector<ModuleWork> modules =
      transformer_modules(small_llama(), small_training(), {}, {}, KernelImplementation::eager);
  // T 32 tokens, h 64, q 64, kv 32, f 96, 2 bytes a value.
  SECTION("attention forward") {
    // norm 2Th e = 8192; wq e(Th + hq + Tq) = 16384, wk and wv 10240 each;
    // rotary (2e + 16) bytes a value: q 40960, k 20480; repeat_kv e T (kv +
    // q) = 6144 each for k and v; wo 16384; residual 3Th e = 12288.
    const ListTotals t = totals(module_named(modules, "layer0.attention").forward);
    CHECK(t.kernels == 14);
    CHECK(t.bytes == Approx(147456));
    CHECK(t.gemm_flops == Approx(2.0 * 32 * (64 * 64 + 32 * 64 + 32 * 64 + 64 * 64)));
  }
  SECTION("MLP forward and backward") {
    const ModuleWork& mlp = module_named(modules, "layer0.mlp");
    // norm 8192, w1 w3 w2 22528 each, SiLU 2Tf e = 12288, product 3Tf e =
    // 18432, residual 12288.
    const ListTotals forward = totals(mlp.forward);
    CHECK(forward.kernels == 7);
    CHECK(forward.bytes == Approx(118784));
    CHECK(forward.gemm_flops == Approx(3 * 2.0 * 32 * 96 * 64));
    // residual's gradient add 12288, six GEMMs of 22528, the product's two
    // gradients and SiLU's backward 18432 each, the norm output's gradient
    // add 12288, the norm's backward 3Th e = 12288.
    const ListTotals backward = totals(mlp.backward);
    CHECK(backward.kernels == 12);
    CHECK(backward.bytes == Approx(227328));
    CHECK(backward.gemm_flops == Approx(2 * forward.gemm_flops));
  }
  SECTION("the loss on fp32 logits") {
    // torchtitan's cross_entropy(pred.float()) over T = 32 tokens and V = 100:
    // the upcast reads e and writes 4 bytes a logit, log_softmax reads and
    // writes 4; backward, nll_loss writes 4, log_softmax's backward reads 8
    // and writes 4, the downcast reads 4 and writes e.
    const ModuleWork& head = modules.back();
    const double logits = 32 * 100;
    double forward_loss = 0, backward_loss = 0;
    std::vector<std::string> forward_names, backward_names;
    for (const KernelSpec& spec : head.forward) {
      if (spec.name.starts_with("loss")) {
        forward_loss += spec.hbm_bytes;
        forward_names.push_back(spec.name);
      }
    }
    for (const KernelSpec& spec : head.backward) {
      if (spec.name.starts_with("loss.backward")) {
        backward_loss += spec.hbm_bytes;
        backward_names.push_back(spec.name);
      }
    }
    CHECK(forward_names == std::vector<std::string>{"loss.upcast", "loss.log_softmax"});
    CHECK(backward_names ==
          std::vector<std::string>{"loss.backward.nll", "loss.backward.log_softmax", "loss.backward.downcast"});
    CHECK(forward_loss == Approx((2 + 4 + 8) * logits));
    CHECK(backward_loss == Approx((4 + 12 + 4 + 2) * logits));
    // Kept: the final norm's and LM head's inputs (2 e h) and the
    // log-softmax (4 V); held while the loss runs: the bf16 logits and their
    // fp32 copy (6 V), then both fp32 gradients (8 V).
    CHECK(head.activation_bytes == Approx(32 * (2 * 2 * 64 + 4 * 100)));
    CHECK(head.forward_working == std::vector<double>{2 * logits, 4 * logits});
    CHECK(head.backward_working == std::vector<double>{4 * logits, 4 * logits});
  }
  SECTION("the same layer fused launches fewer kernels and moves fewer bytes, with the same GEMM FLOPs") {
    const std::vector<ModuleWork> fused = transformer_modules(small_llama(), small_training());
    for (const std::string name : {"layer0.attention", "layer0.mlp"}) {
      const ListTotals e = totals(module_named(modules, name).forward), f = totals(module_named(fused, name).forward);
      CHECK(f.kernels < e.kernels);
      CHECK(f.bytes < e.bytes);
      CHECK(f.gemm_flops == Approx(e.gemm_flops));
    }
  }
}

TEST_CASE("torchtitan's ops policy reruns all but the odd GEMMs and the fused attention") {
  TrainingConfig training = small_training(Recompute::ops);
  const std::vector<ModuleWork> modules = transformer_modules(small_llama(), training, {}, {}, KernelImplementation::eager);
  const ModuleWork& attention = module_named(modules, "layer0.attention");
  const ModuleWork& mlp = module_named(modules, "layer0.mlp");
  CHECK(attention.recompute.empty());  // the whole layer reruns before the MLP's backward
  std::vector<std::string> gemms;
  int elementwise = 0;
  for (const KernelSpec& spec : mlp.recompute) {
    CHECK(spec.kernel != KernelClass::attention);
    if (spec.kernel == KernelClass::gemm) gemms.push_back(spec.name);
    if (spec.kernel == KernelClass::elementwise) ++elementwise;
  }
  // mm order wq wk wv wo w1 w3 w2: every second one (wo is the shared out_proj).
  CHECK(gemms == std::vector<std::string>{"wk", "out_proj", "w3"});
  // Attention: norm, six rotary passes, two repeat_kv copies, residual; MLP:
  // norm, SiLU, product, residual.
  CHECK(elementwise == 10 + 4);
  // Kept: the layer input e h, wq's and wv's outputs, the attention output,
  // the log-sum-exps (4 bytes a head), w1's output e f, w2's e h.
  const double kept = 2.0 * (64 + 64 + 32 + 64 + 96 + 64) + 4.0 * 4;
  CHECK(ops_policy_kept_bytes_per_token(small_llama(), training, {}, KernelImplementation::eager) == Approx(kept));
  // Fused: qkv kept (q + 2 kv), out_proj rerun, gate_up kept (2 f), down rerun.
  CHECK(ops_policy_kept_bytes_per_token(small_llama(), training) ==
        Approx(2.0 * (64 + (64 + 32 + 32) + 64 + 2 * 96) + 4.0 * 4));
  CHECK(attention.activation_bytes == Approx(32 * kept));
  CHECK(mlp.recompute_working_bytes ==
        Approx(32 * layer_activation_bytes_per_token(small_llama(), training, 0, {}, {}, KernelImplementation::eager)));
}

TEST_CASE("full recompute with an interval rebuilds every k-th layer and keeps the others") {
  TrainingConfig training = small_training(Recompute::full);
  training.recompute_interval = 2;
  const ModelSpec model = small_llama(4);
  const std::vector<ModuleWork> modules = transformer_modules(model, training);
  for (int layer = 0; layer < 4; ++layer) {
    const std::string prefix = "layer" + std::to_string(layer) + ".";
    const bool rebuilt = layer % 2 == 1;  // torchtitan counts blocks from 1 and wraps those 2 divides
    CHECK(module_named(modules, prefix + "mlp").recompute.empty() == !rebuilt);
  }
  TrainingConfig none = small_training();
  const double tokens = 32;
  const double whole = tokens * layer_activation_bytes_per_token(model, none, 0);
  const double input = tokens * layer_input_bytes_per_token(model, none);
  const ActivationFootprint footprint = activation_footprint(model, training);
  CHECK(footprint.layers_bytes == Approx(2 * whole + 2 * input));
  CHECK(footprint.recompute_working_bytes == Approx(whole));
}

TEST_CASE("FSDP2 copies every gather out and every gradient in, and reduces in fp32 when asked") {
  StepConfig config;
  config.model = small_llama(2);
  config.training = small_training();
  config.training.global_batch_sequences = 8;
  config.plan = load_plan("fsdp-full-shard");
  config.data_parallel = 8;
  config.gpus_per_node = 8;
  REQUIRE(config.plan.kernels == KernelImplementation::eager);  // PyTorch FSDP's default
  const auto count = [](const Program& program, const std::string& part, OpKind kind) {
    double bytes = 0;
    int ops = 0;
    for (const Op& op : program.programs.front().ops) {
      if (op.kind != kind || std::string(op.name).find(part) == std::string::npos) continue;
      ++ops;
      bytes += kind == OpKind::compute ? op.hbm_bytes : op.bytes;
    }
    return std::pair{ops, bytes};
  };
  const double parameters = static_cast<double>(count_parameters(config.model).total());
  for (const GradientReduceDtype dtype : {GradientReduceDtype::training, GradientReduceDtype::fp32}) {
    config.plan.reduce_dtype = dtype;
    const double g = dtype == GradientReduceDtype::fp32 ? 4 : 2;
    const Program program = compile(config);
    const auto [gathers, gathered_bytes] = count(program, "all_gather", OpKind::collective);
    const auto [copies_out, copy_out_bytes] = count(program, "copy_out", OpKind::compute);
    CHECK(copies_out == gathers);
    CHECK(copy_out_bytes == Approx(2 * gathered_bytes));  // each gathered value read and written once
    const auto [reductions, reduced_bytes] = count(program, "reduce_scatter", OpKind::collective);
    const auto [copies_in, copy_in_bytes] = count(program, "copy_in", OpKind::compute);
    CHECK(copies_in == reductions);
    // Every parameter's gradient reduced once, in the reduce dtype.
    CHECK(reduced_bytes == Approx(g * parameters));
    CHECK(copy_in_bytes == Approx((2 + g) * parameters));
  }
}

TEST_CASE("torch's foreach AdamW after clip_grad_norm_ moves 92 bytes a parameter on fp32 gradients") {
  OptimizerStep step{.shard_parameters = 1e6, .gradient_bytes_per_value = 4, .weight_bytes_per_value = 2,
                     .torch_foreach = true};
  CHECK(optimizer_bytes_per_parameter(step) == Approx(92));
  step.gradient_bytes_per_value = 2;  // reduced in bf16: cast to the fp32 parameter's dtype first
  CHECK(optimizer_bytes_per_parameter(step) == Approx(98));
}

TEST_CASE("what eager kernels and torchtitan's recompute options refuse") {
  ModelParallelism tensor;
  tensor.tensor = 2;
  tensor.sequence_parallel = true;
  CHECK_THROWS_WITH(require_kernel_implementation(small_llama(), small_training(), tensor, KernelImplementation::eager),
                    Catch::Contains("eager kernels are compiled without tensor or context parallelism"));
  StepConfig config;
  config.model = small_llama(2);
  config.training = small_training(Recompute::ops);
  config.training.flash_attention = true;
  config.training.global_batch_sequences = 2;
  config.plan = load_plan("megatron-dp");
  config.data_parallel = 2;
  config.training_file = "t.json";
  CHECK_THROWS_WITH(compile(config), Catch::Contains("t.json: recompute") && Catch::Contains("data-parallel systems"));
  CHECK_THROWS_WITH(parse_training_config(nlohmann::json::parse(R"({"sequence_length": 32, "micro_batch_size": 1,
      "global_batch": {"sequences": 1}, "precision": "bf16", "fp8_gemms": false, "recompute": "ops",
      "flash_attention": false})"), "t.json"),
                    Catch::Contains("t.json: recompute") && Catch::Contains("needs flash_attention"));
  CHECK_THROWS_WITH(parse_training_config(nlohmann::json::parse(R"({"sequence_length": 32, "micro_batch_size": 1,
      "global_batch": {"sequences": 1}, "precision": "bf16", "fp8_gemms": false, "recompute": "none",
      "recompute_interval": 2, "flash_attention": true})"), "t.json"),
                    Catch::Contains("t.json: recompute_interval"));
}

TEST_CASE("a plan names its kernels and reduce dtype, or takes its system's") {
  nlohmann::json fsdp = load_json_file(resolve_preset("fsdp-full-shard", "workloads/plans", "plan"));
  CHECK(parse_plan(fsdp, "p.json").kernels == KernelImplementation::eager);
  CHECK(load_plan("zero3").kernels == KernelImplementation::fused);
  fsdp["kernels"] = "fused";
  fsdp["reduce_dtype"] = "fp32";
  const Plan plan = parse_plan(fsdp, "p.json");
  CHECK(plan.kernels == KernelImplementation::fused);
  CHECK(plan.reduce_dtype == GradientReduceDtype::fp32);
  fsdp["kernels"] = "compiled";
  CHECK_THROWS_WITH(parse_plan(fsdp, "p.json"), Catch::Contains("p.json: kernels"));
  CHECK_FALSE(load_plan("zero3").reduce_dtype);  // the system's
  nlohmann::json megatron = load_json_file(resolve_preset("megatron-dp", "workloads/plans", "plan"));
  megatron["reduce_dtype"] = "training";  // --grad-reduce-in-bf16
  CHECK(parse_plan(megatron, "m.json").reduce_dtype == GradientReduceDtype::training);
  nlohmann::json zero_pipeline = load_json_file(resolve_preset("zero-pipeline-pp4", "workloads/plans", "plan"));
  zero_pipeline["reduce_dtype"] = "fp32";
  CHECK_THROWS_WITH(parse_plan(zero_pipeline, "z.json"), Catch::Contains("z.json: reduce_dtype"));
}
