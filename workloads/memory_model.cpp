#include "workloads/memory_model.h"

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

namespace {

// Parameters of the largest module pair alive at once while f_P > 1: the
// module being computed and the one prefetched, layer by layer, with the
// embedding before the first layer and the LM head after the last.
double largest_gathered_parameters(const ModelSpec& model) {
  const ParameterCount count = count_parameters(model);
  double largest_layer = 0;
  for (int layer = 0; layer < model.layers; ++layer) {
    largest_layer = std::max(largest_layer, static_cast<double>(attention_parameters(model) + mlp_parameters(model, layer) +
                                                                 2 * norm_parameters(model)));
  }
  const double first = static_cast<double>(count.embedding) + largest_layer;
  const double last = static_cast<double>(count.lm_head + count.final_norm) + largest_layer;
  return std::max({model.layers > 1 ? 2 * largest_layer : largest_layer, first, last});
}

}  // namespace

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
    memory.gathered_parameters =
        e * largest_gathered_parameters(model) * (1.0 - 1.0 / factors.parameters);
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
