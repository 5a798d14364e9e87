#include "sim/step/kernel_time.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <string>

namespace shardsim::sim {

double kernel_seconds(const workloads::Op& op, const calib::Profile& profile) {
  using workloads::KernelClass;
  const calib::ComputeCalibration& compute = profile.compute;
  const double memory_seconds = op.hbm_bytes / compute.achievable_hbm_bytes_per_second();
  double compute_seconds = 0;
  if (op.kernel == KernelClass::gemm || op.kernel == KernelClass::attention) {
    const std::string dtype(workloads::to_string(op.dtype));
    const calib::DtypeCompute* peak = compute.find(dtype);
    if (peak == nullptr) {
      throw_input_error(profile.file, "compute.dtypes." + dtype, "missing: the program runs " + dtype + " kernels");
    }
    if (op.kernel == KernelClass::gemm) {
      const double one = 2.0 * static_cast<double>(op.gemm.m) * static_cast<double>(op.gemm.n) *
                         static_cast<double>(op.gemm.k);
      const double* measured = profile.measured.gemm_seconds({dtype, op.gemm.m, op.gemm.n, op.gemm.k});
      // A measured time already holds the shape's memory traffic.
      if (measured != nullptr && one > 0) {
        return compute.kernel_time_factor * op.flops / one * *measured + compute.kernel_launch_seconds;
      }
    }
    const double efficiency = op.kernel == KernelClass::gemm ? peak->gemm_efficiency_at(op.flops)
                                                             : profile.attention_efficiency(op.attention_kernel);
    compute_seconds = op.flops / (peak->peak_flops_per_second * efficiency);
  }
  return compute.kernel_time_factor * std::max(compute_seconds, memory_seconds) + compute.kernel_launch_seconds;
}

}  // namespace shardsim::sim
