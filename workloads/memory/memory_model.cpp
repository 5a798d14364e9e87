#include "workloads/memory/memory_model.h"

#include "workloads/memory/parameter_fetch.h"

#include <algorithm>
#include <array>

namespace shardsim::workloads {

std::vector<std::pair<const char*, double>> memory_components(const MemoryBreakdown& memory) {
  return {{"parameters", memory.parameters},
          {"secondary_parameters", memory.secondary_parameters},
          {"gradients", memory.gradients},
          {"optimizer_states", memory.optimizer_states},
          {"activations", memory.activations},
          {"gathered_parameters", memory.gathered_parameters},
          {"communication_buffers", memory.communication_buffers}};
}

MemoryBreakdown estimate_memory(const ModelSpec& model, const TrainingConfig& training, const Plan& plan,
                                const ShardingFactors& factors, int data_parallel, const ExpertShardingFactors& experts) {
  const int ep = plan.experts.parallel;
  const double routed = routed_expert_parameters(model);
  // With ep = 1 the routed experts shard like every other module.
  const double psi = static_cast<double>(count_parameters(model).total()) - (ep > 1 ? routed : 0.0);
  const double psi_experts = ep > 1 ? routed / ep : 0.0;
  const ShardingFactors& fe = experts.factors;
  const double e = training.bytes_per_value;
  MemoryBreakdown memory;
  memory.parameters = e * psi / factors.parameters + e * psi_experts / fe.parameters;
  if (plan.secondary_parameter_group > 1) {
    memory.secondary_parameters = e * psi / plan.secondary_parameter_group + e * psi_experts / experts.secondary_group;
  }
  memory.gradients = e * psi / factors.gradients + e * psi_experts / fe.gradients;
  memory.optimizer_states =
      kOptimizerStateBytesPerParameter * psi / factors.optimizer + kOptimizerStateBytesPerParameter * psi_experts / fe.optimizer;
  memory.activations = activation_footprint(model, training, plan.model_parallel, plan.experts, plan.kernels).total();

  if (factors.parameters > 1) {
    // Persistent tensors held whole, plus the most the fetch schedule holds
    // gathered at once (over the hpZ group when gathered in the backward).
    const std::vector<ModuleParameters> modules = gathered_modules(model_modules(model, ep), plan, fe.parameters);
    const ParameterFetches fetches =
        plan_parameter_fetches(modules, model.head_layer(),
                               [&training](int layer) { return training.reruns_whole_layer(layer); }, plan, e, true);
    const auto bytes_per_element = [&](int parameter_factor, int secondary_group, bool backward) {
      return e * (1.0 - 1.0 / gather_group(parameter_factor, secondary_group, backward));
    };
    std::vector<std::array<double, 2>> module_bytes;
    for (const ModuleParameters& module : modules) {
      const bool expert_group = module.routed_experts && ep > 1;
      const int f = expert_group ? fe.parameters : factors.parameters;
      const int k = expert_group ? experts.secondary_group : plan.secondary_parameter_group;
      module_bytes.push_back({bytes_per_element(f, k, false), bytes_per_element(f, k, true)});
    }
    memory.gathered_parameters =
        fetches.persistent_elements * bytes_per_element(factors.parameters, plan.secondary_parameter_group, false) +
        peak_gathered_bytes(fetches.entries, fetches.schedule, fetches.elements, module_bytes);
  }
  // With more than one rank, gradients are reduced through a bucket (the
  // whole gradient when smaller); with f_P = 1 and sharded optimizer states
  // the updated parameters come back through an all-gather bucket at the end
  // of the step, not at the same time.
  if (data_parallel > 1) {
    const double gradient_bytes = e * (psi + psi_experts);
    double buffers = std::min(plan.buckets.reduce_bytes, gradient_bytes);
    if (factors.parameters == 1 && factors.optimizer > 1) {
      buffers = std::max(buffers, std::min(plan.buckets.all_gather_bytes, gradient_bytes));
    }
    memory.communication_buffers = buffers;
  }
  return memory;
}

}  // namespace shardsim::workloads
