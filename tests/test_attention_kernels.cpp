// Named FlashAttention generations: the training config picks one, the
// compiled attention ops carry it, and the profile prices it. Times are
// worked out by hand on a profile whose numbers are round (100 TFLOP/s,
// FlashAttention-2 at 0.25 of it, FlashAttention-3 at 0.5).
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/step/kernel_time.h"
#include "sim/step/step_simulator.h"
#include "topology/base/json_input.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/training.h"
#include "workloads/kernels/transformer_kernels.h"

#include <catch2/catch.hpp>

#include <string>
#include <utility>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

nlohmann::json profile_with_kernels() {
  nlohmann::json document = test::uniform_profile_json(0);
  document["compute"]["attention_kernels"] = {{"flash_attention_2", {{"efficiency", 0.25}, {"source", "test"}}},
                                              {"flash_attention_3", {{"efficiency", 0.5}, {"source", "test"}}}};
  return document;
}

nlohmann::json training_json() {
  return {{"sequence_length", 512}, {"micro_batch_size", 1}, {"global_batch", {{"sequences", 1}}},
          {"precision", "bf16"},    {"fp8_gemms", false},    {"recompute", "none"},
          {"flash_attention", true}};
}

Op attention_op(AttentionKernel kernel) {
  Op op;
  op.kind = OpKind::compute;
  op.kernel = KernelClass::attention;
  op.attention_kernel = kernel;
  op.flops = 1e12;
  op.hbm_bytes = 1e6;  // 1 us of HBM traffic: compute-bound at every efficiency here
  return op;
}

// Two layers of hidden 512 (8 heads of 64), one sequence of 512 tokens, on one GPU.
StepConfig one_gpu_step(AttentionKernel kernel) {
  StepConfig config = test::pipeline_step("zero0", 2, 1, 1);
  config.training.attention_kernel = kernel;
  return config;
}

}  // namespace

TEST_CASE("an attention op runs at the efficiency the profile gives its kernel", "[kernels][attention]") {
  const calib::Profile profile = calib::parse_profile(profile_with_kernels(), "p.json");
  // 1e12 FLOPs at 100 TFLOP/s: 10 ms at the profile's own efficiency (1), 40 ms at 0.25, 20 ms at 0.5.
  CHECK(sim::kernel_seconds(attention_op(AttentionKernel::profile), profile) == Approx(10e-3));
  CHECK(sim::kernel_seconds(attention_op(AttentionKernel::flash_attention_2), profile) == Approx(40e-3));
  CHECK(sim::kernel_seconds(attention_op(AttentionKernel::flash_attention_3), profile) == Approx(20e-3));
}

TEST_CASE("a kernel the profile does not price is refused naming the profile's field", "[kernels][attention]") {
  nlohmann::json document = profile_with_kernels();
  document["compute"]["attention_kernels"].erase("flash_attention_3");
  const calib::Profile profile = calib::parse_profile(document, "ampere.json");
  const auto fa3 = attention_op(AttentionKernel::flash_attention_3);
  REQUIRE_THROWS_WITH(sim::kernel_seconds(fa3, profile),
                      Catch::Contains("ampere.json") && Catch::Contains("compute.attention_kernels.flash_attention_3"));
}

TEST_CASE("attention kernel entries of a profile are checked", "[kernels][attention][profile]") {
  nlohmann::json unknown = profile_with_kernels();
  unknown["compute"]["attention_kernels"]["flash_attention_9"] = {{"efficiency", 0.5}, {"source", "test"}};
  CHECK_THROWS_WITH(calib::parse_profile(unknown, "p.json"),
                    Catch::Contains("flash_attention_9") && Catch::Contains("unknown attention kernel"));
  nlohmann::json above_one = profile_with_kernels();
  above_one["compute"]["attention_kernels"]["flash_attention_2"]["efficiency"] = 1.5;
  CHECK_THROWS_WITH(calib::parse_profile(above_one, "p.json"),
                    Catch::Contains("attention_kernels.flash_attention_2.efficiency"));
  nlohmann::json no_source = profile_with_kernels();
  no_source["compute"]["attention_kernels"]["flash_attention_3"].erase("source");
  CHECK_THROWS_WITH(calib::parse_profile(no_source, "p.json"),
                    Catch::Contains("attention_kernels.flash_attention_3.source"));
}

