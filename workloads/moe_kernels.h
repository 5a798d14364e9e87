// A MoE layer's kernels: a router, optional shared experts, and the routed
// experts as grouped GEMMs between the all-to-alls that dispatch tokens to
// their experts' ranks and combine them back.
#pragma once

#include "workloads/kernel_specs.h"

namespace shardsim::workloads {

// Fills a MoE layer's two modules (transformer_kernels.h): `mlp` (norm,
// router, shared experts) and `experts` (dispatch, the local routed experts,
// combine, residual).
void moe_block(const ModelSpec& model, const LayerShapes& x, const ExpertParallelism& parallelism, ModuleWork& mlp,
               ModuleWork& experts);

}  // namespace shardsim::workloads
