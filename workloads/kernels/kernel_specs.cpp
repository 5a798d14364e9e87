#include "workloads/kernels/kernel_specs.h"

namespace shardsim::workloads {

Dtype value_dtype(const TrainingConfig& training) { return training.fp16 ? Dtype::fp16 : Dtype::bf16; }

KernelSpec gemm(const std::string& name, const LayerShapes& x, double m, double n, double k) {
  KernelSpec spec;
  spec.name = name;
  spec.kernel = KernelClass::gemm;
  spec.dtype = x.gemm_dtype;
  spec.flops = 2 * m * n * k;
  spec.hbm_bytes = x.e * (m * k + k * n + m * n);
  spec.gemm = {static_cast<std::int64_t>(m), static_cast<std::int64_t>(n), static_cast<std::int64_t>(k)};
  return spec;
}

KernelSpec elementwise(const std::string& name, const LayerShapes& x, double values_moved) {
  return memory_pass(name, x.dtype, values_moved, x.e);
}

KernelSpec memory_pass(const std::string& name, Dtype dtype, double values, double bytes_per_value) {
  KernelSpec spec;
  spec.name = name;
  spec.kernel = KernelClass::elementwise;
  spec.dtype = dtype;
  spec.flops = values;  // about one operation per value; never the bound
  spec.hbm_bytes = bytes_per_value * values;
  return spec;
}

KernelSpec masked_dropout(const std::string& name, const LayerShapes& x, double values) {
  KernelSpec spec = elementwise(name, x, 2 * values);
  spec.hbm_bytes += kDropoutMaskBytesPerValue * values;
  return spec;
}

KernelSpec residual_add(const std::string& name, const LayerShapes& x, double values) {
  KernelSpec spec = elementwise(name, x, 3 * values);
  if (x.hidden_dropout) spec.hbm_bytes += kDropoutMaskBytesPerValue * values;
  return spec;
}

KernelSpec grouped_gemm(const std::string& name, const LayerShapes& x, double experts, double m, double n, double k) {
  KernelSpec spec = gemm(name, x, m, n, k);
  spec.flops *= experts;
  spec.hbm_bytes *= experts;
  return spec;
}

KernelSpec gradient_add(const std::string& name, Dtype dtype, double parameters, double new_bytes, double kept_bytes) {
  KernelSpec spec;
  spec.name = name;
  spec.kernel = KernelClass::elementwise;
  spec.dtype = dtype;
  spec.flops = parameters;
  spec.hbm_bytes = (new_bytes + 2 * kept_bytes) * parameters;
  return spec;
}

KernelSpec group_call(const std::string& name, CallGroup group, CollectiveOp op, double bytes) {
  KernelSpec spec;
  spec.name = name;
  spec.call = ModelParallelCall{group, op, bytes};
  return spec;
}

KernelSpec waiting_for_call(KernelSpec spec, int k) {
  spec.waits_for_call = k;
  return spec;
}

KernelSpec weight_half(KernelSpec spec) {
  spec.weight_gradient = true;
  return spec;
}

void append_on_side_stream(std::vector<KernelSpec>& to, std::vector<KernelSpec> list) {
  for (KernelSpec& spec : list) {
    spec.on_side_stream = true;
    to.push_back(std::move(spec));
  }
}

KernelSpec joining_side_stream(KernelSpec spec) {
  spec.joins_side_stream = true;
  return spec;
}

}  // namespace shardsim::workloads
