// The attention core of one GPU's heads: FlashAttention's fused kernel
// (the causal half of the scores' FLOPs, never the scores in memory), or
// the batched score and context GEMMs with a softmax between them, which
// write and read every score.
#pragma once

#include "workloads/kernel_specs.h"

#include <vector>

namespace shardsim::workloads {

// Appends the core's forward and backward kernels for `x`'s heads over its
// whole sequence.
void attention_core(const LayerShapes& x, bool flash, std::vector<KernelSpec>& forward, std::vector<KernelSpec>& backward);

}  // namespace shardsim::workloads
