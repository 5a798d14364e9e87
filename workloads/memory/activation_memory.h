// Activation memory: the tensors a layer keeps from its forward pass for its
// backward pass, per token.
//
// Counted as Korthikanti et al. 2022 ("Reducing Activation Recomputation in
// Large Transformer Models", section 4) count them, tensor by tensor, and
// generalised to the shapes shardsim models. With e bytes per value, h the
// hidden size, a heads, s the sequence length and f the MLP width:
//   attention: norm input e h, QKV GEMM input e h, Q, K, V after the rotary
//     embedding e (q + 2 kv) (q, kv the query and key/value widths), the
//     attention output that feeds the output projection e q; without flash
//     attention the softmax probabilities e a s, with it the row
//     log-sum-exps 4 a (fp32);
//   MLP: norm input e h, first GEMM input e h; SwiGLU keeps gate, up and their
//     product e 3f, GELU its input and output e 2f. In an MoE layer the first
//     GEMM is the router, which keeps its logits e E; each of the c k token
//     copies routed to the experts (c the capacity factor: a padded slot takes
//     memory too) keeps its permuted input e h for the expert's weight
//     gradient, the expert MLP's tensors, and the expert's output e h, which
//     the weighted combine needs for the gradient of the routing weights; the
//     shared experts keep their MLP's tensors (under Megatron-Core's
//     --moe-shared-expert-overlap, their first linear keeps its input
//     gathered along the sequence, e h whatever sequence parallelism splits).
// Dropout (the training config's, off by default as modern pretraining runs
// without it) keeps one-byte masks: two per layer for the hidden dropouts,
// and without flash attention one per score plus the dropped probabilities.
// For GPT-3-style blocks this is Korthikanti's 34 s b h + 5 a s^2 b.
// Selective recompute drops what the modules it rebuilds make (training.h):
// core_attn the softmax term (and the log-sum-exps), layernorm the outputs
// of the norms that are kernels of their own (e h each), mla_up_proj Q, K
// and V, moe_act the activation's output of each routed copy (e f), mlp a
// dense MLP's tensors, shared_experts the shared experts'. Full recompute
// keeps only each layer's input (e h) and rebuilds one layer at a time in
// backward. The loss keeps bf16 logits and their fp32 upcast for the
// cross-entropy (e + 4) V per token, plus the inputs of the final norm and
// the LM head.
//
// PyTorch eager modules (KernelImplementation::eager, transformer_kernels.h)
// keep more: keys and values repeated to every query head before attention
// when there are fewer key/value heads (torchtitan's repeat_kv, whose copies
// the attention saves), all four SwiGLU tensors (gate, its SiLU, up and the
// product: 4 e f), and the loss its log-softmax output in the training
// dtype (2 e V for the logits and it). Full recompute with an interval k
// rebuilds every k-th layer and keeps the others whole. torchtitan's "ops"
// policy keeps each layer's input, the outputs of wq, wv, w1 and w2 and of
// the fused attention (with its log-sum-exps), and rebuilds the rest, one
// layer at a time (so its working memory is a whole layer's).
//
// Under tensor parallelism over t GPUs (Korthikanti et al. section 4.2.2)
// every tensor split by heads or by the MLP or vocabulary width is 1/t per
// GPU; the norm and GEMM inputs (4 e h per layer, 2 e h in the head) stay
// whole, unless sequence parallelism splits them along the sequence too, so
// that everything is 1/t (Korthikanti's 34 s b h / t + 5 a s^2 b / t).
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace shardsim::workloads {

struct ActivationFootprint {
  double layers_bytes = 0;            // kept by all layers until their backward
  double head_bytes = 0;              // final norm, LM head, logits and loss
  double recompute_working_bytes = 0; // one layer (full recompute) or one module's parts (selective) rebuilt
  double head_working_bytes = 0;      // the loss's copies of the logits, in its forward or backward
  // Not a timeline: the largest working set is held beside everything kept.
  double total() const { return layers_bytes + head_bytes + std::max(recompute_working_bytes, head_working_bytes); }
};

// Bytes one layer keeps per token, on one GPU of its tensor-parallel group:
// all it makes, less what selective recompute rebuilds; under full recompute
// what the rebuilt layer holds (no softmax term: it runs the core without
// keeping it).
double layer_activation_bytes_per_token(const ModelSpec& model, const TrainingConfig& training, int layer,
                                        const ModelParallelism& parallel = {}, const ExpertParallelism& experts = {},
                                        KernelImplementation kernels = KernelImplementation::fused);

// What torchtitan's "ops" policy keeps of a dense layer per token (training.h),
// for the GEMMs each implementation runs.
double ops_policy_kept_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                       const ModelParallelism& parallel = {},
                                       KernelImplementation kernels = KernelImplementation::fused);

