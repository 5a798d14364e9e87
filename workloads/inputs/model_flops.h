// The model FLOPs of a training step: the numerator of MFU, counted as
// Megatron-LM counts them, whatever the plan runs (no recompute, no padding).
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/training.h"

namespace shardsim::workloads {

// Model FLOPs of one step, Megatron-LM's count (Narayanan et al. 2021,
// appendix): forward + backward = 3 x forward GEMMs, attention not halved for
// the causal mask, no recompute. For a GPT block it is
// 72 B s L h^2 (1 + s / (6 h) + V / (12 h L)) with B sequences per step. A
// MoE layer counts what each token runs: the router, its k routed experts and
// the shared experts. Each MTP depth adds a layer of the last layer's kind,
// its norms and projection, 2 (3 h + 2 h^2) per token, and an LM head
// (Megatron-LM's num_floating_point_operations).
double model_flops_per_step(const ModelSpec& model, const TrainingConfig& training);

}  // namespace shardsim::workloads
