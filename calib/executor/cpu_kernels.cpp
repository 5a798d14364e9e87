#include "calib/executor/cpu_kernels.h"

#include "calib/executor/gemm_work.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace shardsim::calib {

void CpuKernels::run(const workloads::Op& op) {
  if (op.kind != workloads::OpKind::compute) {
    throw std::logic_error("CpuKernels: " + std::string(op.name) + " is not a compute op");
  }
  const bool gemm_like = op.kernel == workloads::KernelClass::gemm || op.kernel == workloads::KernelClass::attention;
  const std::int64_t repeats = gemm_like ? gemm_repeats(op) : 0;
  if (repeats > 0) {
    gemm(op.gemm, repeats);
  } else {
    stream(op.hbm_bytes);
  }
}

void CpuKernels::gemm(const workloads::GemmShape& shape, std::int64_t repeats) {
  auto [it, added] = gemms_.try_emplace({shape.m, shape.n, shape.k});
  GemmOperands& x = it->second;
  if (added) {
    // Random operands, never zeros: a zero matrix can take faster paths.
    x.a = Eigen::MatrixXf::Random(shape.m, shape.k);
    x.b = Eigen::MatrixXf::Random(shape.k, shape.n);
    x.c.resize(shape.m, shape.n);
  }
  for (std::int64_t i = 0; i < repeats; ++i) x.c.noalias() = x.a * x.b;
}

void CpuKernels::stream(double bytes) {
  // Half the bytes read, half written, in fp32 values.
  const auto values = static_cast<std::size_t>(std::max(1.0, bytes / (2 * sizeof(float))));
  if (source_.size() < values) {
    source_.resize(values);
    for (std::size_t i = 0; i < values; ++i) source_[i] = static_cast<float>(i % 251) * 0.01f;
    destination_.resize(values);
  }
  const float* in = source_.data();
  float* out = destination_.data();
  for (std::size_t i = 0; i < values; ++i) out[i] = 0.5f * in[i] + 1.0f;
}

}  // namespace shardsim::calib
