// CpuKernels: the work of a Program's compute ops on a CPU core, for the CPU
// backend of the executor.
//
//   gemm       an Eigen GEMM of the op's m x n x k on random data;
//   attention  GEMMs of the op's (sequence, sequence, head_dim) shape, as many
//              as make the op's FLOPs (the batched Q K^T and P V products);
//   element-wise and optimizer
//              streaming passes that read and write the op's HBM bytes
//              through a bounded buffer (streaming_buffer.h).
// Every dtype runs in fp32: CPUs have no fast bf16/fp16 GEMMs in Eigen, and
// the CPU profile measures exactly these fp32 GEMMs (calib/probe/cpu_probe.h),
// so a CPU run is predicted with the kernels it really runs. Byte counts are
// the op's own. Operands are allocated on first use of a shape and reused:
// what a step measures is the kernels, not the allocator.
#pragma once

#include "workloads/ir/program.h"

#include <Eigen/Dense>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace shardsim::calib {

class CpuKernels {
 public:
  // Runs the work of a compute op (std::logic_error for any other kind).
  void run(const workloads::Op& op);

 private:
  struct GemmOperands {
    Eigen::MatrixXf a, b, c;
  };
  void gemm(const workloads::GemmShape& shape, std::int64_t repeats);
  void stream(double bytes);

  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, GemmOperands> gemms_;
  std::vector<float> source_, destination_;
};

}  // namespace shardsim::calib
