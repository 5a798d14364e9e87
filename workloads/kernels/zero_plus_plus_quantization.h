// ZeRO++'s quantized communication (Wang et al. 2023, "ZeRO++: Extremely
// Efficient Collective Communication for Giant Model Training", sections 3.1
// and 3.3; DeepSpeed's zero_quantized_weights and zero_quantized_gradients),
// as the kernels and call sizes the step compiler emits.
//
// qwZ: every parameter all-gather (forward, backward, and hpZ's secondary
// ones) moves int8 instead of bf16/fp16. Each rank quantizes its shard
// before the call (reads e bytes, writes 1 per element) and the gathered
// tensor is dequantized after it (reads 1, writes e), both on the gather
// stream, as DeepSpeed's coordinator runs them (the dequantization in the
// gather handle's wait).
//
// qgZ: the gradient reduce-scatter over all N ranks becomes DeepSpeed's
// all_to_all_quant_reduce, two all-to-alls of int4 values instead of one
// reduce-scatter of e-byte values. For M gradient elements, G GPUs per node
// and N / G nodes:
//   1. quantize to int4: read e M, write M / 2 bytes;
//   2. all-to-all over the node's G GPUs: M / 2 bytes in each rank's buffer;
//      each rank gets the G pieces of its M / G elements;
//   3. dequantize, sum the G pieces and quantize again: read M / 2, write
//      M / (2 G) bytes;
//   4. all-to-all over the N / G GPUs with the same place in their nodes:
//      M / (2 G) bytes in each rank's buffer; each rank gets the N / G
//      pieces of its M / N elements;
//   5. dequantize (read M / (2 G), write e M / G) and sum the N / G pieces
//      (read e M / G, write e M / N).
// So only M / (2 G) (N / G - 1) / (N / G) bytes per rank cross nodes, where
// a ring reduce-scatter sends e M (N - 1) / N. Within one node DeepSpeed
// keeps the reduce-scatter. The per-group fp32 scales (one per group of
// thousands of values) are left out: under 0.1 % of the bytes.
#pragma once

#include "workloads/kernels/transformer_kernels.h"

#include <vector>

namespace shardsim::workloads {

// qwZ around an all-gather: quantizing this rank's `shard_elements` before
// it, dequantizing the `gathered_elements` after it.
KernelSpec weight_quantize(double shard_elements, double bytes_per_value);
KernelSpec weight_dequantize(double gathered_elements, double bytes_per_value);
constexpr double kQuantizedWeightBytesPerElement = 1;  // int8

// qgZ's steps for a bucket of `elements` gradient elements, in order.
struct QuantizedGradientReduction {
  KernelSpec quantize;              // step 1
  double intra_node_bytes = 0;      // step 2: each rank's all-to-all buffer
  KernelSpec reduce;                // step 3
  double inter_node_bytes = 0;      // step 4
  KernelSpec dequantize;            // step 5
};
QuantizedGradientReduction quantized_gradient_reduction(double elements, double bytes_per_value, int gpus_per_node,
                                                        int gpus);

}  // namespace shardsim::workloads
