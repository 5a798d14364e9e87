// Device buffers of random values and cuBLASLt GEMMs, as the probe times
// them and the executor runs them. CUDA translation units only.
#pragma once

#include "calib/cuda/cuda_checks.h"

#include <cstddef>
#include <string_view>
#include <vector>

namespace shardsim::calib {

// cudaMalloc'ed bytes (at least 256), freed with the object.
struct DeviceBuffer {
  void* pointer = nullptr;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

struct GemmType {
  const char* name;
  cudaDataType_t data;    // A and B
  cudaDataType_t output;  // C and D
  cublasComputeType_t compute;
  std::size_t element_bytes, output_bytes;
  // cuBLASLt runs fp8 GEMMs only with A transposed ("TN"); the FLOPs are the
  // same, so the probe and the executor use that layout for fp8.
  bool transpose_a;
  // Lowest compute capability (major * 10 + minor) that has it.
  int minimum_capability;
};

// bf16, fp16, tf32 (fp32 data) and fp8 (e4m3 inputs, bf16 output, from
// Ada and Hopper on); nullptr for a dtype without a type here.
const GemmType* find_gemm_type(std::string_view name);
const std::vector<const GemmType*>& all_gemm_types();

// Uniform values in [-1, 1) from a hash of the index: random, never zeros,
// the same on every run. `type`: CUDA_R_16BF, CUDA_R_16F, CUDA_R_8F_E4M3
// or CUDA_R_32F.
void fill_random(cudaDataType_t type, void* data, std::size_t count, unsigned seed, cudaStream_t stream = nullptr);

// `batch` independent GEMMs C[m,n] = A[m,k] B[k,n] (column-major, strided
// batches) in one cuBLASLt call, its algorithm from the heuristic, on its
// own random operands.
class LtGemm {
 public:
  LtGemm(cublasLtHandle_t handle, const GemmType& type, long long m, long long n, long long k, void* workspace,
         std::size_t workspace_bytes, long long batch = 1);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void enqueue(cudaStream_t stream) const;

 private:
  cublasLtHandle_t handle_;
  void* workspace_;
  std::size_t workspace_bytes_;
  DeviceBuffer a_, b_, c_;
  cublasLtMatmulDesc_t desc_{};
  cublasLtMatrixLayout_t layout_a_{}, layout_b_{}, layout_c_{};
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

}  // namespace shardsim::calib
