#include "topology/base/json_input.h"
#include "workloads/import/deepspeed_config.h"
#include "workloads/import/model_file.h"

#include <catch2/catch.hpp>

using namespace shardsim::workloads;

namespace {

DeepSpeedConfig import(const char* text) {
  static const ModelSpec model = load_model("llama-7b");
  return parse_deepspeed_config(nlohmann::json::parse(text), "ds.json", model);
}

}  // namespace

TEST_CASE("ZeRO stages become their sharding factors", "[deepspeed]") {
  const std::vector<FactorSpec> expected = {{1, 1, 1}, {1, 1, 0}, {1, 0, 0}, {0, 0, 0}};  // 0 = all
  for (int stage = 0; stage <= 3; ++stage) {
    const auto ds = import(("{\"zero_optimization\": {\"stage\": " + std::to_string(stage) + "}}").c_str());
    REQUIRE(ds.plan.factors.parameters == expected[static_cast<std::size_t>(stage)].parameters);
    REQUIRE(ds.plan.factors.gradients == expected[static_cast<std::size_t>(stage)].gradients);
    REQUIRE(ds.plan.factors.optimizer == expected[static_cast<std::size_t>(stage)].optimizer);
    // overlap_comm is on by default for stage 3 only.
    REQUIRE(ds.plan.overlap.gather_scatter == (stage == 3));
    REQUIRE(ds.plan.as_implemented);
  }
}

TEST_CASE("bucket sizes are elements, auto resolves as transformers does", "[deepspeed]") {
  // Defaults: 5e8 and 5e7 elements of 2 bytes; persistence 1e5 parameters.
  const auto defaults = import(R"({"zero_optimization": {"stage": 3}})");
  REQUIRE(defaults.plan.buckets.reduce_bytes == 1e9);
  REQUIRE(defaults.plan.buckets.all_gather_bytes == 1e9);
  REQUIRE(defaults.plan.buckets.prefetch_bytes == 1e8);
  REQUIRE(defaults.plan.buckets.persistence_threshold_parameters == 1e5);
  REQUIRE(defaults.plan.buckets.max_live_parameters == 1e9);
  REQUIRE(defaults.plan.buckets.max_reuse_distance_parameters == 1e9);
  const auto limits = import(R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 3e8,
      "stage3_max_reuse_distance": 0}})");
  REQUIRE(limits.plan.buckets.max_live_parameters == 3e8);  // parameters, not bytes
  REQUIRE(limits.plan.buckets.max_reuse_distance_parameters == 0);
  // "auto" with hidden 4096: reduce h^2, prefetch 0.9 h^2, persistence 10 h.
  const auto automatic = import(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})");
  REQUIRE(automatic.plan.buckets.reduce_bytes == 2.0 * 4096 * 4096);
  REQUIRE(automatic.plan.buckets.prefetch_bytes == Approx(2 * 0.9 * 4096 * 4096));
  REQUIRE(automatic.plan.buckets.persistence_threshold_parameters == 40960);
  const auto explicit_sizes = import(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e8,
      "allgather_bucket_size": 3e8, "overlap_comm": true}})");
  REQUIRE(explicit_sizes.plan.buckets.reduce_bytes == 4e8);
  REQUIRE(explicit_sizes.plan.buckets.all_gather_bytes == 6e8);
  REQUIRE(explicit_sizes.plan.overlap.gather_scatter);
}

TEST_CASE("ZeRO-1/2 gradient reduction: multi-rank bucketing unless turned off, all-reduce without reduce_scatter",
          "[deepspeed]") {
  REQUIRE(import(R"({"zero_optimization": {"stage": 2}})").plan.multi_rank_bucketing);
  REQUIRE_FALSE(
      import(R"({"zero_optimization": {"stage": 2, "use_multi_rank_bucket_allreduce": false}})").plan.multi_rank_bucketing);
  REQUIRE(import(R"({"zero_optimization": {"stage": 1, "reduce_scatter": false,
      "use_multi_rank_bucket_allreduce": false}})").plan.multi_rank_bucketing);
}

