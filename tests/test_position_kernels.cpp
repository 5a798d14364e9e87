// Position encodings' kernels: rotary positions rotate Q and K in every
// layer, read and written once each way; learned positions were added to
// the embedding and leave the layers alone. Counted by hand.
#include "pipeline_checks.h"
#include "workloads/kernels/transformer_kernels.h"

#include <catch2/catch.hpp>

#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

struct RotaryPasses {
  int forward = 0, backward = 0;
  double forward_bytes = 0;
};

RotaryPasses rotary_passes(PositionKind positions) {
  ModelSpec model = test::small_pipeline_model(3);
  model.kv_heads = 2;  // grouped keys: K is a quarter of Q's width
  model.positions = positions;
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 2;
  training.global_batch_sequences = 2;
  RotaryPasses passes;
  const auto is_rotary = [](const KernelSpec& spec) { return spec.name.find("rotary") != std::string::npos; };
  for (const ModuleWork& work : transformer_modules(model, training)) {
    for (const KernelSpec& spec : work.forward) {
      if (!is_rotary(spec)) continue;
      ++passes.forward;
      passes.forward_bytes += spec.hbm_bytes;
    }
    for (const KernelSpec& spec : work.backward) passes.backward += is_rotary(spec);
  }
  return passes;
}

}  // namespace

TEST_CASE("rotary positions cost a pass over Q and K per layer, learned positions none", "[kernels][positions]") {
  const RotaryPasses rotary = rotary_passes(PositionKind::rotary);
  CHECK(rotary.forward == 3);
  CHECK(rotary.backward == 3);
  // Per layer: Q (8 heads of 64) and K (2 heads of 64), read and written in bf16, for 2 x 512 tokens.
  CHECK(rotary.forward_bytes == Approx(3 * 2 * 2.0 * 1024 * (512 + 128)).epsilon(1e-12));
  const RotaryPasses learned = rotary_passes(PositionKind::learned);
  CHECK(learned.forward == 0);
  CHECK(learned.backward == 0);
}
