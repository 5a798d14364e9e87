// How both executor backends realise a GEMM or attention op: GEMMs of the
// op's m x n x k (for attention, the batched (sequence, sequence, head_dim)
// products), as many as make the op's FLOPs.
#pragma once

#include "workloads/ir/program.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace shardsim::calib {

// FLOPs / (2 m n k), at least one; 0 for an op without a GEMM shape.
inline std::int64_t gemm_repeats(const workloads::Op& op) {
  const double one = 2.0 * static_cast<double>(op.gemm.m) * static_cast<double>(op.gemm.n) * static_cast<double>(op.gemm.k);
  return one > 0 ? std::max<std::int64_t>(1, std::llround(op.flops / one)) : 0;
}

}  // namespace shardsim::calib
