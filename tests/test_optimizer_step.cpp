// The optimizer step's memory traffic, counted pass by pass by hand
// (Megatron-LM's MixedPrecisionOptimizer.step(): gradients to fp32, the fp16
// unscale, the clipping norm, fused Adam, master weights back into the
// model's), and the step each compiler emits for its plan's shard.
#include "pipeline_checks.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/model.h"
#include "workloads/kernels/transformer_kernels.h"

#include <catch2/catch.hpp>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

OptimizerStep step_of(double gradient_bytes, bool loss_scaling) {
  OptimizerStep step;
  step.shard_parameters = 1;
  step.gradient_bytes_per_value = gradient_bytes;
  step.weight_bytes_per_value = 2;
  step.loss_scaling = loss_scaling;
  return step;
}

// The one optimizer op of rank 0's program.
const Op& optimizer_op(const Program& program) {
  const Op* found = nullptr;
  for (const Op& op : program.program_of(0).ops) {
    if (op.kind != OpKind::compute || op.kernel != KernelClass::optimizer) continue;
    REQUIRE(found == nullptr);
    found = &op;
  }
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("an optimizer step moves, per parameter of its shard, the passes Megatron-LM's step makes",
          "[optimizer][kernels]") {
  // bf16 with fp32 main gradients: norm 4, Adam 16 + 12, fp32 -> bf16 weights 4 + 2.
  CHECK(optimizer_bytes_per_parameter(step_of(4, false)) == 38);
  // bf16 gradients (ZeRO): first a copy to fp32, 2 + 4.
  CHECK(optimizer_bytes_per_parameter(step_of(2, false)) == 44);
  // fp16 with fp16 gradients and a loss scale: the copy, then unscale 4 + 4.
  CHECK(optimizer_bytes_per_parameter(step_of(2, true)) == 52);

  OptimizerStep step = step_of(4, false);
  step.shard_parameters = 1000;
  step.zeroed_gradient_bytes = 4 * 8000;
  const KernelSpec spec = optimizer_step(step);
  CHECK(spec.hbm_bytes == 38 * 1000 + 32000);
  CHECK(spec.flops == 12 * 1000);
  CHECK(spec.kernel == KernelClass::optimizer);
}

TEST_CASE("each compiler steps its shard: Megatron-LM zeroes its whole gradient buffer, ZeRO frees gradients",
          "[optimizer][step]") {
  const int data = 4;
  SECTION("Megatron-LM's distributed optimizer, bf16: fp32 gradients") {
    StepConfig config = test::pipeline_step("megatron-dp", 2, data, 1);
    const double psi = static_cast<double>(count_parameters(config.model).total());
    CHECK(optimizer_op(compile(config)).hbm_bytes == Approx(38 * psi / data + 4 * psi).epsilon(1e-12));
  }
  SECTION("Megatron-LM, fp16: fp16 gradients, a loss scale") {
    StepConfig config = test::pipeline_step("megatron-dp", 2, data, 1);
    config.training.fp16 = true;
    const double psi = static_cast<double>(count_parameters(config.model).total());
    CHECK(optimizer_op(compile(config)).hbm_bytes == Approx(52 * psi / data + 2 * psi).epsilon(1e-12));
  }
  SECTION("ZeRO-3, bf16: bf16 gradients, nothing zeroed") {
    StepConfig config = test::pipeline_step("zero3", 2, data, 1);
    const double psi = static_cast<double>(count_parameters(config.model).total());
    CHECK(optimizer_op(compile(config)).hbm_bytes == Approx(44 * psi / data).epsilon(1e-12));
  }
}