// What selective recompute rebuilds of a layer per token, by the module that
// rebuilds it before its backward (transformer_kernels.h): the attention
// (core_attn, its layernorm, mla_up_proj), the MLP block (a MoE layer's
// norm, mlp, shared_experts) and a MoE layer's routed experts (moe_act).
struct RecomputedBytes {
  double attention = 0, mlp = 0, experts = 0;
};
RecomputedBytes recomputed_bytes_per_token(const ModelSpec& model, const TrainingConfig& training, int layer,
                                           const ModelParallelism& parallel = {}, const ExpertParallelism& experts = {},
                                           KernelImplementation kernels = KernelImplementation::fused);

// What full recompute keeps of a layer: its input (split along the sequence
// under sequence parallelism).
double layer_input_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                   const ModelParallelism& parallel = {});

// What an MTP depth's input module keeps (mtp_kernels.h): the inputs of
// enorm, hnorm and eh_proj, 4 e h (split along the sequence under sequence
// parallelism, as Megatron keeps eh_proj's input and gathers it again).
double mtp_input_activation_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                            const ModelParallelism& parallel = {});

// The head's, once for the model's prediction and once for each MTP
// depth's: the final norm's and the LM head's inputs, and what the loss keeps
// for its backward, the logits' softmax (Megatron-Core) or log-softmax
// (PyTorch's cross_entropy) in fp32. Every framework computes the loss of
// bf16 logits in fp32 (head_working_bytes_per_token), so the kernels'
// implementation does not change it.
double head_activation_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                       const ModelParallelism& parallel = {});

// The tensors the loss allocates on top of what it keeps, per token and in
// order, while its forward and its backward run, freed when each ends: the
// logits' copies. Megatron-Core (megatron/core/tensor_parallel/cross_entropy.py at
// 00611e6e: calculate_logits_max upcasts, every later step is in place, the
// backward writes the gradient into the saved softmax) holds the bf16
// logits beside their fp32 copy in the forward, and the gradient's bf16
// cast beside the fp32 one in the backward (autograd casts a gradient to
// its input's dtype). Eager PyTorch (torchtitan's loss_fn,
// cross_entropy(pred.float()); Hugging Face's logits.float()) holds the bf16
// logits, their fp32 copy and the log-softmax output at once in the forward,
// and the nll_loss gradient beside log_softmax's in the backward, both fp32.
struct LossWorkingBytes {
  std::vector<double> forward, backward;
  double forward_total() const { return std::accumulate(forward.begin(), forward.end(), 0.0); }
  double backward_total() const { return std::accumulate(backward.begin(), backward.end(), 0.0); }
};
LossWorkingBytes head_working_bytes_per_token(const ModelSpec& model, const TrainingConfig& training,
                                              const ModelParallelism& parallel = {},
                                              KernelImplementation kernels = KernelImplementation::fused);

// One micro-batch of one rank holding every layer (no pipeline), its share of
// the tokens under DeepSpeed-Ulysses.
ActivationFootprint activation_footprint(const ModelSpec& model, const TrainingConfig& training,
                                         const ModelParallelism& parallel = {}, const ExpertParallelism& experts = {},
                                         KernelImplementation kernels = KernelImplementation::fused);

}  // namespace shardsim::workloads
