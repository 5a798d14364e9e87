#include "calib/executor/cpu_kernels.h"

#include "calib/executor/gemm_work.h"
#include "calib/executor/streaming_buffer.h"

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
  // Half the bytes read, half written, in fp32 values, in passes over a
  // bounded buffer (streaming_buffer.h).
  const auto values = static_cast<std::size_t>(std::max(1.0, bytes / (2 * sizeof(float))));
  const std::size_t buffer_values = std::max<std::size_t>(1, streaming_buffer_bytes(bytes) / sizeof(float));
  if (source_.size() < buffer_values) {
    source_.resize(buffer_values);
    for (std::size_t i = 0; i < buffer_values; ++i) source_[i] = static_cast<float>(i % 251) * 0.01f;
    destination_.resize(buffer_values);
  }
  const float* in = source_.data();
  float* out = destination_.data();
  // Each pass writes other values, so that no pass is a repeat the
  // compiler may drop.
  float offset = 1.0f;
  for (std::size_t pass = 0; pass < values; pass += buffer_values, offset += 1.0f) {
    const std::size_t n = std::min(buffer_values, values - pass);
    for (std::size_t i = 0; i < n; ++i) out[i] = 0.5f * in[i] + offset;
  }
}

}  // namespace shardsim::calib
