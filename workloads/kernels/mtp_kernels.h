// A multi-token-prediction depth's input module (model.h): what runs
// between the previous depth's hidden states and the depth's layer, as
// Megatron-Core's MultiTokenPredictionLayer runs it (DeepSeek-V3,
// arXiv:2412.19437 section 2.2).
//
// Forward: the tokens one step further ahead looked up in the embedding
// (vocabulary-parallel, summed over the tensor-parallel group as the
// embedding is), enorm on them and hnorm on the hidden states (this GPU's
// part of the sequence), the two concatenated into 2h values per token, and
// eh_proj: a column-parallel linear (2h -> h / t on this GPU) on that input
// gathered along the sequence, its output gathered along the hidden size
// (gather_from_tensor_model_parallel_region) and, under sequence
// parallelism, cut along the sequence again (no call). Transformer Engine's
// userbuffers do not cover eh_proj (initialize_ub), so its calls stay plain
// under tp_comm_overlap. Backward mirrors it: the output gradient gathered
// along the sequence (sequence parallelism), eh_proj's input gradient
// combined over the group, its weight gradient on the input gathered again,
// the norms', and the embedding's scatter-add.
#pragma once

#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/tensor_parallel_gemms.h"

#include <vector>

namespace shardsim::workloads {

// Fills `input`'s forward and backward; returns the forward's kernels from
// the norms on, which full recompute runs again (Megatron-Core checkpoints
// the projection with the layer, not the embedding lookup).
std::vector<KernelSpec> mtp_input(const ModelSpec& model, const LayerShapes& x, const ModelParallelism& parallel,
                                  const TensorParallelGemms& linear, double local_tokens, ModuleWork& input);

}  // namespace shardsim::workloads
