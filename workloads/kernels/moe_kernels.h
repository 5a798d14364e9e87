// A MoE layer's kernels: a router, optional shared experts, and the routed
// experts as grouped GEMMs between the calls of the plan's token dispatcher
// (plan.h): all-to-alls that send each token copy to its expert's rank and
// back, or an all-gather of the expert-parallel group's tokens and a
// reduce-scatter of their outputs (Megatron-Core's allgather dispatcher).
#pragma once

#include "workloads/inputs/plan.h"
#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/tensor_parallel_gemms.h"

namespace shardsim::workloads {

// Fills a MoE layer's two modules (transformer_kernels.h): `mlp` (norm,
// router, shared experts) and `experts` (dispatch, the local routed experts,
// combine, residual). Under tensor parallelism (sequence parallelism on, as
// Megatron-LM requires) the shared experts split over the group through
// `linear`; the router and the routed experts stay whole on every GPU
// (expert tensor parallelism 1), taking this GPU's T / t tokens. With
// `parallelism.shared_expert_overlap` (all-to-all dispatcher only) the
// shared experts move into `experts` as a side-stream chain
// (transformer_kernels.h's KernelSpec) forked after the router and joined
// by the residual add, making their own sequence-parallel calls; backward,
// forked after the residual's gradient and joined by the permutation's.
// Returns where the parts selective recompute reruns lie in the forward
// lists.
struct MoeForwardParts {
  std::size_t norm = 0;                         // mlp.forward: the MLP-block norm
  std::size_t shared_begin = 0, shared_end = 0;  // mlp.forward: the shared experts (empty when overlapped or none)
  std::size_t activation = 0;                   // experts.forward: the routed experts' activation
};
MoeForwardParts moe_block(const ModelSpec& model, const LayerShapes& x, const ModelParallelism& parallel,
                          const TensorParallelGemms& linear, const ExpertParallelism& parallelism, ModuleWork& mlp,
                          ModuleWork& experts);

}  // namespace shardsim::workloads
