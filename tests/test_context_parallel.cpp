// Megatron-LM's context parallelism (transformer_kernels.h,
// attention_kernels.h) against closed forms: c GPUs share each micro-batch's
// sequence, so each runs 1/c of every kernel's work on c times the
// micro-batches (the same FLOPs per GPU and step), exchanges 2 (T / c) kv
// values of keys and values c - 1 times per layer forward and twice that in
// backward around its group, each attention block after the first waiting
// for its exchange, holds 1/c of the activations, and reduces gradients over
// data x context GPUs; Megatron's rank order puts the context rank between
// the tensor and the data rank.
#include "fixtures.h"
#include "pipeline_checks.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

constexpr int kGpus = 16, kLayers = 4;
constexpr double kTokens = 512, kBytes = 2;

// Tensor 2 x context c x data 16 / (2 c), 2 sequences of 512 tokens per
// data-parallel replica and step... before the context split.
StepConfig context_parallel(int c, int micro_batches_per_replica = 2) {
  StepConfig config = test::pipeline_step("megatron-dp", kLayers, kGpus / (2 * c), micro_batches_per_replica);
  config.plan.model_parallel.tensor = 2;
  config.plan.model_parallel.context = c;
  return config;
}

struct RankTotals {
  double flops = 0;  // every kernel but the optimizer's
  double ring_bytes = 0;
  int ring_calls = 0;
};

RankTotals totals(const Program& program, int rank) {
  RankTotals t;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind == OpKind::compute && op.kernel != KernelClass::optimizer) t.flops += op.flops;
    if (op.kind == OpKind::collective &&
        program.communicators[static_cast<std::size_t>(op.communicator)].name == "context_parallel") {
      REQUIRE(op.collective == CollectiveOp::send_recv);
      t.ring_bytes += op.bytes;
      ++t.ring_calls;
    }
  }
  return t;
}

}  // namespace

TEST_CASE("context parallelism: 1/c of the work on c times the micro-batches, keys and values around the ring",
          "[megatron][context]") {
  const Program plain = compile(context_parallel(1, 2));
  for (const int c : {2, 4}) {
    INFO("context " << c);
    // The global batch stays put: 16 / (2 c) replicas take 2 c sequences each.
    const StepConfig config = context_parallel(c, 2 * c);
    const Program program = compile(config);
    validate_program(program);
    REQUIRE(program.ranks == kGpus);
    REQUIRE(micro_batches_per_step(config) == 2 * c);
    const RankTotals t = totals(program, 3), none = totals(plain, 3);
    REQUIRE(none.ring_calls == 0);
    REQUIRE(t.flops == Approx(none.flops).epsilon(1e-12));
    // Per layer and micro-batch: c - 1 exchanges forward of this GPU's keys
    // and values, 2 (T / c) kv / t values (kv = 512 here, t = 2), and as many
    // backward carrying their gradients too.
    const double kv_bytes = kBytes * (kTokens / c) * 2 * 512 / 2;
    const double micro_batches = 2.0 * c;
    REQUIRE(t.ring_calls == 2 * (c - 1) * kLayers * micro_batches);
    REQUIRE(t.ring_bytes == Approx((c - 1) * kLayers * micro_batches * (kv_bytes + 2 * kv_bytes)));
    // Megatron's order, rank = tp + 2 (cp + c dp): rank 3 is tp 1, cp 1, dp 0.
    std::vector<int> ring;
    for (int cp = 0; cp < c; ++cp) ring.push_back(1 + 2 * cp);
    REQUIRE(test::communicator_named(program, "context_parallel").group_of(3) == ring);
    // Gradients reduce over every GPU holding the same parameters: data x context.
    REQUIRE(test::communicator_named(program, "data_parallel").group_size() == kGpus / 2);
    // 1/c of the tokens: 1/c of each micro-batch's activations.
    REQUIRE(estimate_stage_memory(config).front().activations ==
            Approx(estimate_stage_memory(context_parallel(1, 2)).front().activations / c));
    test::require_consistent_step(program, test::pipeline_world());
  }
}

TEST_CASE("each attention block after the first waits for the exchange that brought its keys and values",
          "[megatron][context]") {
  const Program program = compile(context_parallel(4, 8));
  const auto& ops = program.program_of(0).ops;
  const int ring = [&] {
    for (std::size_t i = 0; i < program.communicators.size(); ++i) {
      if (program.communicators[i].name == "context_parallel") return static_cast<int>(i);
    }
    return -1;
  }();
  int checked = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const std::string_view name = ops[i].name;
    if (ops[i].kind != OpKind::compute || name.find(".block") == std::string_view::npos) continue;
    const char block = name.back();
    bool after_exchange = false;
    for (std::uint32_t dep : ops[i].deps) {
      if (ops[dep].kind == OpKind::collective && ops[dep].communicator == ring) {
        after_exchange = true;
        // Block k of a pass waits for its exchange, step k.
        REQUIRE(ops[dep].name.back() == block);
      }
    }
    INFO(name);
    REQUIRE(after_exchange == (block != '0'));
    ++checked;
  }
  REQUIRE(checked == 2 * 4 * kLayers * 8);  // forward and backward, 4 blocks, per layer and micro-batch
}

TEST_CASE("context parallelism is refused where it is not modelled, naming why", "[megatron][context][input]") {
  StepConfig unfused = context_parallel(2, 4);
  unfused.training.flash_attention = false;
  REQUIRE_THROWS_WITH(compile(unfused), Catch::Contains("flash"));
  StepConfig uneven = context_parallel(2, 4);
  uneven.training.sequence_length = 510;  // not a multiple of 2 c = 4
  REQUIRE_THROWS_WITH(compile(uneven), Catch::Contains("sequence_length (510)"));
  nlohmann::json zero_pipeline = nlohmann::json::parse(R"({
    "name": "zpp", "system": "zero_pipeline", "factors": {"parameters": 8, "gradients": 8, "optimizer": 8},
    "secondary_parameter_group": 1,
    "buckets": {"reduce_bytes": 1e9, "all_gather_bytes": 1e9, "prefetch_bytes": 0, "persistence_threshold_parameters": 0},
    "overlap": {"gather_scatter": true, "optimizer_all_reduce": true, "parameter_broadcast": true},
    "behaviour": "as_implemented", "multi_rank_bucketing": false, "flat_all_gather": false,
    "model_parallel": {"pipeline": 2, "virtual_stages": 2, "scheduling_unit": 2, "context_parallel": 2},
    "sources": ["t"]})");
  REQUIRE_THROWS_WITH(parse_plan(zero_pipeline, "zpp.json"),
                      Catch::Contains("zpp.json") && Catch::Contains("model_parallel.context_parallel"));
}

TEST_CASE("Megatron-LM's --context-parallel-size splits the GPUs left after tensor and pipeline", "[megatron-args][context]") {
  const MegatronJob job = parse_megatron_args(
      "--tensor-model-parallel-size 2 --context-parallel-size 4 --micro-batch-size 1 --global-batch-size 8 --bf16",
      "args.sh", load_model("llama-7b"), load_training_config("seq4096-mbs1-4m-tokens"), 16, 8);
  REQUIRE(job.plan.model_parallel.context == 4);
  REQUIRE(job.data_parallel == 2);
  REQUIRE(job.plan.name == "megatron-t2-p1-c4");
}
