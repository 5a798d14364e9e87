#include "calib/probe/gpu_probe.h"

#include "calib/probe/mpi_world.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardsim::calib {

namespace {

using workloads::CollectiveOp;

// Each check names the call that failed, as written in the source.
#define PROBE_CUDA(call)                                                                                   \
  do {                                                                                                     \
    const cudaError_t status_ = (call);                                                                    \
    if (status_ != cudaSuccess) throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(status_)); \
  } while (0)
#define PROBE_CUBLAS(call)                                                                                     \
  do {                                                                                                         \
    const cublasStatus_t status_ = (call);                                                                     \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                                    \
      throw std::runtime_error(std::string(#call) + ": cuBLAS status " + std::to_string(static_cast<int>(status_))); \
    }                                                                                                          \
  } while (0)
#define PROBE_NCCL(call)                                                                                    \
  do {                                                                                                      \
    const ncclResult_t status_ = (call);                                                                    \
    if (status_ != ncclSuccess) throw std::runtime_error(std::string(#call) + ": " + ncclGetErrorString(status_)); \
  } while (0)

// Uniform values in [-1, 1) from a hash of the index: random, never zeros,
// and the same on every run.
template <typename T>
__global__ void fill_random(T* data, std::size_t count, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    const float value = static_cast<float>(x & 0xffffff) / 8388608.0f - 1.0f;
    data[i] = static_cast<T>(value);
  }
}

__global__ void empty_kernel() {}

template <typename T>
void randomize(void* data, std::size_t count, unsigned seed) {
  fill_random<T><<<1024, 256>>>(static_cast<T*>(data), count, seed);
  PROBE_CUDA(cudaGetLastError());
}

struct DeviceBuffer {
  void* pointer = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { PROBE_CUDA(cudaMalloc(&pointer, std::max<std::size_t>(bytes, 256))); }
  ~DeviceBuffer() { cudaFree(pointer); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Median of `repeats` CUDA-event timings of `enqueue` on `stream`.
template <typename F>
double time_on_stream(const ProbeOptions& options, cudaStream_t stream, F&& enqueue) {
  cudaEvent_t start, stop;
  PROBE_CUDA(cudaEventCreate(&start));
  PROBE_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < options.warmup; ++i) enqueue();
  std::vector<double> samples;
  for (int i = 0; i < options.repeats; ++i) {
    PROBE_CUDA(cudaEventRecord(start, stream));
    enqueue();
    PROBE_CUDA(cudaEventRecord(stop, stream));
    PROBE_CUDA(cudaEventSynchronize(stop));
    float milliseconds = 0;
    PROBE_CUDA(cudaEventElapsedTime(&milliseconds, start, stop));
    samples.push_back(milliseconds * 1e-3);
  }
  PROBE_CUDA(cudaEventDestroy(start));
  PROBE_CUDA(cudaEventDestroy(stop));
  return median_of(samples);
}

struct GemmType {
  const char* name;
  cudaDataType_t data;
  cublasComputeType_t compute;
  std::size_t element_bytes;
};

const std::vector<GemmType>& gemm_types() {
  static const std::vector<GemmType> types{{"bf16", CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2},
                                           {"fp16", CUDA_R_16F, CUBLAS_COMPUTE_32F, 2},
                                           {"tf32", CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 4}};
  return types;
}

// One cuBLASLt GEMM, C[m,n] = A[m,k] B[k,n] column-major, its algorithm
// from the heuristic.
class LtGemm {
 public:
  LtGemm(cublasLtHandle_t handle, const GemmType& type, long long m, long long n, long long k, void* workspace,
         std::size_t workspace_bytes)
      : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes),
        a_(static_cast<std::size_t>(m * k) * type.element_bytes), b_(static_cast<std::size_t>(k * n) * type.element_bytes),
        c_(static_cast<std::size_t>(m * n) * type.element_bytes) {
    if (type.data == CUDA_R_16BF) {
      randomize<__nv_bfloat16>(a_.pointer, m * k, 1);
      randomize<__nv_bfloat16>(b_.pointer, k * n, 2);
    } else if (type.data == CUDA_R_16F) {
      randomize<__half>(a_.pointer, m * k, 1);
      randomize<__half>(b_.pointer, k * n, 2);
    } else {
      randomize<float>(a_.pointer, m * k, 1);
      randomize<float>(b_.pointer, k * n, 2);
    }
    PROBE_CUBLAS(cublasLtMatmulDescCreate(&desc_, type.compute, CUDA_R_32F));
    const cublasOperation_t none = CUBLAS_OP_N;
    PROBE_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &none, sizeof none));
    PROBE_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none));
    PROBE_CUBLAS(cublasLtMatrixLayoutCreate(&layout_a_, type.data, m, k, m));
    PROBE_CUBLAS(cublasLtMatrixLayoutCreate(&layout_b_, type.data, k, n, k));
    PROBE_CUBLAS(cublasLtMatrixLayoutCreate(&layout_c_, type.data, m, n, m));
    cublasLtMatmulPreference_t preference;
    PROBE_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
    PROBE_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &workspace_bytes_, sizeof workspace_bytes_));
    int found = 0;
    PROBE_CUBLAS(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, layout_a_, layout_b_, layout_c_, layout_c_, preference, 1,
                                                &heuristic_, &found));
    PROBE_CUBLAS(cublasLtMatmulPreferenceDestroy(preference));
    if (found == 0) throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic: no algorithm for this GEMM");
  }
  ~LtGemm() {
    cublasLtMatrixLayoutDestroy(layout_a_);
    cublasLtMatrixLayoutDestroy(layout_b_);
    cublasLtMatrixLayoutDestroy(layout_c_);
    cublasLtMatmulDescDestroy(desc_);
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void enqueue(cudaStream_t stream) const {
    const float alpha = 1, beta = 0;
    PROBE_CUBLAS(cublasLtMatmul(handle_, desc_, &alpha, a_.pointer, layout_a_, b_.pointer, layout_b_, &beta, c_.pointer,
                                layout_c_, c_.pointer, layout_c_, &heuristic_.algo, workspace_, workspace_bytes_, stream));
  }

 private:
  cublasLtHandle_t handle_;
  void* workspace_;
  std::size_t workspace_bytes_;
  DeviceBuffer a_, b_, c_;
  cublasLtMatmulDesc_t desc_{};
  cublasLtMatrixLayout_t layout_a_{}, layout_b_{}, layout_c_{};
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

// The NCCL ranks this process drives: every local GPU (one process), or
// the GPU of its local rank (one process per GPU under mpirun).
struct NcclRank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

std::vector<NcclRank> init_nccl(int& total_ranks) {
  int devices = 0;
  PROBE_CUDA(cudaGetDeviceCount(&devices));
  std::vector<NcclRank> ranks;
  if (world_size() == 1) {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(devices));
    std::vector<int> ids(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) ids[static_cast<std::size_t>(d)] = d;
    PROBE_NCCL(ncclCommInitAll(comms.data(), devices, ids.data()));
    for (int d = 0; d < devices; ++d) ranks.push_back({d, comms[static_cast<std::size_t>(d)], nullptr});
    total_ranks = devices;
  } else {
    ncclUniqueId id;
    if (world_rank() == 0) PROBE_NCCL(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    const int device = local_rank() % devices;
    PROBE_CUDA(cudaSetDevice(device));
    NcclRank rank{device, nullptr, nullptr};
    PROBE_NCCL(ncclCommInitRank(&rank.comm, world_size(), id, world_rank()));
    ranks.push_back(rank);
    total_ranks = world_size();
  }
  for (auto& rank : ranks) {
    PROBE_CUDA(cudaSetDevice(rank.device));
    PROBE_CUDA(cudaStreamCreateWithFlags(&rank.stream, cudaStreamNonBlocking));
  }
  return ranks;
}

// A send and a receive buffer of `bytes` on each GPU this process drives.
class NcclBuffers {
 public:
  NcclBuffers(const std::vector<NcclRank>& ranks, std::size_t bytes) {
    for (const auto& r : ranks) {
      PROBE_CUDA(cudaSetDevice(r.device));
      send.push_back(std::make_unique<DeviceBuffer>(bytes));
      receive.push_back(std::make_unique<DeviceBuffer>(bytes));
      randomize<float>(send.back()->pointer, bytes / 4, 4);
    }
  }
  std::vector<std::unique_ptr<DeviceBuffer>> send, receive;
};

// One call of `op` on every rank this process drives, `count` floats in
// nccl-tests' convention (the whole array for all-gather, reduce-scatter
// and all-to-all).
void enqueue_collective(const std::vector<NcclRank>& ranks, const NcclBuffers& buffers, CollectiveOp op,
                        std::size_t count, int total_ranks) {
  const std::size_t chunk = count / static_cast<std::size_t>(total_ranks);
  PROBE_NCCL(ncclGroupStart());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const NcclRank& r = ranks[i];
    int me = 0;
    PROBE_NCCL(ncclCommUserRank(r.comm, &me));
    auto* send = static_cast<float*>(buffers.send[i]->pointer);
    auto* receive = static_cast<float*>(buffers.receive[i]->pointer);
    switch (op) {
      case CollectiveOp::all_reduce:
        PROBE_NCCL(ncclAllReduce(send, receive, count, ncclFloat, ncclSum, r.comm, r.stream));
        break;
      case CollectiveOp::all_gather:
        PROBE_NCCL(ncclAllGather(send, receive, chunk, ncclFloat, r.comm, r.stream));
        break;
      case CollectiveOp::reduce_scatter:
        PROBE_NCCL(ncclReduceScatter(send, receive, chunk, ncclFloat, ncclSum, r.comm, r.stream));
        break;
      case CollectiveOp::broadcast:
        PROBE_NCCL(ncclBroadcast(send, receive, count, ncclFloat, 0, r.comm, r.stream));
        break;
      case CollectiveOp::reduce:
        PROBE_NCCL(ncclReduce(send, receive, count, ncclFloat, ncclSum, 0, r.comm, r.stream));
        break;
      case CollectiveOp::all_to_all:
        for (int peer = 0; peer < total_ranks; ++peer) {
          PROBE_NCCL(ncclSend(send + peer * chunk, chunk, ncclFloat, peer, r.comm, r.stream));
          PROBE_NCCL(ncclRecv(receive + peer * chunk, chunk, ncclFloat, peer, r.comm, r.stream));
        }
        break;
      case CollectiveOp::send_recv:
        PROBE_NCCL(ncclSend(send, count, ncclFloat, (me + 1) % total_ranks, r.comm, r.stream));
        PROBE_NCCL(ncclRecv(receive, count, ncclFloat, (me + total_ranks - 1) % total_ranks, r.comm, r.stream));
        break;
    }
  }
  PROBE_NCCL(ncclGroupEnd());
}

