#include "calib/executor/gpu_backend.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>
#include <system_error>

namespace shardsim::calib {

namespace {

std::filesystem::path module_path() {
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::read_symlink("/proc/self/exe", error);
  return error ? std::filesystem::path(gpu_backend_module_name) : binary.parent_path() / gpu_backend_module_name;
}

struct LoadedBackend {
  const GpuBackend* backend = nullptr;
  std::string why_not;
};

LoadedBackend load() {
  const std::filesystem::path path = module_path();
  if (!std::filesystem::exists(path)) {
    return {nullptr, path.string() + " is not there: this build has no GPU backend (CUDA and NCCL were not found "
                                     "when it was configured)"};
  }
  // Never closed: CUDA and NCCL keep threads and handlers that outlive a call.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return {nullptr, "cannot load " + path.string() + ": " + dlerror()};
  using EntryPoint = const GpuBackend* (*)();
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, "shardsim_gpu_backend"));
  if (entry == nullptr) return {nullptr, path.string() + " has no shardsim_gpu_backend entry point"};
  const GpuBackend* backend = entry();
  if (backend == nullptr || backend->interface_version != GpuBackend::current_interface_version) {
    return {nullptr, path.string() + " is from another build of shardsim (interface version " +
                         std::to_string(backend ? backend->interface_version : 0) + ", expected " +
                         std::to_string(GpuBackend::current_interface_version) + "); rebuild it"};
  }
  return {backend, ""};
}

}  // namespace

const GpuBackend* load_gpu_backend(std::string& why_not) {
  static std::once_flag once;
  static LoadedBackend loaded;
  std::call_once(once, [] { loaded = load(); });
  why_not = loaded.why_not;
  return loaded.backend;
}

}  // namespace shardsim::calib
