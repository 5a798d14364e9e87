// Checked CUDA, cuBLASLt and NCCL calls for the device code (probe and
// executor): a failure throws std::runtime_error naming the call as written
// in the source and the library's error. CUDA translation units only.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

#define SHARDSIM_CUDA(call)                                                                                \
  do {                                                                                                     \
    const cudaError_t status_ = (call);                                                                    \
    if (status_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(status_)); \
  } while (0)
#define SHARDSIM_CUBLAS(call)                                                                                  \
  do {                                                                                                         \
    const cublasStatus_t status_ = (call);                                                                     \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
      throw std::runtime_error(std::string(#call) + ": cuBLAS status " + std::to_string(static_cast<int>(status_))); \
    }                                                                                                          \
  } while (0)
#define SHARDSIM_NCCL(call)                                                                                 \
  do {                                                                                                      \
    const ncclResult_t status_ = (call);                                                                    \
    if (status_ != ncclSuccess) throw std::runtime_error(std::string(#call) + ": " + ncclGetErrorString(status_)); \
  } while (0)