void synchronize(const std::vector<NcclRank>& ranks) {
  for (const auto& r : ranks) {
    PROBE_CUDA(cudaSetDevice(r.device));
    PROBE_CUDA(cudaStreamSynchronize(r.stream));
  }
}

MachineInfo machine_info() {
  int device = 0;
  PROBE_CUDA(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  PROBE_CUDA(cudaGetDeviceProperties(&properties, device));
  int runtime = 0, nccl = 0;
  PROBE_CUDA(cudaRuntimeGetVersion(&runtime));
  PROBE_NCCL(ncclGetVersion(&nccl));
  MachineInfo machine;
  machine.host = processor_name();
  machine.device = properties.name;
  machine.backend = "cuda";
  machine.software = "CUDA runtime " + std::to_string(runtime) + ", NCCL " + std::to_string(nccl) + ", cuBLASLt " +
                     std::to_string(cublasLtGetVersion());
  return machine;
}

void probe_gemms(const ProbeOptions& options, cudaStream_t stream, cublasLtHandle_t handle, void* workspace,
                 std::size_t workspace_bytes, Measurements& out) {
  const auto shapes = options.quick ? probe_gemm_shapes(1024, 1024, 1024) : probe_gemm_shapes(16384, 4096, 16384);
  for (const GemmType& type : gemm_types()) {
    for (const auto& s : shapes) {
      const LtGemm gemm(handle, type, s.m, s.n, s.k, workspace, workspace_bytes);
      const double seconds = time_on_stream(options, stream, [&] { gemm.enqueue(stream); });
      out.gemm.push_back({type.name, s.m, s.n, s.k, seconds});
      options.print("gemm " + std::string(type.name) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                    std::to_string(s.k) + ": " + std::to_string(2.0 * s.m * s.n * s.k / seconds / 1e12) + " TFLOP/s");
    }
  }
}

void probe_copies_and_launch(const ProbeOptions& options, cudaStream_t stream, Measurements& out) {
  const auto largest = static_cast<std::size_t>(std::min(options.max_bytes, options.quick ? double(64 << 20) : double(1ull << 30)));
  DeviceBuffer from(largest), to(largest);
  randomize<float>(from.pointer, largest / 4, 3);
  void* host = nullptr;
  PROBE_CUDA(cudaMallocHost(&host, largest));
  for (std::size_t bytes = 1 << 20; bytes <= largest; bytes *= 4) {
    const double device = time_on_stream(options, stream, [&] {
      PROBE_CUDA(cudaMemcpyAsync(to.pointer, from.pointer, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    const double h2d = time_on_stream(options, stream, [&] {
      PROBE_CUDA(cudaMemcpyAsync(to.pointer, host, bytes, cudaMemcpyHostToDevice, stream));
    });
    const double d2h = time_on_stream(options, stream, [&] {
      PROBE_CUDA(cudaMemcpyAsync(host, from.pointer, bytes, cudaMemcpyDeviceToHost, stream));
    });
    out.copies.push_back({"device_copy", static_cast<double>(bytes), device});
    out.copies.push_back({"host_to_device", static_cast<double>(bytes), h2d});
    out.copies.push_back({"device_to_host", static_cast<double>(bytes), d2h});
    options.print("copies " + std::to_string(bytes) + " B: device " + std::to_string(2.0 * bytes / device / 1e9) +
                  " GB/s, h2d " + std::to_string(bytes / h2d / 1e9) + " GB/s, d2h " + std::to_string(bytes / d2h / 1e9) +
                  " GB/s");
  }
  PROBE_CUDA(cudaFreeHost(host));

  // Per kernel, as a stream of back-to-back kernels pays it.
  constexpr int kBatch = 100;
  for (int sample = 0; sample < options.repeats; ++sample) {
    const double seconds = time_on_stream(options, stream, [&] {
      for (int i = 0; i < kBatch; ++i) empty_kernel<<<1, 1, 0, stream>>>();
      PROBE_CUDA(cudaGetLastError());
    });
    out.kernel_launch_seconds.push_back(seconds / kBatch);
  }
}

void probe_collectives(const ProbeOptions& options, const std::vector<NcclRank>& ranks, int total_ranks, int nodes,
                       Measurements& out) {
  const auto largest = static_cast<std::size_t>(std::min(options.max_bytes, options.quick ? double(16 << 20) : double(1ull << 30)));
  const NcclBuffers buffers(ranks, largest);
  for (CollectiveOp op : workloads::all_collective_ops()) {
    if (op == CollectiveOp::reduce) continue;
    if (total_ranks == 1 && (op == CollectiveOp::all_to_all || op == CollectiveOp::send_recv)) continue;
    const bool split = op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter || op == CollectiveOp::all_to_all;
    for (std::size_t bytes = 8; bytes <= largest; bytes *= options.quick ? 8 : 2) {
      std::size_t count = bytes / 4;
      if (split) count = count / static_cast<std::size_t>(total_ranks) * static_cast<std::size_t>(total_ranks);
      if (count == 0) continue;
      const double seconds = time_together(options, [&] {
        enqueue_collective(ranks, buffers, op, count, total_ranks);
        synchronize(ranks);
      });
      CollectiveMeasurement m;
      m.op = op;
      m.algorithm = "auto";
      m.ranks = total_ranks;
      m.nodes = nodes;
      m.bytes = static_cast<double>(count) * 4;
      m.seconds = seconds;
      m.source = "shardsim-probe --backend gpu";
      out.collectives.push_back(m);
    }
  }
}

// A large GEMM on the first GPU alone, then while an all-reduce loop on the
// NCCL streams keeps the GPUs communicating for longer than the GEMMs run.
void probe_interference(const ProbeOptions& options, const std::vector<NcclRank>& ranks, int total_ranks,
                        cublasLtHandle_t handle, void* workspace, std::size_t workspace_bytes, Measurements& out) {
  const long long size = options.quick ? 2048 : 8192;
  const GemmType& bf16 = gemm_types().front();
  PROBE_CUDA(cudaSetDevice(ranks.front().device));
  cudaStream_t compute;
  PROBE_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  const LtGemm gemm(handle, bf16, size, size, size, workspace, workspace_bytes);
  const double alone = time_on_stream(options, compute, [&] { gemm.enqueue(compute); });

  const std::size_t bytes = options.quick ? (16 << 20) : (256 << 20);
  const NcclBuffers buffers(ranks, bytes);
  const double one_call = time_together(options, [&] {
    enqueue_collective(ranks, buffers, CollectiveOp::all_reduce, bytes / 4, total_ranks);
    synchronize(ranks);
  });
  const double gemms = alone * (options.warmup + options.repeats);
  const int calls = static_cast<int>(std::ceil(2.0 * gemms / one_call)) + 2;
  MPI_Barrier(MPI_COMM_WORLD);
  for (int i = 0; i < calls; ++i) enqueue_collective(ranks, buffers, CollectiveOp::all_reduce, bytes / 4, total_ranks);
  PROBE_CUDA(cudaSetDevice(ranks.front().device));
  const double with = time_on_stream(options, compute, [&] { gemm.enqueue(compute); });
  synchronize(ranks);
  PROBE_CUDA(cudaStreamDestroy(compute));
  out.interference.push_back({"bf16", size, size, size, alone, with, CollectiveOp::all_reduce, static_cast<double>(bytes)});
  options.print("interference: GEMM " + std::to_string(alone * 1e3) + " ms alone, " + std::to_string(with * 1e3) +
                " ms beside an all-reduce loop");
}

}  // namespace

bool gpu_visible() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

Measurements run_gpu_probe(const ProbeOptions& options) {
  if (!gpu_visible()) throw std::runtime_error("cudaGetDeviceCount: no CUDA device visible");
  Measurements out;
  int total_ranks = 1;
  const std::vector<NcclRank> ranks = init_nccl(total_ranks);
  const int nodes = node_count();
  PROBE_CUDA(cudaSetDevice(ranks.front().device));
  out.machine = machine_info();

  cublasLtHandle_t handle;
  PROBE_CUBLAS(cublasLtCreate(&handle));
  const std::size_t workspace_bytes = 32u << 20;
  DeviceBuffer workspace(workspace_bytes);
  probe_gemms(options, ranks.front().stream, handle, workspace.pointer, workspace_bytes, out);
  probe_copies_and_launch(options, ranks.front().stream, out);
  probe_collectives(options, ranks, total_ranks, nodes, out);
  probe_interference(options, ranks, total_ranks, handle, workspace.pointer, workspace_bytes, out);
  PROBE_CUBLAS(cublasLtDestroy(handle));
  for (const auto& r : ranks) {
    PROBE_CUDA(cudaSetDevice(r.device));
    PROBE_CUDA(cudaStreamDestroy(r.stream));
    PROBE_NCCL(ncclCommDestroy(r.comm));
  }
  return out;
}

}  // namespace shardsim::calib
