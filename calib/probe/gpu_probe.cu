#include "calib/probe/gpu_probe.h"

#include "calib/cuda/fused_attention.h"
#include "calib/cuda/lt_gemm.h"
#include "calib/probe/probe_timing.h"
#include "workloads/kernels/attention_kernels.h"

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
#include <utility>
#include <vector>

namespace shardsim::calib {

namespace {

using workloads::CollectiveOp;

__global__ void empty_kernel() {}

// Seconds of `calls` back-to-back calls of `enqueue` on `stream`.
template <typename F>
double time_calls(cudaStream_t stream, long long calls, F&& enqueue) {
  cudaEvent_t start, stop;
  SHARDSIM_CUDA(cudaEventCreate(&start));
  SHARDSIM_CUDA(cudaEventCreate(&stop));
  SHARDSIM_CUDA(cudaEventRecord(start, stream));
  for (long long i = 0; i < calls; ++i) enqueue();
  SHARDSIM_CUDA(cudaEventRecord(stop, stream));
  SHARDSIM_CUDA(cudaEventSynchronize(stop));
  float milliseconds = 0;
  SHARDSIM_CUDA(cudaEventElapsedTime(&milliseconds, start, stop));
  SHARDSIM_CUDA(cudaEventDestroy(start));
  SHARDSIM_CUDA(cudaEventDestroy(stop));
  return milliseconds * 1e-3;
}

// Median of `repeats` CUDA-event timings of one call of `enqueue` on `stream`.
template <typename F>
double time_on_stream(const ProbeOptions& options, cudaStream_t stream, F&& enqueue) {
  for (int i = 0; i < options.warmup; ++i) enqueue();
  std::vector<double> samples;
  for (int i = 0; i < options.repeats; ++i) samples.push_back(time_calls(stream, 1, enqueue));
  return median_of(samples);
}

// Seconds per call of `enqueue` under sustained load (ProbeOptions::
// warmup_seconds): back-to-back calls for the warm-up time, then the median
// of `repeats` means over back-to-back calls lasting min_timed_seconds.
template <typename F>
double time_sustained(const ProbeOptions& options, cudaStream_t stream, F&& enqueue) {
  constexpr double kMostCalls = 1 << 20;
  for (int i = 0; i < options.warmup; ++i) enqueue();
  const double one = std::max(time_calls(stream, 1, enqueue), 1e-7);
  const auto calls_for = [&](double seconds) {
    return static_cast<long long>(std::clamp(std::ceil(seconds / one), 1.0, kMostCalls));
  };
  time_calls(stream, calls_for(options.warmup_seconds), enqueue);
  const long long calls = calls_for(options.min_timed_seconds);
  std::vector<double> samples;
  for (int i = 0; i < options.repeats; ++i) {
    samples.push_back(time_calls(stream, calls, enqueue) / static_cast<double>(calls));
  }
  return median_of(samples);
}

// The NCCL ranks this process drives: every local GPU (one process), or
// the GPU of its local rank (one process per GPU under mpirun).
struct NcclRank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

std::vector<NcclRank> init_nccl(int& total_ranks) {
  int devices = 0;
  SHARDSIM_CUDA(cudaGetDeviceCount(&devices));
  std::vector<NcclRank> ranks;
  if (world_size() == 1) {
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(devices));
    std::vector<int> ids(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) ids[static_cast<std::size_t>(d)] = d;
    SHARDSIM_NCCL(ncclCommInitAll(comms.data(), devices, ids.data()));
    for (int d = 0; d < devices; ++d) ranks.push_back({d, comms[static_cast<std::size_t>(d)], nullptr});
    total_ranks = devices;
  } else {
    ncclUniqueId id;
    if (world_rank() == 0) SHARDSIM_NCCL(ncclGetUniqueId(&id));
    world_broadcast(&id, sizeof id);
    const int device = local_rank() % devices;
    SHARDSIM_CUDA(cudaSetDevice(device));
    NcclRank rank{device, nullptr, nullptr};
    SHARDSIM_NCCL(ncclCommInitRank(&rank.comm, world_size(), id, world_rank()));
    ranks.push_back(rank);
    total_ranks = world_size();
  }
  for (auto& rank : ranks) {
    SHARDSIM_CUDA(cudaSetDevice(rank.device));
    SHARDSIM_CUDA(cudaStreamCreateWithFlags(&rank.stream, cudaStreamNonBlocking));
  }
  return ranks;
}

// A send and a receive buffer of `bytes` on each GPU this process drives.
class NcclBuffers {
 public:
  NcclBuffers(const std::vector<NcclRank>& ranks, std::size_t bytes) {
    for (const auto& r : ranks) {
      SHARDSIM_CUDA(cudaSetDevice(r.device));
      send.push_back(std::make_unique<DeviceBuffer>(bytes));
      receive.push_back(std::make_unique<DeviceBuffer>(bytes));
      fill_random(CUDA_R_32F, send.back()->pointer, bytes / 4, 4);
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
  SHARDSIM_NCCL(ncclGroupStart());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const NcclRank& r = ranks[i];
    int me = 0;
    SHARDSIM_NCCL(ncclCommUserRank(r.comm, &me));
    auto* send = static_cast<float*>(buffers.send[i]->pointer);
    auto* receive = static_cast<float*>(buffers.receive[i]->pointer);
    switch (op) {
      case CollectiveOp::all_reduce:
        SHARDSIM_NCCL(ncclAllReduce(send, receive, count, ncclFloat, ncclSum, r.comm, r.stream));
        break;
      case CollectiveOp::all_gather:
        SHARDSIM_NCCL(ncclAllGather(send, receive, chunk, ncclFloat, r.comm, r.stream));
        break;
      case CollectiveOp::reduce_scatter:
        SHARDSIM_NCCL(ncclReduceScatter(send, receive, chunk, ncclFloat, ncclSum, r.comm, r.stream));
        break;
      case CollectiveOp::broadcast:
        SHARDSIM_NCCL(ncclBroadcast(send, receive, count, ncclFloat, 0, r.comm, r.stream));
        break;
      case CollectiveOp::reduce:
        SHARDSIM_NCCL(ncclReduce(send, receive, count, ncclFloat, ncclSum, 0, r.comm, r.stream));
        break;
      case CollectiveOp::all_to_all:
        for (int peer = 0; peer < total_ranks; ++peer) {
          SHARDSIM_NCCL(ncclSend(send + peer * chunk, chunk, ncclFloat, peer, r.comm, r.stream));
          SHARDSIM_NCCL(ncclRecv(receive + peer * chunk, chunk, ncclFloat, peer, r.comm, r.stream));
        }
        break;
      case CollectiveOp::send_recv:
        SHARDSIM_NCCL(ncclSend(send, count, ncclFloat, (me + 1) % total_ranks, r.comm, r.stream));
        SHARDSIM_NCCL(ncclRecv(receive, count, ncclFloat, (me + total_ranks - 1) % total_ranks, r.comm, r.stream));
        break;
      case CollectiveOp::send:
        throw std::logic_error("the probe sweeps nccl-tests' collectives; send is priced as send_recv");
    }
  }
  SHARDSIM_NCCL(ncclGroupEnd());
}

void synchronize(const std::vector<NcclRank>& ranks) {
  for (const auto& r : ranks) {
    SHARDSIM_CUDA(cudaSetDevice(r.device));
    SHARDSIM_CUDA(cudaStreamSynchronize(r.stream));
  }
}

MachineInfo machine_info() {
  int device = 0;
  SHARDSIM_CUDA(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  SHARDSIM_CUDA(cudaGetDeviceProperties(&properties, device));
  int runtime = 0, nccl = 0;
  SHARDSIM_CUDA(cudaRuntimeGetVersion(&runtime));
  SHARDSIM_NCCL(ncclGetVersion(&nccl));
  MachineInfo machine;
  machine.host = processor_name();
  machine.device = properties.name;
  machine.backend = "cuda";
  machine.software = "CUDA runtime " + std::to_string(runtime) + ", NCCL " + std::to_string(nccl) + ", cuBLASLt " +
                     std::to_string(cublasLtGetVersion());
  return machine;
}

int compute_capability() {
  int device = 0;
  SHARDSIM_CUDA(cudaGetDevice(&device));
  cudaDeviceProp properties{};
  SHARDSIM_CUDA(cudaGetDeviceProperties(&properties, device));
  return properties.major * 10 + properties.minor;
}

// Every dtype the GPU has. One that cuBLASLt turns down here (fp8 on a
// library without a kernel for a shape) is reported and skipped, so the
// rest of the run's measurements still come back.
void probe_gemms(const ProbeOptions& options, cudaStream_t stream, cublasLtHandle_t handle, void* workspace,
                 std::size_t workspace_bytes, Measurements& out) {
  const auto grid = options.quick ? probe_gemm_shapes(1024, 1024, 1024) : probe_gemm_shapes(16384, 4096, 16384);
  // bf16, what training runs its GEMMs in, also over every GEMM of a layer.
  auto bf16_shapes = grid;
  if (!options.quick) {
    for (const GemmShape3& s : layer_gemm_shapes(4096, 16384, {1, 2, 4, 8})) {
      const auto same = [&](const GemmShape3& t) { return t.m == s.m && t.n == s.n && t.k == s.k; };
      if (std::none_of(bf16_shapes.begin(), bf16_shapes.end(), same)) bf16_shapes.push_back(s);
    }
  }
  const int capability = compute_capability();
  for (const GemmType* gemm_type : all_gemm_types()) {
    const GemmType& type = *gemm_type;
    const auto& shapes = std::string(type.name) == "bf16" ? bf16_shapes : grid;
    if (capability < type.minimum_capability) {
      options.print("gemm " + std::string(type.name) + ": skipped, needs compute capability " +
                    std::to_string(type.minimum_capability) + ", this GPU has " + std::to_string(capability));
      continue;
    }
    for (const auto& s : shapes) {
      try {
        const LtGemm gemm(handle, type, s.m, s.n, s.k, workspace, workspace_bytes);
        const double seconds = time_sustained(options, stream, [&] { gemm.enqueue(stream); });
        out.gemm.push_back({type.name, s.m, s.n, s.k, seconds});
        options.print("gemm " + std::string(type.name) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                      std::to_string(s.k) + ": " + std::to_string(2.0 * s.m * s.n * s.k / seconds / 1e12) + " TFLOP/s");
      } catch (const std::runtime_error& e) {
        options.print("gemm " + std::string(type.name) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                      std::to_string(s.k) + ": skipped, " + e.what());
        SHARDSIM_CUDA(cudaGetLastError());  // a launch error would otherwise stick to the next call
      }
    }
  }
}

// Attention without a fused kernel is GEMMs batched over heads: scores
// Q K^T (sequence x sequence x head_dim per head) and context P V
// (sequence x head_dim x sequence), which the simulator prices, as it does
// any GEMM, from the GEMM curve by FLOPs. LLaMA-7B's 32 heads of 128.
void probe_attention_gemms(const ProbeOptions& options, cudaStream_t stream, cublasLtHandle_t handle, void* workspace,
                           std::size_t workspace_bytes, Measurements& out) {
  constexpr long long kHeads = 32, kHeadDim = 128;
  const GemmType& bf16 = *find_gemm_type("bf16");
  for (long long sequence = 512; sequence <= (options.quick ? 1024 : 8192); sequence *= 2) {
    for (const auto& [what, shape] : {std::pair{"scores", GemmShape3{sequence, sequence, kHeadDim}},
                                      std::pair{"context", GemmShape3{sequence, kHeadDim, sequence}}}) {
      const std::string name = std::string("attention ") + what + " bf16 " + std::to_string(kHeads) + " x " +
                               std::to_string(shape.m) + "x" + std::to_string(shape.n) + "x" + std::to_string(shape.k);
      try {
        const LtGemm gemm(handle, bf16, shape.m, shape.n, shape.k, workspace, workspace_bytes, kHeads);
        const double seconds = time_sustained(options, stream, [&] { gemm.enqueue(stream); });
        GemmMeasurement point{bf16.name, shape.m, shape.n, shape.k, seconds, kHeads};
        out.gemm.push_back(point);
        options.print(name + ": " + std::to_string(point.flops() / seconds / 1e12) + " TFLOP/s");
      } catch (const std::runtime_error& e) {
        options.print(name + ": skipped, " + e.what());
        SHARDSIM_CUDA(cudaGetLastError());
      }
    }
  }
}

// The largest difference between the kernel's O and softmax(Q K^T /
// sqrt(head_dim)) V worked out here in double precision, and the largest
// |O| of that reference.
std::pair<double, double> attention_error(const AttentionShape& shape, const FusedAttention::HostOperands& x) {
  const long long s = shape.sequence, d = shape.head_dim;
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  double worst = 0, largest = 0;
  std::vector<double> p(static_cast<std::size_t>(s));
  for (long long matrix = 0; matrix < shape.batch * shape.heads; ++matrix) {
    const auto at = [&](const std::vector<float>& t, long long row, long long column) {
      return static_cast<double>(t[static_cast<std::size_t>((matrix * s + row) * d + column)]);
    };
    for (long long i = 0; i < s; ++i) {
      double top = -INFINITY, sum = 0;
      for (long long j = 0; j < s; ++j) {
        double score = 0;
        for (long long c = 0; c < d; ++c) score += at(x.q, i, c) * at(x.k, j, c);
        p[static_cast<std::size_t>(j)] = scale * score;
        top = std::max(top, scale * score);
      }
      for (double& value : p) sum += (value = std::exp(value - top));
      for (long long c = 0; c < d; ++c) {
        double want = 0;
        for (long long j = 0; j < s; ++j) want += p[static_cast<std::size_t>(j)] * at(x.v, j, c);
        want /= sum;
        worst = std::max(worst, std::abs(at(x.o, i, c) - want));
        largest = std::max(largest, std::abs(want));
      }
    }
  }
  return {worst, largest};
}

// cuDNN's fused flash attention (fused_attention.h), the kernel the
// simulator's attention ops stand for: LLaMA-7B's 32 heads of 128 over the
// same tokens at every sequence length, so that only the length changes.
void probe_fused_attention(const ProbeOptions& options, cudaStream_t stream, Measurements& out) {
  constexpr long long kHeads = 32, kHeadDim = 128;
  if (!cudnn_available()) {
    options.print("fused attention: skipped, " + cudnn_description());
    return;
  }
  options.print("fused attention: cuDNN " + cudnn_description());
  // Timed only once its results are right, as nccl-tests checks its own:
  // bf16 operands and output leave well under 2 % of the largest |O|; a
  // wrong layout or a lost scale is off by the size of O itself.
  try {
    const AttentionShape small{2, 4, 256, kHeadDim};
    const FusedAttention attention(small);
    attention.enqueue(stream);
    const auto [worst, largest] = attention_error(small, attention.operands_on_host());
    const bool right = worst <= 0.02 * largest;
    options.print("fused attention: largest error " + std::to_string(worst) + " against a reference whose largest |O| is " +
                  std::to_string(largest) + (right ? "" : ": wrong results, not timed"));
    if (!right) return;
  } catch (const std::runtime_error& e) {
    options.print("fused attention: skipped, " + std::string(e.what()));
    SHARDSIM_CUDA(cudaGetLastError());
    return;
  }
  const long long tokens = options.quick ? 2048 : 16384;
  for (long long sequence = 512; sequence <= (options.quick ? 1024 : 8192); sequence *= 2) {
    const AttentionShape shape{tokens / sequence, kHeads, sequence, kHeadDim};
    const std::string name = "fused attention bf16 " + std::to_string(shape.batch) + " x " + std::to_string(kHeads) +
                             " heads x " + std::to_string(sequence) + " x " + std::to_string(kHeadDim);
    try {
      const FusedAttention attention(shape);
      AttentionMeasurement point;
      point.dtype = "bf16";
      point.batch = static_cast<int>(shape.batch);
      point.heads = static_cast<int>(kHeads);
      point.sequence = static_cast<int>(sequence);
      point.head_dim = static_cast<int>(kHeadDim);
      point.causal = false;
      point.flops = workloads::flash_attention_flops(static_cast<double>(shape.batch), kHeads,
                                                     static_cast<double>(sequence), kHeadDim, false, false);
      point.seconds = time_sustained(options, stream, [&] { attention.enqueue(stream); });
      out.attention.push_back(point);
      options.print(name + ": " + std::to_string(point.flops / point.seconds / 1e12) + " TFLOP/s");
    } catch (const std::runtime_error& e) {
      options.print(name + ": skipped, " + e.what());
      SHARDSIM_CUDA(cudaGetLastError());
    }
  }
}

void probe_copies_and_launch(const ProbeOptions& options, cudaStream_t stream, Measurements& out) {
  const auto largest = static_cast<std::size_t>(std::min(options.max_bytes, options.quick ? double(64 << 20) : double(1ull << 30)));
  DeviceBuffer from(largest), to(largest);
  fill_random(CUDA_R_32F, from.pointer, largest / 4, 3);
  void* host = nullptr;
  SHARDSIM_CUDA(cudaMallocHost(&host, largest));
  for (std::size_t bytes = 1 << 20; bytes <= largest; bytes *= 4) {
    const double device = time_on_stream(options, stream, [&] {
      SHARDSIM_CUDA(cudaMemcpyAsync(to.pointer, from.pointer, bytes, cudaMemcpyDeviceToDevice, stream));
    });
    const double h2d = time_on_stream(options, stream, [&] {
      SHARDSIM_CUDA(cudaMemcpyAsync(to.pointer, host, bytes, cudaMemcpyHostToDevice, stream));
    });
    const double d2h = time_on_stream(options, stream, [&] {
      SHARDSIM_CUDA(cudaMemcpyAsync(host, from.pointer, bytes, cudaMemcpyDeviceToHost, stream));
    });
    out.copies.push_back({"device_copy", static_cast<double>(bytes), device});
    out.copies.push_back({"host_to_device", static_cast<double>(bytes), h2d});
    out.copies.push_back({"device_to_host", static_cast<double>(bytes), d2h});
    options.print("copies " + std::to_string(bytes) + " B: device " + std::to_string(2.0 * bytes / device / 1e9) +
                  " GB/s, h2d " + std::to_string(bytes / h2d / 1e9) + " GB/s, d2h " + std::to_string(bytes / d2h / 1e9) +
                  " GB/s");
  }
  SHARDSIM_CUDA(cudaFreeHost(host));

  // Per kernel, as a stream of back-to-back kernels pays it.
  constexpr int kBatch = 100;
  for (int sample = 0; sample < options.repeats; ++sample) {
    const double seconds = time_on_stream(options, stream, [&] {
      for (int i = 0; i < kBatch; ++i) empty_kernel<<<1, 1, 0, stream>>>();
      SHARDSIM_CUDA(cudaGetLastError());
    });
    out.kernel_launch_seconds.push_back(seconds / kBatch);
  }
}

void probe_collectives(const ProbeOptions& options, const std::vector<NcclRank>& ranks, int total_ranks, int nodes,
                       Measurements& out) {
  const auto largest = static_cast<std::size_t>(std::min(options.max_bytes, options.quick ? double(16 << 20) : double(1ull << 30)));
  const NcclBuffers buffers(ranks, largest);
  for (CollectiveOp op : workloads::nccl_tests_collective_ops()) {
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
  const GemmType& bf16 = *find_gemm_type("bf16");
  SHARDSIM_CUDA(cudaSetDevice(ranks.front().device));
  cudaStream_t compute;
  SHARDSIM_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
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
  world_barrier();
  for (int i = 0; i < calls; ++i) enqueue_collective(ranks, buffers, CollectiveOp::all_reduce, bytes / 4, total_ranks);
  SHARDSIM_CUDA(cudaSetDevice(ranks.front().device));
  const double with = time_on_stream(options, compute, [&] { gemm.enqueue(compute); });
  synchronize(ranks);
  SHARDSIM_CUDA(cudaStreamDestroy(compute));
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
  SHARDSIM_CUDA(cudaSetDevice(ranks.front().device));
  out.machine = machine_info();

  cublasLtHandle_t handle;
  SHARDSIM_CUBLAS(cublasLtCreate(&handle));
  const std::size_t workspace_bytes = 32u << 20;
  DeviceBuffer workspace(workspace_bytes);
  probe_gemms(options, ranks.front().stream, handle, workspace.pointer, workspace_bytes, out);
  probe_attention_gemms(options, ranks.front().stream, handle, workspace.pointer, workspace_bytes, out);
  probe_fused_attention(options, ranks.front().stream, out);
  probe_copies_and_launch(options, ranks.front().stream, out);
  probe_collectives(options, ranks, total_ranks, nodes, out);
  probe_interference(options, ranks, total_ranks, handle, workspace.pointer, workspace_bytes, out);
  SHARDSIM_CUBLAS(cublasLtDestroy(handle));
  for (const auto& r : ranks) {
    SHARDSIM_CUDA(cudaSetDevice(r.device));
    SHARDSIM_CUDA(cudaStreamDestroy(r.stream));
    SHARDSIM_NCCL(ncclCommDestroy(r.comm));
  }
  return out;
}

}  // namespace shardsim::calib
