// Peak memory of one GPU under a plan, without simulating the step.
//
// Model states follow the sharding factors exactly (TECHNIQUES.md section 2):
//   parameters 2 Psi / f_P, gradients 2 Psi / f_G, optimizer states
//   12 Psi / f_OS (fp32 master weights and two Adam moments), plus ZeRO++'s
//   secondary parameter copy 2 Psi / k;
// so ZeRO-0..3 give 16 Psi, 4 Psi + 12 Psi / N, 2 Psi + 14 Psi / N, 16 Psi / N.
// A MoE model's routed experts count Psi_E / ep per GPU under expert
// parallelism over ep GPUs, sharded by the expert factors (plan.h) over the
// expert-data-parallel group: 2 Psi_E / (ep f'_P) parameters, and so on.
// On top: the activations of one micro-batch (activation_memory.h), the
// parameters gathered when f_P > 1 (the persistent tensors, and the most the
// plan's fetch schedule holds at once, parameter_fetch.h; less the GPU's own
// shard), and the buffers gradients are reduced through. The last two are the largest such
// buffers alive at once, not a timeline; the simulated step refines them.
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"
#include "workloads/memory/activation_memory.h"

#include <utility>
#include <vector>

namespace shardsim::workloads {

// Bytes per parameter of each model state under mixed-precision Adam.
inline constexpr double kOptimizerStateBytesPerParameter = 12.0;  // fp32 master, m, v

struct MemoryBreakdown {
  double parameters = 0;
  double secondary_parameters = 0;  // ZeRO++ hpZ copy
  double gradients = 0;
  double optimizer_states = 0;
  double activations = 0;
  double gathered_parameters = 0;
  double communication_buffers = 0;

  double model_states() const { return parameters + secondary_parameters + gradients + optimizer_states; }
  double total() const { return model_states() + activations + gathered_parameters + communication_buffers; }
};

// The parts by name (memory categories' names), in the order reports list them.
std::vector<std::pair<const char*, double>> memory_components(const MemoryBreakdown& memory);

// `experts`: resolve_expert_factors' result for the plan (unused by a dense model).
MemoryBreakdown estimate_memory(const ModelSpec& model, const TrainingConfig& training, const Plan& plan,
                                const ShardingFactors& factors, int data_parallel,
                                const ExpertShardingFactors& experts = {});


}  // namespace shardsim::workloads
