#include "workloads/kernels/zero_plus_plus_quantization.h"

namespace shardsim::workloads {

namespace {

constexpr double kInt4BytesPerElement = 0.5;

// A memory-bound pass moving `bytes`, about one operation per element.
KernelSpec pass(const char* name, double elements, double bytes) {
  KernelSpec spec;
  spec.name = name;
  spec.kernel = KernelClass::elementwise;
  spec.flops = elements;
  spec.hbm_bytes = bytes;
  return spec;
}

}  // namespace

KernelSpec weight_quantize(double shard_elements, double bytes_per_value) {
  return pass("qwz.quantize", shard_elements, (bytes_per_value + kQuantizedWeightBytesPerElement) * shard_elements);
}

KernelSpec weight_dequantize(double gathered_elements, double bytes_per_value) {
  return pass("qwz.dequantize", gathered_elements,
              (kQuantizedWeightBytesPerElement + bytes_per_value) * gathered_elements);
}

QuantizedGradientReduction quantized_gradient_reduction(double elements, double bytes_per_value, int gpus_per_node,
                                                        int gpus) {
  const double m = elements, e = bytes_per_value, g = gpus_per_node, n = gpus;
  QuantizedGradientReduction q;
  q.quantize = pass("qgz.quantize", m, (e + kInt4BytesPerElement) * m);
  q.intra_node_bytes = kInt4BytesPerElement * m;
  q.reduce = pass("qgz.reduce", m, kInt4BytesPerElement * m + kInt4BytesPerElement * m / g);
  q.inter_node_bytes = kInt4BytesPerElement * m / g;
  q.dequantize = pass("qgz.dequantize", m / g, kInt4BytesPerElement * m / g + 2 * e * m / g + e * m / n);
  return q;
}

}  // namespace shardsim::workloads
