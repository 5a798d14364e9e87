// The registry of sharding systems (workloads/inputs/sharding_systems.h)
// against what each system's implementation does, as TECHNIQUES.md and the
// systems' papers describe it, and the plan reader's use of it.
#include "topology/base/json_input.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/sharding_systems.h"

#include <catch2/catch.hpp>

#include <set>

using namespace shardsim::workloads;

TEST_CASE("every system has one record, its name reading back to it", "[plan][systems]") {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < sharding_systems().size(); ++i) {
    const ShardingSystemRecord& record = sharding_systems()[i];
    INFO(record.name);
    CHECK(static_cast<std::size_t>(record.system) == i);  // registry order is the enum's
    CHECK(names.insert(record.name).second);
    CHECK(parse_sharding_system(record.name) == record.system);
    CHECK(to_string(record.system) == record.name);
    CHECK_FALSE(record.title.empty());
  }
  CHECK_FALSE(parse_sharding_system("zero++").has_value());
  // The plan files' names, which users already have, are kept.
  CHECK(system_names() ==
        std::vector<std::string>{"zero", "fsdp", "mics", "zeropp", "amsp", "megatron", "zero_pipeline"});
}

TEST_CASE("the registry's behaviours are the systems' published ones", "[plan][systems]") {
  const auto with = [](bool SystemBehaviour::*flag) {
    std::set<ShardingSystem> systems;
    for (const auto& record : sharding_systems()) {
      if (record.behaviour.*flag) systems.insert(record.system);
    }
    return systems;
  };
  using S = ShardingSystem;
  // DeepSpeed's stage-3 coordinator runs ZeRO-3 and the systems DeepSpeed
  // builds on it, MiCS and ZeRO++; FSDP prefetches one layer ahead.
  CHECK(with(&SystemBehaviour::deepspeed_parameter_fetch) == std::set{S::zero, S::mics, S::zero_plus_plus});
  CHECK(with(&SystemBehaviour::blocking_backward_reduce_scatter) == std::set{S::zero, S::mics, S::zero_plus_plus});
  CHECK(with(&SystemBehaviour::replica_reduce_on_reduce_stream) == std::set{S::mics});
  CHECK(with(&SystemBehaviour::reduce_to_gradient_owners) == std::set{S::zero});
  CHECK(with(&SystemBehaviour::gathers_updated_parameters_at_step_end) == std::set{S::zero});
  CHECK(with(&SystemBehaviour::whole_module_updates) == std::set{S::amsp});
  CHECK(with(&SystemBehaviour::fp32_gradients_for_bf16) == std::set{S::megatron});
  CHECK(with(&SystemBehaviour::secondary_parameter_copy) == std::set{S::zero_plus_plus});
  CHECK(with(&SystemBehaviour::hierarchical_parameter_gather) == std::set{S::mics});
  CHECK(with(&SystemBehaviour::quantized_communication) == std::set{S::zero, S::zero_plus_plus});
  std::set<ShardingSystem> pipelines;
  for (const auto& record : sharding_systems()) {
    if (record.behaviour.pipelines()) pipelines.insert(record.system);
  }
  CHECK(pipelines == std::set{S::megatron, S::zero_pipeline});
  CHECK(behaviour_of(S::megatron).compiler == StepCompiler::megatron_pipeline);
  CHECK(behaviour_of(S::zero_pipeline).compiler == StepCompiler::zero_pipeline);
}

TEST_CASE("a plan field only some systems take is refused elsewhere, naming the system that takes it",
          "[plan][systems]") {
  const auto plan = [](const std::string& system, const std::string& extra) {
    nlohmann::json document = nlohmann::json::parse(R"({"name": "p", "system": ")" + system + R"(",
      "factors": {"parameters": "all", "gradients": "all", "optimizer": "all"},
      "secondary_parameter_group": 1,
      "buckets": {"reduce_bytes": 1e8, "all_gather_bytes": 1e8, "prefetch_bytes": 0,
                  "persistence_threshold_parameters": 0},
      "overlap": {"gather_scatter": true, "optimizer_all_reduce": true, "parameter_broadcast": true},
      "behaviour": "as_implemented", "multi_rank_bucketing": false, "flat_all_gather": false,
      "sources": []})");
    document.update(nlohmann::json::parse(extra));
    return document;
  };
  CHECK_NOTHROW(parse_plan(plan("zeropp", R"({"secondary_parameter_group": 8})"), "p.json"));
  CHECK_THROWS_WITH(parse_plan(plan("fsdp", R"({"secondary_parameter_group": 8})"), "p.json"),
                    Catch::Contains("secondary_parameter_group") && Catch::Contains("\"zeropp\""));
  CHECK_NOTHROW(parse_plan(plan("mics", R"({"hierarchical_parameter_gather": true})"), "p.json"));
  CHECK_THROWS_WITH(parse_plan(plan("zero", R"({"hierarchical_parameter_gather": true})"), "p.json"),
                    Catch::Contains("MiCS's"));
  CHECK_NOTHROW(parse_plan(plan("zero", R"({"quantized_weights": true})"), "p.json"));
  CHECK_THROWS_WITH(parse_plan(plan("amsp", R"({"quantized_weights": true})"), "p.json"),
                    Catch::Contains("systems \"zero\" and \"zeropp\""));
  // Ulysses is the data-parallel systems', each named.
  CHECK_THROWS_WITH(
      parse_plan(plan("zero_pipeline", R"({"factors": {"parameters": 8, "gradients": 8, "optimizer": 8},
                                           "model_parallel": {"pipeline": 2, "scheduling_unit": 2, "ulysses": 2}})"),
                 "p.json"),
      Catch::Contains("(zero, fsdp, mics, zeropp, amsp)"));
}
