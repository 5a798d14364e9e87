// The kernels of one micro-batch of a decoder-only transformer, module by
// module, with the FLOPs and HBM bytes each moves: what the compiler turns
// into compute ops.
//
// Modules are model.h's: the embedding, each layer's attention block (input
// norm, QKV, rotary, attention core, output projection, residual add) and MLP
// block (norm, gate/up, activation, down, residual add), each MTP depth's
// input (mtp_kernels.h) and layer, and the head (final norm, LM head,
// cross-entropy loss; again for each MTP depth, on its hidden states).
//
// Counting, with T tokens in the micro-batch, e bytes per value:
//   GEMM (m, n, k) = (T, out, in): 2 m n k FLOPs, e (m k + k n + m n) bytes;
//     its backward is two GEMMs of the same FLOPs, input gradient (m, k, n)
//     and weight gradient (k, n, m).
//   Attention core, causal: the two batched GEMMs Q K^T and P V make
//     4 b s^2 (heads x head_dim) FLOPs if every score is computed (what
//     Megatron-LM's MFU counts); a causal kernel skips the masked half, so
//     the kernel executes half of that. FlashAttention's backward runs five
//     such GEMMs to the forward's two: 2.5x the forward (Dao 2023, sec. 3.1).
//     Without flash attention the scores are materialised: the same GEMMs
//     plus a softmax that reads and writes b heads s^2 values.
//   Element-wise kernels move e bytes per value read or written.
// A MoE layer (DeepSpeed-MoE, Rajbhandari et al. 2022; Megatron-Core's
// token dispatcher) splits its MLP block in two modules. "mlp": the norm, the
// router GEMM (T, E, h), softmax and top-k over its logits, and the shared
// experts as one MLP of their summed width. "experts": the T k routed token
// copies permuted into expert order, sent to their experts by an all-to-all
// over the expert-parallel group of ep ranks, the local E / ep experts' GEMMs
// as one grouped kernel whose shape is one expert's (m = ep c T k / E tokens,
// FLOPs of all local experts), an all-to-all back, and the weighted sum of
// each token's k outputs. Routing is taken as balanced: every expert gets
// c T k / E tokens of every rank, c the plan's capacity factor (1: dropless
// routing at even load, or DeepSpeed's capacity factor 1). Without expert parallelism (ep = 1) the experts
// are local and nothing is sent. Backward mirrors it: two all-to-alls of
// gradients, the second after the experts' weight gradients, as autograd
// runs them. Under
// context parallelism T is this GPU's T / c tokens. Under tensor parallelism
// (with sequence parallelism, as Megatron-LM requires) the shared experts
// split like a dense MLP, while the router and the routed experts stay whole
// on every GPU (expert tensor parallelism 1) and take its T / t tokens
// (moe_kernels.h).
//
// Tensor parallelism over t GPUs (Megatron-LM, Shoeybi et al. 2019;
// TECHNIQUES.md section 5) gives each GPU 1/t of the heads, of the MLP width
// and of the vocabulary: QKV and gate/up are column-parallel, the output
// projection and down row-parallel, the embedding and LM head
// vocabulary-parallel. Each block's output is all-reduced over the group in
// forward and its input gradient in backward (with sequence parallelism: an
// all-gather before the block and a reduce-scatter after, norms and
// residuals on 1/t of the tokens, and the input gathered again for the
// weight gradient; Korthikanti et al. 2022); the cross-entropy all-reduces
// three fp32 values per token (logit max, target logit, sum of exponentials).
// With tp_comm_overlap (sequence parallelism under Transformer Engine's
// userbuffers, Megatron-LM's --tp-comm-overlap; TE's initialize_ub defaults)
// the four linears of a layer hide their calls behind slices of their GEMMs:
// the forward gathers of QKV and gate/up, and the backward's output-gradient
// gathers of the output projection and down, by ring exchange (t - 1 steps,
// each rank sending T / t tokens' slice to the next, the GEMM running on one
// slice of T / t tokens per step); the forward reduce-scatters of the output
// projection and down pipelined over four GEMM slices of T / 4 tokens. The
// backward of a column-parallel GEMM overlaps as Megatron-LM does without it
// (TE's "bulk" method): the input gathered during the input gradient, which
// is reduce-scattered during the weight gradient. The GEMM slices carry the
// whole GEMM's FLOPs; each reads the weight again, and a slice's smaller
// shape runs at its own efficiency. The embedding and LM head keep their
// calls (Megatron-LM's own layers, not Transformer Engine's).
// Multi-head latent attention under tensor parallelism is Megatron-Core's
// MLASelfAttention with Transformer Engine (sequence parallelism required,
// see require_model_parallel_split): the down-projections and the latents'
// norms are duplicated on every GPU of the group and run on its T / t
// tokens; the query and key-value latents are gathered along the sequence
// into the column-parallel up-projections, which make this GPU's heads; the
// rotary key, which every head shares, is gathered on its own and rotated
// whole on every GPU; the output projection is row-parallel. Userbuffers
// cover only the qkv, proj, fc1 and fc2 layers (TE's initialize_ub), so the
// up-projections keep plain calls under tp_comm_overlap too.
//
// DeepSpeed-Ulysses over u GPUs (ModelParallelism::ulysses, data-parallel
// systems): each GPU holds T / u of the micro-batch's tokens for every
// kernel but the attention core, which runs on the whole sequence for 1/u of
// the heads; an all-to-all of q, k and v (one call) leads into it, one of
// the context out of it, and the backward mirrors both, nothing overlapping
// them.
// These calls, and the MoE all-to-alls, sit in the kernel lists as entries of
// their own.
//
// Two implementations of the same layer (Plan::kernels). "fused" is the
// above: Megatron-Core with Transformer Engine, QKV and gate/up each one
// GEMM, rotary embedding, SwiGLU and the cross-entropy each one kernel.
// "eager" is PyTorch's eager modules, a kernel per op, as torchtitan's Llama
// writes them (torchtitan/models/llama/model.py at 157a12c5, the code behind
// its published FSDP2 runs; RMSNorm its Triton fused_rmsnorm, one kernel each
// way, as its configs set norm_type): wq, wk, wv and w1, w3 as separate
// GEMMs whose input gradients autograd sums (an add of T h values read
// twice and written once per extra use); the rotary embedding through
// complex64, three passes over each of q and k each way (x.float(), the
// complex product, .type_as); keys and values copied to every query head
// (repeat_kv) when there are fewer key/value heads, and the sum back in
// backward; SiLU and the product as two kernels (T f values: 2 and 3 in
// forward; the product's two gradients and SiLU's backward, 3 each, in
// backward); F.cross_entropy on the bf16 logits (log_softmax, 2 e V per
// token; backward the NLL gradient written, e V, and log_softmax's backward,
// 3 e V). Residual adds, the attention core and the embedding are as fused.
// Eager covers dense attention and MLPs; MLA and MoE blocks keep their
// fused lists. It is compiled without tensor or context parallelism
// (torchtitan's DTensor tensor parallelism is not modelled).
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"
#include "workloads/ir/program.h"

