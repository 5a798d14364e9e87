#include "workloads/memory_model.h"

#include "workloads/parameter_fetch.h"

#include <algorithm>

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
                                const ShardingFactors& factors, int data_parallel) {
  const double psi = static_cast<double>(count_parameters(model).total());
  const double e = training.bytes_per_value;
  MemoryBreakdown memory;
  memory.parameters = e * psi / factors.parameters;
  if (plan.secondary_parameter_group > 1) memory.secondary_parameters = e * psi / plan.secondary_parameter_group;
  memory.gradients = e * psi / factors.gradients;
  memory.optimizer_states = kOptimizerStateBytesPerParameter * psi / factors.optimizer;
  memory.activations = activation_footprint(model, training).total();

  if (factors.parameters > 1) {
    // Persistent tensors held whole, plus the most the fetch schedule holds
    // gathered at once (over the hpZ group when gathered in the backward).
    const ParameterFetches fetches = plan_parameter_fetches(
        model_modules(model), model.layers, training.recompute == Recompute::full, plan, e, true);
    const auto bytes_per_element = [&](bool backward) {
      return e * (1.0 - 1.0 / gather_group(plan, factors.parameters, backward));
    };
    memory.gathered_parameters =
        fetches.persistent_elements * bytes_per_element(false) +
        peak_gathered_bytes(fetches.entries, fetches.schedule, fetches.elements,
                            {bytes_per_element(false), bytes_per_element(true)});
  }
  // With more than one rank, gradients are reduced through a bucket (the
  // whole gradient when smaller); with f_P = 1 and sharded optimizer states
  // the updated parameters come back through an all-gather bucket at the end
  // of the step, not at the same time.
  if (data_parallel > 1) {
    double buffers = std::min(plan.buckets.reduce_bytes, e * psi);
    if (factors.parameters == 1 && factors.optimizer > 1) {
      buffers = std::max(buffers, std::min(plan.buckets.all_gather_bytes, e * psi));
    }
    memory.communication_buffers = buffers;
  }
  return memory;
}

}  // namespace shardsim::workloads
