// execute: runs a Program for real and returns what it measured, the
// reported step as the Program's Timeline (DESIGN.md, "One IR, two
// backends"). Two backends: the CPU one (Eigen + MPI, one process per rank,
// cpu_executor.h) and the GPU one (CUDA + cuBLASLt + NCCL, a module loaded
// on demand, gpu_backend.h).
#pragma once

#include "calib/executor/gpu_backend.h"
#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"

#include <string>

namespace shardsim::calib {

// The GPU backend for `requested` "gpu", or for "auto" when its module loads
// and sees a device; nullptr for the CPU backend ("cpu", or "auto" without
// a GPU). Throws std::invalid_argument naming --backend when "gpu" cannot
// run here.
const GpuBackend* choose_gpu_backend(const std::string& requested);

// Runs `program` on the GPU backend `gpu`, or the CPU backend when it is
// nullptr. Collective over the MPI world when it runs one process per rank.
MeasuredRun execute(const workloads::Program& program, const ExecutionOptions& options, const GpuBackend* gpu);

}  // namespace shardsim::calib
