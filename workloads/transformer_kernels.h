// The kernels of one micro-batch of a decoder-only transformer, module by
// module, with the FLOPs and HBM bytes each moves: what the compiler turns
// into compute ops.
//
// Modules are model.h's: the embedding, each layer's attention block (input
// norm, QKV, rotary, attention core, output projection, residual add) and MLP
// block (norm, gate/up, activation, down, residual add), and the head (final
// norm, LM head, cross-entropy loss).
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
// MoE and MLA layers are refused for now (their fields are parsed and kept).
#pragma once

#include "workloads/model.h"
#include "workloads/program.h"
#include "workloads/training.h"

#include <string>
#include <vector>

namespace shardsim::workloads {

struct KernelSpec {
  std::string name;
  KernelClass kernel = KernelClass::elementwise;
  Dtype dtype = Dtype::bf16;
  double flops = 0;
  double hbm_bytes = 0;
  GemmShape gemm;
};

// A module (model.h) and its kernels.
struct ModuleWork : ModuleParameters {
  std::vector<KernelSpec> forward;
  std::vector<KernelSpec> backward;
  // Forward kernels run again in backward before `backward`: the attention
  // core under selective recompute without flash attention, the whole module
  // under full recompute.
  std::vector<KernelSpec> recompute;
  // Kept from the forward pass until this module's backward has run.
  double activation_bytes = 0;
  // Allocated for the backward of a module being recomputed, then freed.
  double recompute_working_bytes = 0;
};

// Throws InputError (naming the model) for MoE or MLA models.
std::vector<ModuleWork> transformer_modules(const ModelSpec& model, const TrainingConfig& training);

// Model FLOPs of one step, Megatron-LM's count (Narayanan et al. 2021,
// appendix): forward + backward = 3 x forward GEMMs, attention not halved for
// the causal mask, no recompute. For a GPT block it is
// 72 B s L h^2 (1 + s / (6 h) + V / (12 h L)) with B sequences per step.
double model_flops_per_step(const ModelSpec& model, const TrainingConfig& training);

}  // namespace shardsim::workloads
