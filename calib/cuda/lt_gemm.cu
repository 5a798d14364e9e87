#include "calib/cuda/lt_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

namespace shardsim::calib {

namespace {

template <typename T>
__global__ void fill_random_kernel(T* data, std::size_t count, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    const float value = static_cast<float>(x & 0xffffff) / 8388608.0f - 1.0f;
    data[i] = static_cast<T>(value);
  }
}

const GemmType kBf16{"bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2, 2, false, 80};
const GemmType kFp16{"fp16", CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, 2, 2, false, 70};
const GemmType kTf32{"tf32", CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4, 4, false, 80};
const GemmType kFp8{"fp8", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, 1, 2, true, 89};

void set_batch(cublasLtMatrixLayout_t layout, long long batch, long long stride) {
  const int count = static_cast<int>(batch);
  SHARDSIM_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
  SHARDSIM_CUBLAS(
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

}  // namespace

DeviceBuffer::DeviceBuffer(std::size_t bytes) { SHARDSIM_CUDA(cudaMalloc(&pointer, std::max<std::size_t>(bytes, 256))); }
DeviceBuffer::~DeviceBuffer() { cudaFree(pointer); }

const std::vector<const GemmType*>& all_gemm_types() {
  static const std::vector<const GemmType*> types{&kBf16, &kFp16, &kTf32, &kFp8};
  return types;
}

const GemmType* find_gemm_type(std::string_view name) {
  for (const GemmType* type : all_gemm_types()) {
    if (name == type->name) return type;
  }
  return nullptr;
}

void fill_random(cudaDataType_t type, void* data, std::size_t count, unsigned seed, cudaStream_t stream) {
  if (type == CUDA_R_16BF) {
    fill_random_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, seed);
  } else if (type == CUDA_R_16F) {
    fill_random_kernel<<<1024, 256, 0, stream>>>(static_cast<__half*>(data), count, seed);
  } else if (type == CUDA_R_8F_E4M3) {
    fill_random_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(data), count, seed);
  } else {
    fill_random_kernel<<<1024, 256, 0, stream>>>(static_cast<float*>(data), count, seed);
  }
  SHARDSIM_CUDA(cudaGetLastError());
}

LtGemm::LtGemm(cublasLtHandle_t handle, const GemmType& type, long long m, long long n, long long k, void* workspace,
               std::size_t workspace_bytes, long long batch)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes),
      a_(static_cast<std::size_t>(batch * m * k) * type.element_bytes),
      b_(static_cast<std::size_t>(batch * k * n) * type.element_bytes),
      c_(static_cast<std::size_t>(batch * m * n) * type.output_bytes) {
  fill_random(type.data, a_.pointer, static_cast<std::size_t>(batch * m * k), 1);
  fill_random(type.data, b_.pointer, static_cast<std::size_t>(batch * k * n), 2);
  SHARDSIM_CUBLAS(cublasLtMatmulDescCreate(&desc_, type.compute, CUDA_R_32F));
  const cublasOperation_t transpose_a = type.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, none = CUBLAS_OP_N;
  SHARDSIM_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &transpose_a, sizeof transpose_a));
  SHARDSIM_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none));
  if (type.transpose_a) {
    SHARDSIM_CUBLAS(cublasLtMatrixLayoutCreate(&layout_a_, type.data, k, m, k));  // A^T stored k x m
  } else {
    SHARDSIM_CUBLAS(cublasLtMatrixLayoutCreate(&layout_a_, type.data, m, k, m));
  }
  SHARDSIM_CUBLAS(cublasLtMatrixLayoutCreate(&layout_b_, type.data, k, n, k));
  SHARDSIM_CUBLAS(cublasLtMatrixLayoutCreate(&layout_c_, type.output, m, n, m));
  if (batch > 1) {
    set_batch(layout_a_, batch, m * k);
    set_batch(layout_b_, batch, k * n);
    set_batch(layout_c_, batch, m * n);
  }
  cublasLtMatmulPreference_t preference;
  SHARDSIM_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  SHARDSIM_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace_bytes_, sizeof workspace_bytes_));
  int found = 0;
  SHARDSIM_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_a_, layout_b_, layout_c_, layout_c_, preference, 1,
                                                 &heuristic_, &found));
  SHARDSIM_CUBLAS(cublasLtMatmulPreferenceDestroy(preference));
  if (found == 0) throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic: no algorithm for this GEMM");
}

LtGemm::~LtGemm() {
  cublasLtMatrixLayoutDestroy(layout_a_);
  cublasLtMatrixLayoutDestroy(layout_b_);
  cublasLtMatrixLayoutDestroy(layout_c_);
  cublasLtMatmulDescDestroy(desc_);
}

void LtGemm::enqueue(cudaStream_t stream) const {
  const float alpha = 1, beta = 0;
  SHARDSIM_CUBLAS(cublasLtMatmul(handle_, desc_, &alpha, a_.pointer, layout_a_, b_.pointer, layout_b_, &beta, c_.pointer,
                                 layout_c_, c_.pointer, layout_c_, &heuristic_.algo, workspace_, workspace_bytes_, stream));
}

}  // namespace shardsim::calib
