#include "calib/executor/gpu_executor.h"

#include "calib/cuda/fused_attention.h"
#include "calib/cuda/lt_gemm.h"
#include "calib/executor/buffer_pool.h"
#include "calib/executor/gemm_work.h"
#include "calib/executor/gpu_backend.h"
#include "calib/executor/measured_steps.h"
#include "calib/executor/measured_timeline.h"
#include "calib/executor/rank_threads.h"
#include "calib/executor/run_stop.h"
#include "calib/executor/streaming_buffer.h"
#include "topology/base/mpi_world.h"
#include "workloads/kernels/attention_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <memory>
#include <thread>
#include <tuple>

namespace shardsim::calib {

namespace {

using Clock = std::chrono::steady_clock;
using workloads::CollectiveOp;
using workloads::KernelClass;
using workloads::Op;
using workloads::OpKind;

// Reads `count` float4 values and writes as many, 16 bytes at a time, in
// passes over buffers of `buffer_count` (streaming_buffer.h).
__global__ void stream_bytes_kernel(const float4* in, float4* out, std::size_t buffer_count, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t pass = 0; pass < count; pass += buffer_count) {
    const std::size_t values = count - pass < buffer_count ? count - pass : buffer_count;
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < values; i += stride) {
      const float4 v = in[i];
      out[i] = make_float4(0.5f * v.x + 1.0f, 0.5f * v.y + 1.0f, 0.5f * v.z + 1.0f, 0.5f * v.w + 1.0f);
    }
  }
}

class Event {
 public:
  Event() { SHARDSIM_CUDA(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  operator cudaEvent_t() const { return event_; }

 private:
  cudaEvent_t event_{};
};

double seconds_between(cudaEvent_t from, cudaEvent_t to) {
  float milliseconds = 0;
  SHARDSIM_CUDA(cudaEventElapsedTime(&milliseconds, from, to));
  return milliseconds * 1e-3;
}

ncclDataType_t nccl_type(const std::string& dtype) {
  if (dtype == "fp16") return ncclHalf;
  if (dtype == "fp32") return ncclFloat;
  return ncclBfloat16;
}

// One rank on one GPU, from the thread that constructs it (the CUDA device
// is that thread's). Its own setup is done on construction, the NCCL
// communicators in connect(); `peer_failed`, when given (one process runs
// every rank), ends its waits as mpirun's SIGTERM does across processes.
class GpuRankRun final : public RankThreadRun {
 public:
  GpuRankRun(const workloads::Program& program, int rank, int device, const ncclUniqueId& id,
             const ExecutionOptions& options, const std::atomic<bool>* peer_failed)
      : program_(program), rank_(rank), ops_(program.program_of(rank).ops), options_(options), id_(id),
        peer_failed_(peer_failed), memory_([](std::size_t bytes) { return std::make_unique<DeviceBuffer>(bytes); }) {
    SHARDSIM_CUDA(cudaSetDevice(device));
    cudaDeviceProp properties{};
    SHARDSIM_CUDA(cudaGetDeviceProperties(&properties, device));
    capability_ = properties.major * 10 + properties.minor;
    const std::string dtype = program.description.value("dtype", std::string("bf16"));
    collective_type_ = nccl_type(dtype);
    collective_element_bytes_ = dtype == "fp32" ? 4 : 2;

    streams_.resize(program.streams.size());
    for (auto& stream : streams_) SHARDSIM_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    SHARDSIM_CUBLAS(cublasLtCreate(&lt_));
    workspace_ = std::make_unique<DeviceBuffer>(kWorkspaceBytes);

    // Kernels are planned now, for each op once: the measured steps run,
    // they do not set up.
    std::vector<double> stream_bytes(streams_.size(), 0), collective_bytes(streams_.size(), 0);
    fused_.assign(ops_.size(), nullptr);
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      const Op& op = ops_[i];
      const auto s = static_cast<std::size_t>(op.stream);
      if (op.kind == OpKind::collective) collective_bytes[s] = std::max(collective_bytes[s], op.bytes);
      if (op.kind == OpKind::compute) {
        if (gemm_repeats(op) > 0 && (op.kernel == KernelClass::gemm || op.kernel == KernelClass::attention)) {
          fused_[i] = attention_for(op);
          if (fused_[i] == nullptr) gemm_for(op);
        } else {
          stream_bytes[s] = std::max(stream_bytes[s], op.hbm_bytes);
        }
      }
    }
    if (!attention_fallback_.empty()) {
      // Every attention op one way: those planned before the failure too.
      for (std::size_t i = 0; i < ops_.size(); ++i) {
        if (fused_[i] != nullptr) gemm_for(ops_[i]);
      }
      fused_.assign(ops_.size(), nullptr);
      attentions_.clear();
    }
    for (std::size_t s = 0; s < streams_.size(); ++s) {
      const std::size_t side = streaming_buffer_bytes(stream_bytes[s]);
      buffers_.push_back({std::make_unique<DeviceBuffer>(static_cast<std::size_t>(collective_bytes[s]) + 16),
                          std::make_unique<DeviceBuffer>(static_cast<std::size_t>(collective_bytes[s]) + 16),
                          std::make_unique<DeviceBuffer>(side + 16), std::make_unique<DeviceBuffer>(side + 16),
                          side / sizeof(float4)});
      fill_random(CUDA_R_32F, buffers_.back().send->pointer, static_cast<std::size_t>(collective_bytes[s] / 4) + 4, 7);
      fill_random(CUDA_R_32F, buffers_.back().in->pointer, side / 4 + 4, 8);
    }
    const auto& resident = program.program_of(rank).resident_bytes;
    for (std::size_t c = 0; c < resident.size(); ++c) {
      if (resident[c] > 0) allocate(static_cast<int>(c), resident[c], "resident memory");
    }
    stream_ops_.resize(streams_.size());
    for (std::uint32_t i = 0; i < ops_.size(); ++i) stream_ops_[static_cast<std::size_t>(ops_[i].stream)].push_back(i);
    starts_.resize(ops_.size());
    ends_.resize(ops_.size());
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      starts_[i] = std::make_unique<Event>();
      ends_[i] = std::make_unique<Event>();
    }
    SHARDSIM_CUDA(cudaDeviceSynchronize());
  }

