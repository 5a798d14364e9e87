// The GPU backend of the executor as a module: shardsim-gpu-backend.so,
// built beside the shardsim binary whenever CUDA and NCCL are found, and
// loaded by `shardsim exec` only. Linking CUDA, cuBLASLt and NCCL into
// shardsim itself made every command (a millisecond memory query, a search)
// load them at start-up: 0.07 s and 220 MiB of resident memory each time.
//
// The module exports one C symbol, shardsim_gpu_backend(), returning its
// entry points; both sides are built from this header in the same build,
// and the interface version catches a module left over from another one.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"

#include <string>

namespace shardsim::calib {

struct GpuBackend {
  static constexpr int current_interface_version = 3;  // 3: MeasuredRun carries a Timeline
  int interface_version = current_interface_version;
  // CUDA devices visible to this process.
  int (*visible_gpus)() = nullptr;
  // execute_on_gpu (gpu_executor.h).
  MeasuredRun (*execute)(const workloads::Program& program, const ExecutionOptions& options) = nullptr;
};

// The module's file name, looked for in the directory of the running binary.
inline constexpr const char* gpu_backend_module_name = "shardsim-gpu-backend.so";

// Loads the module once per process. nullptr, with the reason in `why_not`
// (not built: no CUDA toolkit at configure time; or dlopen's error, such as
// a missing libnccl), when it cannot be used.
const GpuBackend* load_gpu_backend(std::string& why_not);

}  // namespace shardsim::calib

extern "C" const shardsim::calib::GpuBackend* shardsim_gpu_backend();
