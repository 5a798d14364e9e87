// cuDNN's fused flash attention, as the probe times it: the SDPA operation
// of cuDNN's graph API (cuDNN 9.13.1 and later), bf16 Q, K and V of
// [batch, heads, sequence, head_dim], the forward that training runs (it
// writes O and the fp32 softmax statistics its backward reads). It runs
// without a mask: the operation takes a causal one only from cuDNN 9.21 on.
// cuDNN is opened (libcudnn.so.9) on first use rather than linked, so that
// a machine without it loses this kernel and nothing else.
// CUDA translation units only.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

namespace shardsim::calib {

struct AttentionShape {
  long long batch = 1, heads = 1, sequence = 1, head_dim = 1;
};

class FusedAttention {
 public:
  // Plans the kernel and allocates its operands (random, never zeros).
  // Throws std::runtime_error naming the cuDNN call that refused and
  // cuDNN's own message, or saying why cuDNN cannot be opened.
  explicit FusedAttention(const AttentionShape& shape);
  ~FusedAttention();
  FusedAttention(const FusedAttention&) = delete;
  FusedAttention& operator=(const FusedAttention&) = delete;

  void enqueue(cudaStream_t stream) const;

  // Q, K, V and O as the last enqueue() left them, in fp32 and in
  // [batch, heads, sequence, head_dim] order, for checking the kernel
  // against a reference (it waits for the device).
  struct HostOperands {
    std::vector<float> q, k, v, o;
  };
  HostOperands operands_on_host() const;

 private:
  struct Plan;
  std::unique_ptr<Plan> plan_;
};

// "cuDNN 9.19.0 (libcudnn.so.9)", or why cuDNN cannot be opened here.
std::string cudnn_description();
bool cudnn_available();

}  // namespace shardsim::calib