  // Destroying a communicator waits for its peers; while an error unwinds
  // the stack they may never come, so it is aborted instead.
  ~GpuRankRun() override {
    const auto close = std::uncaught_exceptions() > 0 ? ncclCommAbort : ncclCommDestroy;
    for (ncclComm_t comm : comms_) {
      if (comm != nullptr) close(comm);
    }
    if (world_ != nullptr) close(world_);
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    for (cudaStream_t stream : streams_) cudaStreamDestroy(stream);
  }
  GpuRankRun(const GpuRankRun&) = delete;
  GpuRankRun& operator=(const GpuRankRun&) = delete;

  // The world communicator, split into one per group of each of the
  // Program's communicators.
  void connect() override {
    SHARDSIM_NCCL(ncclCommInitRank(&world_, program_.ranks, id_, rank_));
    for (const workloads::Communicator& communicator : program_.communicators) {
      const int group = communicator.group_of_rank[static_cast<std::size_t>(rank_)];
      ncclComm_t comm = nullptr;
      SHARDSIM_NCCL(ncclCommSplit(world_, group < 0 ? NCCL_SPLIT_NOCOLOR : group, rank_, &comm, nullptr));
      comms_.push_back(comm);
    }
  }

  std::vector<MeasuredOp> step(bool inject_fault, std::int64_t& origin_ns) override {
    SHARDSIM_CUDA(cudaDeviceSynchronize());
    SHARDSIM_CUDA(cudaEventRecord(step_start_, streams_.front()));
    SHARDSIM_CUDA(cudaEventSynchronize(step_start_));
    origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    for (cudaStream_t stream : streams_) SHARDSIM_CUDA(cudaStreamWaitEvent(stream, step_start_, 0));
    for (std::uint32_t i = 0; i < ops_.size(); ++i) {
      if (inject_fault && i == options_.fault.op) inject(ops_[i]);
      enqueue(i);
    }
    wait_for_step();
    std::vector<MeasuredOp> timing(ops_.size());
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      timing[i] = {seconds_between(step_start_, *starts_[i]), seconds_between(step_start_, *ends_[i])};
    }
    return timing;
  }

  // The GPU, and how its attention ops ran where the Program has any.
  std::string device_name() const override {
    int device = 0;
    SHARDSIM_CUDA(cudaGetDevice(&device));
    cudaDeviceProp properties{};
    SHARDSIM_CUDA(cudaGetDeviceProperties(&properties, device));
    std::string name = properties.name;
    if (!attentions_.empty()) name += ", attention by cuDNN " + cudnn_description();
    if (!attention_fallback_.empty()) name += ", attention as batched GEMMs (" + attention_fallback_ + ")";
    return name;
  }

 private:
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;

  struct StreamBuffers {
    std::unique_ptr<DeviceBuffer> send, receive, in, out;
    std::size_t streaming_values = 0;  // float4 values of `in` and of `out`
  };

  std::string describe(const Op& op) const {
    return describe_op(program_, rank_, static_cast<std::uint32_t>(&op - ops_.data()));
  }

  const LtGemm& gemm_for(const Op& op) {
    const std::string dtype(workloads::to_string(op.dtype));
    const GemmType* type = find_gemm_type(dtype);
    if (type == nullptr) {
      throw std::invalid_argument(describe(op) + ": " + dtype + " GEMMs are not executed on GPUs (bf16, fp16, fp8)");
    }
    if (capability_ < type->minimum_capability) {
      throw std::invalid_argument(describe(op) + ": " + dtype + " GEMMs need compute capability " +
                                  std::to_string(type->minimum_capability) + "; this GPU has " +
                                  std::to_string(capability_));
    }
    const long long batch = op.kernel == KernelClass::attention ? gemm_repeats(op) : 1;
    const auto key = std::make_tuple(dtype, op.gemm.m, op.gemm.n, op.gemm.k, batch);
    auto& gemm = gemms_[key];
    if (!gemm) {
      gemm = std::make_unique<LtGemm>(lt_, *type, op.gemm.m, op.gemm.n, op.gemm.k, workspace_->pointer, kWorkspaceBytes,
                                      batch);
    }
    return *gemm;
  }

  // cuDNN's fused attention (the probe's kernel) for a flash attention op:
  // as many sequence x sequence x head_dim matrices, unmasked, as make the
  // op's FLOPs, as the batched GEMMs stand for the unfused kernels. nullptr
  // where it cannot run here (not bf16, no cuDNN, no engine): the op then
  // runs as batched GEMMs, and so does every attention op of the run.
  // Setup only: enqueue() reads fused_.
  const FusedAttention* attention_for(const Op& op) {
    if (op.kernel != KernelClass::attention || op.dtype != workloads::Dtype::bf16 || !attention_fallback_.empty()) {
      return nullptr;
    }
    const long long sequence = op.gemm.m, head_dim = op.gemm.k;
    if (sequence <= 0 || head_dim <= 0) return nullptr;
    const double one = workloads::flash_attention_flops(1, 1, static_cast<double>(sequence), static_cast<double>(head_dim),
                                                        false, false);
    const long long matrices = std::max<long long>(1, std::llround(op.flops / one));
    const auto key = std::make_tuple(sequence, head_dim, matrices);
    auto found = attentions_.find(key);
    if (found != attentions_.end()) return found->second.get();
    try {
      auto attention = std::make_unique<FusedAttention>(AttentionShape{1, matrices, sequence, head_dim});
      return attentions_.emplace(key, std::move(attention)).first->second.get();
    } catch (const std::runtime_error& e) {
      attention_fallback_ = e.what();
      return nullptr;
    }
  }

  void allocate(int category, double bytes, const std::string& what) {
    try {
      memory_.allocate(category, bytes);
    } catch (const std::runtime_error& e) {
      throw ExecutionError("rank " + std::to_string(rank_) + ": " + what + ": out of GPU memory allocating " +
                           std::to_string(static_cast<long long>(bytes)) + " bytes (" + e.what() + ")");
    }
  }

  void enqueue(std::uint32_t i) {
    const Op& op = ops_[i];
    cudaStream_t stream = streams_[static_cast<std::size_t>(op.stream)];
    for (std::uint32_t dep : op.deps) {
      if (ops_[dep].stream != op.stream) SHARDSIM_CUDA(cudaStreamWaitEvent(stream, *ends_[dep], 0));
    }
    SHARDSIM_CUDA(cudaEventRecord(*starts_[i], stream));
    switch (op.kind) {
      case OpKind::compute:
        if (fused_[i] != nullptr) {
          fused_[i]->enqueue(stream);
        } else if (gemm_repeats(op) > 0 && (op.kernel == KernelClass::gemm || op.kernel == KernelClass::attention)) {
          const LtGemm& gemm = gemm_for(op);
          const std::int64_t repeats = op.kernel == KernelClass::gemm ? gemm_repeats(op) : 1;
          for (std::int64_t r = 0; r < repeats; ++r) gemm.enqueue(stream);
        } else {
          const StreamBuffers& b = buffers_[static_cast<std::size_t>(op.stream)];
          const auto count = static_cast<std::size_t>(op.hbm_bytes / 2 / sizeof(float4));
          if (count > 0) {
            stream_bytes_kernel<<<1024, 256, 0, stream>>>(static_cast<const float4*>(b.in->pointer),
                                                          static_cast<float4*>(b.out->pointer),
                                                          std::max<std::size_t>(1, b.streaming_values), count);
            SHARDSIM_CUDA(cudaGetLastError());
          }
        }
        break;
      case OpKind::memory:
        if (op.bytes > 0) {
          allocate(static_cast<int>(op.memory), op.bytes, describe(op));
        } else {
          memory_.release(static_cast<int>(op.memory), -op.bytes);
        }
        break;
      case OpKind::collective:
        enqueue_collective(op, stream);
        break;
    }
    SHARDSIM_CUDA(cudaEventRecord(*ends_[i], stream));
  }

  void enqueue_collective(const Op& op, cudaStream_t stream) {
    ncclComm_t comm = comms_[static_cast<std::size_t>(op.communicator)];
    int size = 1, me = 0;
    SHARDSIM_NCCL(ncclCommCount(comm, &size));
    SHARDSIM_NCCL(ncclCommUserRank(comm, &me));
    const StreamBuffers& b = buffers_[static_cast<std::size_t>(op.stream)];
    auto* send = static_cast<char*>(b.send->pointer);
    auto* receive = static_cast<char*>(b.receive->pointer);
    const std::size_t count = static_cast<std::size_t>(op.bytes) / collective_element_bytes_;
    const std::size_t chunk = count / static_cast<std::size_t>(size);
    const std::size_t chunk_bytes = chunk * collective_element_bytes_;
    const ncclDataType_t type = collective_type_;
    switch (op.collective) {
      case CollectiveOp::all_reduce:
        SHARDSIM_NCCL(ncclAllReduce(send, receive, count, type, ncclSum, comm, stream));
        break;
      case CollectiveOp::all_gather:
        SHARDSIM_NCCL(ncclAllGather(send, receive, chunk, type, comm, stream));
        break;
      case CollectiveOp::reduce_scatter:
        SHARDSIM_NCCL(ncclReduceScatter(send, receive, chunk, type, ncclSum, comm, stream));
        break;
      case CollectiveOp::broadcast:
        SHARDSIM_NCCL(ncclBroadcast(send, receive, count, type, op.root, comm, stream));
        break;
      case CollectiveOp::reduce:
        SHARDSIM_NCCL(ncclReduce(send, receive, count, type, ncclSum, op.root, comm, stream));
        break;
      case CollectiveOp::all_to_all:
        SHARDSIM_NCCL(ncclGroupStart());
        for (int peer = 0; peer < size; ++peer) {
          SHARDSIM_NCCL(ncclSend(send + peer * chunk_bytes, chunk, type, peer, comm, stream));
          SHARDSIM_NCCL(ncclRecv(receive + peer * chunk_bytes, chunk, type, peer, comm, stream));
        }
        SHARDSIM_NCCL(ncclGroupEnd());
        break;
      case CollectiveOp::send_recv:
        SHARDSIM_NCCL(ncclGroupStart());
        SHARDSIM_NCCL(ncclSend(send, count, type, (me + 1) % size, comm, stream));
        SHARDSIM_NCCL(ncclRecv(receive, count, type, (me + size - 1) % size, comm, stream));
        SHARDSIM_NCCL(ncclGroupEnd());
        break;
      case CollectiveOp::send:
        SHARDSIM_NCCL(ncclGroupStart());
        if (me == op.root) {
          for (int peer = 0; peer < size; ++peer) {
            if (peer != me) SHARDSIM_NCCL(ncclSend(send, count, type, peer, comm, stream));
          }
        } else {
          SHARDSIM_NCCL(ncclRecv(receive, count, type, op.root, comm, stream));
        }
        SHARDSIM_NCCL(ncclGroupEnd());
        break;
    }
  }

  [[noreturn]] void inject(const Op& op) const {
    if (options_.fault.kind == ExecutionOptions::Fault::Kind::kill) std::raise(SIGKILL);
    while (!stop_signal() && !peer_failed()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    throw ExecutionError((peer_failed() ? "rank " + std::to_string(rank_) + ": stopped, another rank failed,"
                                        : stop_message(rank_)) +
                         " while hanging (fault injected) before " + describe(op));
  }

  // Polls each stream's first unfinished op (a stream finishes its ops in
  // order); a step without progress for the stall timeout, an NCCL error or
  // a stop signal aborts the communicators and throws.
  void wait_for_step() {
    std::vector<std::size_t> head(stream_ops_.size(), 0);
    const auto all_done = [&] {
      for (std::size_t s = 0; s < head.size(); ++s) {
        if (head[s] < stream_ops_[s].size()) return false;
      }
      return true;
    };
    Clock::time_point last_progress = Clock::now();
    while (!all_done()) {
      bool progressed = false;
      for (std::size_t s = 0; s < head.size(); ++s) {
        while (head[s] < stream_ops_[s].size()) {
          const std::uint32_t i = stream_ops_[s][head[s]];
          const cudaError_t status = cudaEventQuery(*ends_[i]);
          if (status == cudaErrorNotReady) break;
          if (status != cudaSuccess) fail("CUDA error " + std::string(cudaGetErrorString(status)) + " in " + describe(ops_[i]));
          ++head[s];
          progressed = true;
        }
      }
      const Clock::time_point now = Clock::now();
      if (progressed) last_progress = now;
      for (ncclComm_t comm : comms_) {
        ncclResult_t error = ncclSuccess;
        if (comm != nullptr && ncclCommGetAsyncError(comm, &error) == ncclSuccess && error != ncclSuccess) {
          fail(std::string("NCCL error: ") + ncclGetErrorString(error) + stuck_ops(head));
        }
      }
      if (stop_signal()) fail(stop_message(rank_) + stuck_ops(head));
      if (peer_failed()) fail("stopped, another rank failed" + stuck_ops(head));
      if (std::chrono::duration<double>(now - last_progress).count() > options_.stall_timeout_seconds) {
        fail("no op finished for " + seconds_text(options_.stall_timeout_seconds) +
             " (a peer died, hangs, or never issued a collective)" + stuck_ops(head));
      }
      if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::string stuck_ops(const std::vector<std::size_t>& head) const {
    std::string text;
    for (std::size_t s = 0; s < head.size(); ++s) {
      if (head[s] < stream_ops_[s].size()) {
        text += "\n  stream " + program_.streams[s] + " is at " + describe(ops_[stream_ops_[s][head[s]]]);
      }
    }
    return text;
  }

  bool peer_failed() const { return peer_failed_ != nullptr && peer_failed_->load(); }

  [[noreturn]] void fail(const std::string& what) {
    for (ncclComm_t comm : comms_) {
      if (comm != nullptr) ncclCommAbort(comm);
    }
    comms_.clear();
    if (world_ != nullptr) ncclCommAbort(world_);
    world_ = nullptr;
    throw ExecutionError("rank " + std::to_string(rank_) + ": " + what);
  }

  const workloads::Program& program_;
  int rank_;
  const std::vector<Op>& ops_;
  ExecutionOptions options_;
  ncclUniqueId id_;
  const std::atomic<bool>* peer_failed_;
  int capability_ = 0;
  ncclComm_t world_ = nullptr;
  std::vector<ncclComm_t> comms_;
  ncclDataType_t collective_type_ = ncclBfloat16;
  std::size_t collective_element_bytes_ = 2;
  std::vector<cudaStream_t> streams_;
  std::vector<std::vector<std::uint32_t>> stream_ops_;  // op indices per stream, in program order
  cublasLtHandle_t lt_ = nullptr;
  std::unique_ptr<DeviceBuffer> workspace_;
  std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::int64_t, long long>, std::unique_ptr<LtGemm>> gemms_;
  std::map<std::tuple<long long, long long, long long>, std::unique_ptr<FusedAttention>> attentions_;
  std::string attention_fallback_;  // why attention ops run as batched GEMMs
  std::vector<const FusedAttention*> fused_;  // per op: its cuDNN attention, or nullptr
  std::vector<StreamBuffers> buffers_;
  BufferPool<std::unique_ptr<DeviceBuffer>> memory_;
  Event step_start_;
  std::vector<std::unique_ptr<Event>> starts_, ends_;
};

// One process per GPU under mpirun; each rank on its host's GPU of its
// local rank; the NCCL unique id goes out over MPI.
MeasuredSteps execute_one_rank_per_process(const workloads::Program& program, const ExecutionOptions& options, int devices) {
  check_one_process_per_rank(program);
  const int rank = world_rank();
  RankSteps mine;
  std::string device;
  try {
    ncclUniqueId id{};
    if (rank == 0) SHARDSIM_NCCL(ncclGetUniqueId(&id));
    world_broadcast(&id, sizeof id);
    GpuRankRun run(program, rank, local_rank() % devices, id, options, nullptr);
    run.connect();
    device = run.device_name();
    mine = measure_steps(rank, options, world_barrier,
                         [&](bool inject, std::int64_t& origin_ns) { return run.step(inject, origin_ns); });
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const ExecutionError*>(&e) != nullptr) throw;
    throw ExecutionError("rank " + std::to_string(rank) + ": " + e.what());  // a failed CUDA/NCCL/cuBLAS call
  }
  return gather_measured_steps(mine, "gpu", device);
}

// Every rank in this process, rank r on GPU r, one host thread each.
MeasuredSteps execute_all_ranks_here(const workloads::Program& program, const ExecutionOptions& options, int devices) {
  if (program.ranks > devices) {
    throw std::invalid_argument("the program has " + std::to_string(program.ranks) + " ranks but this process sees " +
                                std::to_string(devices) + " GPU" + (devices == 1 ? "" : "s") +
                                "; run one process per GPU under mpirun -np " + std::to_string(program.ranks) +
                                ", or fewer --gpus");
  }
  ncclUniqueId id{};
  try {
    SHARDSIM_NCCL(ncclGetUniqueId(&id));
  } catch (const std::runtime_error& e) {
    throw ExecutionError(e.what());
  }
  return run_ranks_in_threads(
      program.ranks, options,
      [&](int rank, const std::atomic<bool>& peer_failed) {
        return std::make_unique<GpuRankRun>(program, rank, rank, id, options, &peer_failed);
      },
      "gpu");
}

}  // namespace

int visible_gpus() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess ? devices : 0;
}

MeasuredRun execute_on_gpu(const workloads::Program& program, const ExecutionOptions& options) {
  check_execution_request(program, options);
  const int devices = visible_gpus();
  if (devices == 0) throw std::invalid_argument("--backend gpu: no CUDA device is visible");
  StopSignalHandlers signals;
  return measured_run(program, mpi_running() ? execute_one_rank_per_process(program, options, devices)
                                             : execute_all_ranks_here(program, options, devices));
}

}  // namespace shardsim::calib

extern "C" const shardsim::calib::GpuBackend* shardsim_gpu_backend() {
  static const shardsim::calib::GpuBackend backend{shardsim::calib::GpuBackend::current_interface_version,
                                                   &shardsim::calib::visible_gpus,
                                                   &shardsim::calib::execute_on_gpu};
  return &backend;
}
