// The attention core of one GPU's heads: FlashAttention's fused kernel
// (the causal half of the scores' FLOPs, never the scores in memory), or
// the batched score and context GEMMs with a softmax between them, which
// write and read every score.
#pragma once

#include "workloads/kernels/kernel_specs.h"

#include <vector>

namespace shardsim::workloads {

// FlashAttention's FLOPs over `batch` sequences of `sequence` tokens and
// `heads` heads of `head_dim`: the forward's two products Q K^T and P V over
// every score, half of them when causal (the kernel skips masked blocks);
// the backward's five products, 2.5 times the forward's. The probe counts
// the fused kernels it times by the same rule, so that the efficiency it
// fits prices these ops.
double flash_attention_flops(double batch, double heads, double sequence, double head_dim, bool causal, bool backward);

// Appends the core's forward and backward kernels for `x`'s heads over its
// whole sequence: FlashAttention's (the training's attention_kernel) when
// the training has flash_attention, else the unfused ones. With attention
// dropout, the unfused core drops probabilities in a pass of its own
// (torch's dropout: the probabilities in and out and a one-byte mask in
// forward; the gradient in and out and the mask in backward); FlashAttention
// draws the mask inside its kernel from the RNG state, which moves no extra
// bytes.
void attention_core(const LayerShapes& x, const TrainingConfig& training, std::vector<KernelSpec>& forward,
                    std::vector<KernelSpec>& backward);

// Megatron-LM's context parallelism over c GPUs (Transformer Engine's ring
// attention, cp_comm_type "p2p"): the core lists of a whole-sequence core
// become this GPU's queries against each GPU's keys and values in turn, c
// blocks of 1/c^2 of the FLOPs each (the sequence's 2c chunks balance the
// causal work), each block re-reading its queries and rewriting its partial
// output. Before block i >= 1 the keys and values it needs arrive by a
// send/recv around the group (`kv_bytes` per GPU), issued as block i - 1
// starts so the exchange hides behind it; the backward sends the key and
// value gradients along with them (twice the bytes).
void context_parallel_ring(int c, double kv_bytes, std::vector<KernelSpec>& forward, std::vector<KernelSpec>& backward);

}  // namespace shardsim::workloads
