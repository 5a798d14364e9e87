#include "calib/executor/execute.h"

#include "calib/executor/cpu_executor.h"

#include <stdexcept>

namespace shardsim::calib {

const GpuBackend* choose_gpu_backend(const std::string& requested) {
  if (requested == "cpu") return nullptr;
  std::string why_not;
  const GpuBackend* gpu = load_gpu_backend(why_not);
  if (requested == "gpu" && gpu == nullptr) throw std::invalid_argument("--backend gpu: " + why_not);
  if (gpu == nullptr) return nullptr;
  const int devices = gpu->visible_gpus();
  if (requested == "gpu" && devices == 0) throw std::invalid_argument("--backend gpu: no CUDA device is visible");
  return devices > 0 ? gpu : nullptr;
}

MeasuredRun execute(const workloads::Program& program, const ExecutionOptions& options, const GpuBackend* gpu) {
  return gpu != nullptr ? gpu->execute(program, options) : execute_on_cpu(program, options);
}

}  // namespace shardsim::calib
