// How long a compute op of a Program takes on a GPU, from the profile:
//   GEMMs:      of a shape the profile measured (calib/measured_curves.h):
//               its measured time, times FLOPs / (2 m n k) for a batch;
//               of any other: max(FLOPs / (peak x efficiency(FLOPs)), bytes / achievable HBM)
//   attention:  max(FLOPs / (peak x attention efficiency), bytes / achievable HBM)
//   element-wise and optimizer kernels: bytes / achievable HBM (their few
//               FLOPs per byte never make them compute-bound)
// times the profile's kernel_time_factor (1 unless fitted to published runs),
// plus the kernel launch overhead, each from the profile's compute section.
#pragma once

#include "calib/profile.h"
#include "workloads/ir/program.h"

namespace shardsim::sim {

// Throws InputError naming the profile file when it lacks the op's dtype.
double kernel_seconds(const workloads::Op& op, const calib::Profile& profile);

}  // namespace shardsim::sim
