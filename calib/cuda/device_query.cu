// shardsim-devices: what CUDA and NCCL see on this machine.
//
// The first CUDA translation unit of the project: it keeps the CUDA/NCCL
// build honest (it must compile wherever the toolkit is, GPU or not) and is
// the first thing to run on a lent GPU machine before the probe.
//   shardsim-devices                 list devices and the NCCL version
//   shardsim-devices --require-gpu   exit 77 ("skipped" for CTest) if there is none
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

namespace {

// Trivial kernel: proves device code compiles and, on a GPU, launches.
__global__ void write_index(int* out) { out[threadIdx.x] = static_cast<int>(threadIdx.x); }

bool check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "shardsim-devices: %s failed: %s\n", call, cudaGetErrorString(status));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const bool require_gpu = argc > 1 && std::strcmp(argv[1], "--require-gpu") == 0;
  constexpr int kSkipped = 77;

  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) == ncclSuccess) {
    std::printf("NCCL %d.%d.%d\n", nccl_version / 10000, (nccl_version / 100) % 100, nccl_version % 100);
  }

  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("no CUDA device: %s\n", status == cudaSuccess ? "none found" : cudaGetErrorString(status));
    return require_gpu ? kSkipped : 0;
  }
  for (int device = 0; device < count; ++device) {
    cudaDeviceProp prop{};
    if (!check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties")) return 1;
    std::printf("GPU %d: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", device, prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  }

  constexpr int kThreads = 32;
  int* device_out = nullptr;
  if (!check(cudaMalloc(&device_out, kThreads * sizeof(int)), "cudaMalloc")) return 1;
  write_index<<<1, kThreads>>>(device_out);
  int host_out[kThreads] = {};
  const bool ok = check(cudaGetLastError(), "write_index launch") &&
                  check(cudaMemcpy(host_out, device_out, sizeof(host_out), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(device_out);
  if (!ok || host_out[kThreads - 1] != kThreads - 1) {
    std::fprintf(stderr, "shardsim-devices: kernel result is wrong\n");
    return 1;
  }
  std::printf("kernel launch: ok\n");
  return 0;
}