TEST_CASE("offload to cpu or nvme is said to be unmodelled, not taken silently", "[deepspeed]") {
  // transformers' ZeRO-3 example config with both offloads.
  const auto offloaded = import(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "nvme", "nvme_path": "/local_nvme"}}})");
  REQUIRE(offloaded.notes.size() == 2);
  REQUIRE_THAT(offloaded.notes[0], Catch::Contains("ds.json: zero_optimization.offload_optimizer.device \"cpu\": "
                                                   "offload is not modelled; the optimizer states"));
  REQUIRE_THAT(offloaded.notes[1], Catch::Contains("offload_param.device \"nvme\"") && Catch::Contains("parameters"));
  REQUIRE(import(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"}}})").notes.empty());
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": 1}}})"),
                      Catch::Contains("ds.json: zero_optimization.offload_param.device: must be a string"));
}

TEST_CASE("MiCS and ZeRO++ settings pick those systems", "[deepspeed]") {
  const auto mics = import(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 8,
      "mics_hierarchical_params_gather": true}})");
  REQUIRE(mics.plan.system == ShardingSystem::mics);
  REQUIRE(mics.plan.factors.parameters == 8);
  REQUIRE(mics.plan.hierarchical_parameter_gather);
  REQUIRE(import(R"({"zero_optimization": {"stage": 3, "mics_shard_size": -1}})").plan.system == ShardingSystem::zero);
  const auto zeropp = import(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})");
  REQUIRE(zeropp.plan.system == ShardingSystem::zero_plus_plus);
  REQUIRE(zeropp.plan.secondary_parameter_group == 8);
}

TEST_CASE("any two of the batch sizes give the third, and all three must agree", "[deepspeed]") {
  const TrainingConfig base = load_training_config("seq4096-mbs1-4m-tokens");
  // 512 = 2 x 4 x 64.
  auto training = apply_deepspeed_batch(base, import(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})"), 64);
  REQUIRE(training.global_batch_sequences == 512);
  REQUIRE(training.micro_batch_size == 2);
  training = apply_deepspeed_batch(base, import(R"({"train_batch_size": 512, "gradient_accumulation_steps": 4})"), 64);
  REQUIRE(training.micro_batch_size == 2);
  training = apply_deepspeed_batch(base, import(R"({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 2})"), 64);
  REQUIRE(gradient_accumulation_steps(training, 64, "ds.json") == 4);
  REQUIRE_THROWS_WITH(apply_deepspeed_batch(base, import(R"({"train_batch_size": 500,
      "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})"), 64),
                      "ds.json: train_batch_size: 500 != micro-batch 2 x accumulation 4 x 64 GPUs");
  REQUIRE(apply_deepspeed_batch(base, import(R"({"fp16": {"enabled": true}})"), 8).fp16);
}

TEST_CASE("DeepSpeed keys of the wrong type or range are refused", "[deepspeed]") {
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": "three"}})"),
                      "ds.json: zero_optimization.stage: must be an integer, got \"three\"");
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": 4}})"),
                      "ds.json: zero_optimization.stage: must be 0, 1, 2 or 3, got 4");
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "big"}})"),
                      "ds.json: zero_optimization.reduce_bucket_size: must be a non-negative number or \"auto\", got \"big\"");
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": 2, "zero_hpz_partition_size": 8}})"),
                      "ds.json: zero_optimization.zero_hpz_partition_size: needs stage 3 (ZeRO++)");
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": [3]})"), "ds.json: zero_optimization: must be an object, got [3]");
  REQUIRE_THROWS_WITH(import(R"({"train_batch_size": 0})"), "ds.json: train_batch_size: must be positive, got 0");
  // Past an int: 2^31 once narrowed to -2147483648, 2^63 - 1 steps to -1 steps.
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2147483648}})"),
                      "ds.json: zero_optimization.zero_hpz_partition_size: must be a GPU count (at most 16777216), "
                      "got 2147483648");
  REQUIRE_THROWS_WITH(import(R"({"zero_optimization": {"stage": 3, "mics_shard_size": 4294967296}})"),
                      Catch::StartsWith("ds.json: zero_optimization.mics_shard_size: must be a GPU count"));
  REQUIRE_THROWS_WITH(import(R"({"gradient_accumulation_steps": 9223372036854775807})"),
                      "ds.json: gradient_accumulation_steps: must be at most 2147483647, got 9223372036854775807");
}
