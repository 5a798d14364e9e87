#include "workloads/inputs/sharding_systems.h"

#include <algorithm>
#include <stdexcept>

namespace shardsim::workloads {

namespace {

SystemBehaviour deepspeed_stage_3() {
  SystemBehaviour b;
  b.deepspeed_parameter_fetch = true;
  b.blocking_backward_reduce_scatter = true;
  return b;
}

std::vector<ShardingSystemRecord> make_registry() {
  // DeepSpeed ZeRO 0-3 (stage from the factors): stage 3 with DeepSpeed's
  // fetch and blocking reduce-scatter, ZeRO-1/2 with reduces to the owners
  // and the updated parameters gathered at the end of the step.
  SystemBehaviour zero = deepspeed_stage_3();
  zero.reduce_to_gradient_owners = true;
  zero.gathers_updated_parameters_at_step_end = true;
  zero.quantized_communication = true;
  // MiCS (Zhang et al. 2022), as DeepSpeed implements it.
  SystemBehaviour mics = deepspeed_stage_3();
  mics.replica_reduce_on_reduce_stream = true;
  mics.hierarchical_parameter_gather = true;
  // ZeRO++ (Wang et al. 2023): DeepSpeed stage 3 with hpZ, qwZ and qgZ.
  SystemBehaviour zero_plus_plus = deepspeed_stage_3();
  zero_plus_plus.secondary_parameter_copy = true;
  zero_plus_plus.quantized_communication = true;
  SystemBehaviour fsdp;
  fsdp.per_parameter_copies = true;
  fsdp.eager_kernels_by_default = true;
  SystemBehaviour amsp;
  amsp.whole_module_updates = true;
  SystemBehaviour megatron;
  megatron.compiler = StepCompiler::megatron_pipeline;
  megatron.fp32_gradients_for_bf16 = true;
  SystemBehaviour zero_pipeline;
  zero_pipeline.compiler = StepCompiler::zero_pipeline;

  return {
      {ShardingSystem::zero, "zero", "DeepSpeed ZeRO", zero, {"named", {"zero0", "zero1", "zero2", "zero3"}, {}}},
      {ShardingSystem::fsdp, "fsdp", "PyTorch FSDP", fsdp,
       {"named", {"fsdp-full-shard", "fsdp-shard-grad-op"}, {{"fsdp-hybrid-8", "fsdp-hybrid-{k}"}}}},
      {ShardingSystem::mics, "mics", "MiCS", mics, {"named", {}, {{"mics-8", "mics-{k}"}}}},
      {ShardingSystem::zero_plus_plus, "zeropp", "ZeRO++", zero_plus_plus,
       {"named", {}, {{"zeropp-hpz8", "zeropp-hpz{k}"}, {"zeropp-hpz8-qwz-qgz", "zeropp-hpz{k}-qwz-qgz"}}}},
      {ShardingSystem::amsp, "amsp", "AMSP", amsp, {"amsp", {"amsp-llama7b"}, {}}},
      {ShardingSystem::megatron, "megatron", "Megatron-LM", megatron, {"megatron", {"megatron-tp4-pp4"}, {}}},
      {ShardingSystem::zero_pipeline, "zero_pipeline", "ZeroPP (Tang et al. 2024)", zero_pipeline,
       {"zero-pipeline", {"zero-pipeline-pp4"}, {}}},
  };
}

}  // namespace

const std::vector<ShardingSystemRecord>& sharding_systems() {
  static const std::vector<ShardingSystemRecord> registry = [] {
    std::vector<ShardingSystemRecord> records = make_registry();
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (static_cast<std::size_t>(records[i].system) != i) throw std::logic_error("sharding_systems: out of order");
    }
    return records;
  }();
  return registry;
}

const ShardingSystemRecord& record_of(ShardingSystem system) {
  return sharding_systems().at(static_cast<std::size_t>(system));
}

const SystemBehaviour& behaviour_of(ShardingSystem system) { return record_of(system).behaviour; }

std::optional<ShardingSystem> parse_sharding_system(std::string_view name) {
  for (const auto& record : sharding_systems()) {
    if (record.name == name) return record.system;
  }
  return std::nullopt;
}

std::string to_string(ShardingSystem system) { return std::string(record_of(system).name); }

std::vector<std::string> system_names(bool (*filter)(const SystemBehaviour&)) {
  std::vector<std::string> names;
  for (const auto& record : sharding_systems()) {
    if (filter == nullptr || filter(record.behaviour)) names.emplace_back(record.name);
  }
  return names;
}

std::vector<std::string> search_families() {
  std::vector<std::string> families;
  for (const auto& record : sharding_systems()) {
    const std::string family(record.search.family);
    if (std::find(families.begin(), families.end(), family) == families.end()) families.push_back(family);
  }
  return families;
}

std::string search_preset(std::string_view family) {
  for (const auto& record : sharding_systems()) {
    if (record.search.family == family && !record.search.presets.empty()) {
      return std::string(record.search.presets.front());
    }
  }
  throw std::logic_error("search_preset: no system of family " + std::string(family) + " names a preset");
}

}  // namespace shardsim::workloads