TEST_CASE("the bundled profiles price FlashAttention-3 on Hopper only", "[kernels][attention][profile]") {
  // FlashAttention-2, forward and backward, measured on Azure's ND H100 v5 and ND H200 v5: 327.9 and
  // 329.3 TFLOPS of 989. The profile's own kernel is FlashAttention-3.
  for (const auto& [name, tflops] : {std::pair{"h100", 327.9}, std::pair{"h200", 329.3}}) {
    const calib::Profile hopper = calib::load_profile(name);
    CHECK(hopper.attention_efficiency(AttentionKernel::flash_attention_2) == Approx(tflops / 989).epsilon(1e-3));
    CHECK(hopper.attention_efficiency(AttentionKernel::flash_attention_3) == hopper.compute.attention_efficiency);
  }
  for (const std::string name : {"a100", "a800"}) {
    const calib::Profile ampere = calib::load_profile(name);
    CHECK(ampere.attention_efficiency(AttentionKernel::flash_attention_2) == ampere.compute.attention_efficiency);
    CHECK_THROWS_AS(ampere.attention_efficiency(AttentionKernel::flash_attention_3), InputError);
  }
}

TEST_CASE("a training config names the FlashAttention generation it runs", "[kernels][attention][training]") {
  CHECK(parse_training_config(training_json(), "t.json").attention_kernel == AttentionKernel::profile);
  nlohmann::json fa2 = training_json();
  fa2["attention_kernel"] = "flash_attention_2";
  CHECK(parse_training_config(fa2, "t.json").attention_kernel == AttentionKernel::flash_attention_2);
  nlohmann::json unfused = fa2;
  unfused["flash_attention"] = false;
  CHECK_THROWS_WITH(parse_training_config(unfused, "t.json"),
                    Catch::Contains("attention_kernel") && Catch::Contains("flash_attention is false"));
  nlohmann::json unknown = training_json();
  unknown["attention_kernel"] = "flash_attention_1";
  CHECK_THROWS_WITH(parse_training_config(unknown, "t.json"),
                    Catch::Contains("attention_kernel") && Catch::Contains("flash_attention_1"));
}

TEST_CASE("every attention op of a step runs the training's kernel, and only its time changes",
          "[kernels][attention][step]") {
  const StepConfig fa2_config = one_gpu_step(AttentionKernel::flash_attention_2);
  const Program fa2 = compile(fa2_config);
  int attention_ops = 0;
  for (const RankProgram& program : fa2.programs) {
    for (const Op& op : program.ops) {
      if (op.kind != OpKind::compute || op.kernel != KernelClass::attention) continue;
      ++attention_ops;
      CHECK(op.attention_kernel == AttentionKernel::flash_attention_2);
    }
  }
  CHECK(attention_ops == 2 * 2);  // forward and backward, in each of the two layers

  const test::World world(topology::load_cluster_spec("dgx-a100-8node"),
                          calib::parse_profile(profile_with_kernels(), "p.json"));
  const auto step_seconds = [&world](const Program& program) {
    return seconds_from_picoseconds(
        sim::simulate(program, world.cluster(), world.router(), world.profile(), {}).step_time);
  };
  // One GPU runs its kernels one after another, so the step grows by the
  // attention time alone. Per layer the causal forward is 4 s^2 (heads x
  // head_dim) / 2 FLOPs and the backward 2.5 times that: 4 x 512^2 x 512 / 2
  // x 3.5 x 2 layers = 1,879,048,192 FLOPs, at 25 instead of 50 TFLOP/s.
  const double attention_flops = 4.0 * 512 * 512 * 512 / 2 * 3.5 * 2;
  const double expected = attention_flops / 25e12 - attention_flops / 50e12;
  const double fa3_seconds = step_seconds(compile(one_gpu_step(AttentionKernel::flash_attention_3)));
  CHECK(step_seconds(fa2) - fa3_seconds == Approx(expected).epsilon(1e-6));
}