#include <cstdint>
#include <optional>
#include <numeric>
#include <string>
#include <vector>

namespace shardsim::workloads {

// The model-parallel group a call in a kernel list runs over.
enum class CallGroup : std::uint8_t { tensor_parallel, expert_parallel, sequence_parallel, context_parallel };

struct ModelParallelCall {
  CallGroup group = CallGroup::tensor_parallel;
  CollectiveOp op = CollectiveOp::all_reduce;
  double bytes = 0;
};

struct KernelSpec {
  std::string name;
  KernelClass kernel = KernelClass::elementwise;
  AttentionKernel attention_kernel = AttentionKernel::profile;  // attention only
  Dtype dtype = Dtype::bf16;
  double flops = 0;
  double hbm_bytes = 0;
  GemmShape gemm;
  // Set: not a kernel but a call over a model-parallel group, issued once
  // the kernel listed before it has ended.
  std::optional<ModelParallelCall> call;
  // k > 0: this kernel also waits for the k-th latest call listed before it
  // in its list. Calls nothing in the list waits for are waited for by the
  // next module's first kernel.
  int waits_for_call = 0;
  // Part of the backward's weight-gradient half (W): the wgrad GEMMs and the
  // embedding's scatter-add. The rest of a backward is its input-gradient
  // half (B), which the stage before waits for.
  bool weight_gradient = false;
  // On a second compute stream beside the list's other kernels (Megatron-
  // Core's shared experts under --moe-shared-expert-overlap). The side
  // entries of a list run as one chain, each waiting for the one before it,
  // the first for the last kernel before it on the compute stream; a call
  // among them runs on its group's stream as any call does. A kernel marked
  // joins_side_stream waits for the chain's end, which every list that
  // forks a chain joins.
  bool on_side_stream = false;
  bool joins_side_stream = false;
};

// A module (model.h) and its kernels.
struct ModuleWork : ModuleParameters {
  std::vector<KernelSpec> forward;
  std::vector<KernelSpec> backward;
  // Forward kernels run again in backward before `backward`: the parts the
  // module rebuilds under selective recompute (training.h's
  // RecomputeModules), the whole layer under full recompute.
  std::vector<KernelSpec> recompute;
  // Kept from the forward pass until this module's backward has run.
  double activation_bytes = 0;
  // Allocated for the backward of a module being recomputed, then freed.
  double recompute_working_bytes = 0;
  // Tensors (bytes each) allocated in order while the module's forward
  // (backward) kernels run, on top of what it keeps, and freed when they
  // end: the loss's copies of the logits (head_working_bytes_per_token).
  std::vector<double> forward_working, backward_working;
  double forward_working_bytes() const { return std::accumulate(forward_working.begin(), forward_working.end(), 0.0); }
  double backward_working_bytes() const { return std::accumulate(backward_working.begin(), backward_working.end(), 0.0); }
  // Under sequence parallelism: this GPU's parameters of the tensors every
  // GPU of the tensor-parallel group holds whole and runs on its own part of
  // the sequence (norms, MLA's down-projections and latent norms, a MoE
  // router). Each GPU's gradient of them is a partial sum, which Megatron-LM
  // all-reduces over the group once the backward is done
  // (finalize_model_grads, _allreduce_non_tensor_model_parallel_grads).
  double sequence_parallel_parameters = 0;
};

// Per GPU of a tensor-parallel group of parallel.tensor GPUs (1: the whole
// model) and of an expert-parallel group of experts.parallel GPUs (which must
// divide the routed experts; resolve_expert_factors in plan.h checks plans);
// `parameters` of each module is then the GPU's part (norms and learned
// positions whole, every other tensor 1/t; routed experts E / ep of them).
// Throws InputError as require_model_parallel_split does.
std::vector<ModuleWork> transformer_modules(const ModelSpec& model, const TrainingConfig& training,
                                            const ModelParallelism& parallel = {}, const ExpertParallelism& experts = {},
                                            KernelImplementation kernels = KernelImplementation::fused);

// Throws InputError (naming the model) for eager kernels under tensor or
// context parallelism, and the "ops" recompute policy on MLA or MoE layers.
void require_kernel_implementation(const ModelSpec& model, const TrainingConfig& training,
                                   const ModelParallelism& parallel, KernelImplementation kernels);

// Throws InputError (naming the model) for MLA models under Ulysses, or
// under tensor parallelism without sequence parallelism, MoE models under
// tensor parallelism without sequence parallelism or with shared experts t
// does not divide,
// Ulysses under tensor parallelism, context parallelism without
// flash attention, heads, key/value heads or the MLP width that t does not
// divide, heads or key/value heads that u does not divide, or a sequence
// sequence_split_problem refuses: what transformer_modules cannot compile.
void require_model_parallel_split(const ModelSpec& model, const TrainingConfig& training,
                                  const ModelParallelism& parallel);

// Why the sequence does not split over `parallel` (DeepSpeed-Ulysses, context
// and sequence parallelism), e.g. "sequence_length (4095) must divide over the
// 4 sequence-parallel GPUs"; empty if it does. require_model_parallel_split
// applies it; a Megatron-LM launch applies it to its own --seq-length.
std::string sequence_split_problem(std::int64_t sequence_length, const ModelParallelism& parallel);

// The compute op that runs `spec` (not a call) on `stream`.
Op kernel_op(const KernelSpec& spec, int stream);

// A mixed-precision Adam step on one GPU, pass by pass as Megatron-LM's
// MixedPrecisionOptimizer.step() makes them (megatron/core/optimizer/
// optimizer.py), in bytes per parameter of the GPU's optimizer shard:
//   gradients to fp32 main gradients, when they were reduced in bf16/fp16
//     (.float() copies nothing when they are fp32 already)   read g, write 4
//   fp16 only: unscale by the loss scale and check for inf/NaN  read 4, write 4
//   the gradient norm for clipping                           read 4
//   fused Adam: gradient, master weight, both moments in; the three out   28
//   master weights into the model's bf16/fp16 weights        read 4, write e
// Clipping scales the gradients only when their norm exceeds the threshold,
// which a healthy step's does not; that pass is not counted. DeepSpeed's ZeRO
// optimizers make the same passes (they scale unconditionally and flatten
// first, which is not counted either). Megatron-LM also zeroes its
// contiguous gradient buffers for the next step (zero_grad_buffer, the whole
// buffer, not the shard); DeepSpeed and FSDP free gradients instead.
// PyTorch's own optimizer as torchtitan runs it (torch_foreach: AdamW with
// foreach=True, torch/optim/adamw.py _multi_tensor_adamw) works on the fp32
// parameters FSDP2 shards, with no master copy, in eight multi-tensor passes:
//   weight decay (mul_)         read 4, write 4
//   first moment (lerp_)        read 8, write 4
//   second moment (mul_, addcmul_)  read 4 + 8, write 4 + 4
//   sqrt, div_, add_ (eps)      read 4 each, write 4 each
//   addcdiv_ into the parameter read 12, write 4
// 80 bytes a parameter, after clip_grad_norm_(foreach=True), which reads the
// gradients for their norm and always scales them (read 4, write 4; torch
// multiplies by the clamped coefficient whether or not it clips).
struct OptimizerStep {
  double shard_parameters = 0;          // this GPU's optimizer shard
  double gradient_bytes_per_value = 2;  // as reduced: fp32 (Megatron-LM, bf16) or the training dtype
  double weight_bytes_per_value = 2;    // the model's bf16 / fp16 weights
  bool loss_scaling = false;            // fp16
  double zeroed_gradient_bytes = 0;     // gradient buffers zeroed for the next step
  bool torch_foreach = false;           // torch.optim's multi-tensor AdamW on fp32 parameters
};

// Bytes the step moves per parameter of the shard (the zeroing aside).
double optimizer_bytes_per_parameter(const OptimizerStep& step);

// The step as one kernel: its bytes, at about 12 FLOPs per parameter (Adam's arithmetic).
KernelSpec optimizer_step(const OptimizerStep& step);

}  // namespace shardsim::workloads
