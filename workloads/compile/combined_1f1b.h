// Combined 1F1B: the order in which Megatron-Core writes the forward of one
// micro-batch and the backward of another as one pass, so that each one's
// expert-parallel all-to-alls run while the other computes
// (--overlap-moe-expert-parallel-comm, "batch-level overlapping" of MCore
// v0.14; megatron/core/models/common/model_chunk_schedule_plan.py,
// schedule_chunk_1f1b and schedule_layer_1f1b).
//
// Megatron-Core cuts every layer into four nodes: attn (the attention block,
// the MLP norm, the shared experts, the router and the permutation), dispatch
// (the all-to-all), mlp (the routed experts; a dense layer's whole MLP
// block) and combine (the all-to-all back, the unpermutation and the
// residual add). attn and mlp run on the compute stream; dispatch and
// combine, kernels included, on a communication stream of their own, which
// is what lets the compute stream run the other micro-batch's kernels
// meanwhile. A backward node runs on its forward's stream. For forward layer
// i paired with backward layer j (the chunks' layers taken from both ends),
// the streams are fed
//
//   combine(i-1) | attn.backward(j+1) | combine.backward(j) | attn.dw(j+1) |
//   attn(i) | dispatch(i) | mlp.backward(j) | dispatch.backward(j) |
//   mlp.dw(j) | mlp(i)
//
// so combine(i-1) runs under attn.backward(j+1), combine.backward(j) under
// attn(i), dispatch(i) under mlp.backward(j) and dispatch.backward(j) under
// mlp.dw(j) and mlp(i). The first pair starts from the embedding's forward
// and the head's backward (the chunks' pre- and post-process); the layers
// one pass has more of than the other run alone after the pairs (the
// backward's first, then the embedding's backward, then the forward's and
// the head's forward). The pipeline sends go next; the last attn.dw after them.
//
// The ".dw" nodes exist under --delay-wgrad-compute: the weight-gradient half
// of a node's backward (KernelSpec::weight_gradient) then runs apart from its
// input-gradient half, where the order above puts it. Without it a node's
// backward computes both, and the dw nodes are empty.
#pragma once

#include "workloads/compile/op_writer.h"

#include <cstddef>
#include <vector>

namespace shardsim::workloads {

enum class KernelListKind : std::uint8_t { forward, recompute, backward };

// Entries of one module's kernel list that are written together.
struct KernelRange {
  bool forward_pass = true;  // of the step's forward, else of its backward
  std::size_t module = 0;    // index into the modules
  KernelListKind list = KernelListKind::forward;
  ListRange entries;  // kernel_stream unset: see on_communication_stream
  // Kernels too on the all-to-all's stream: Megatron-Core's dispatch and combine nodes.
  bool on_communication_stream = false;
  bool starts_module = false;    // the module's first forward range (its activations are allocated)
  bool finishes_module = false;  // the module's last backward range (its gradients are done)
};

// The module's list a range's entries index.
const std::vector<KernelSpec>& kernel_list(const ModuleWork& work, KernelListKind kind);

struct CombinedOrder {
  std::vector<KernelRange> before_sends, after_sends;
};

// The ranges of a step whose forward runs the modules `forward` (indices
// into `modules`, forward order; null: no forward) and whose backward runs
// `backward` (null: no backward), in Megatron-Core's order. A module whose
// layer is below 0 is the embedding, at `head_layer` (ModelSpec::head_layer)
// the head. Every entry of every list the two passes run lies in exactly one
// range.
CombinedOrder combined_1f1b_order(const std::vector<ModuleWork>& modules, int head_layer,
                                  const std::vector<std::size_t>* forward, const std::vector<std::size_t>* backward,
                                  bool delay_weight_gradients);

}  // namespace shardsim::workloads
