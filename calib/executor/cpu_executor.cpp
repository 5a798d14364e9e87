#include "calib/executor/cpu_executor.h"

#include "calib/executor/buffer_pool.h"
#include "calib/executor/compute_queue.h"
#include "calib/executor/cpu_kernels.h"
#include "calib/executor/measured_steps.h"
#include "calib/executor/measured_timeline.h"
#include "calib/executor/run_stop.h"
#include "topology/base/mpi_world.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace shardsim::calib {

namespace {

using Clock = ComputeQueue::Clock;
using workloads::CollectiveOp;
using workloads::Op;
using workloads::OpKind;

// Page-touched host memory: the bytes are really there.
std::unique_ptr<std::byte[]> touched_host_bytes(std::size_t size) {
  auto buffer = std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(size, 1));
  constexpr std::size_t kPage = 4096;
  for (std::size_t i = 0; i < size; i += kPage) buffer[i] = std::byte{1};
  return buffer;
}
using HostMemoryPool = BufferPool<std::unique_ptr<std::byte[]>>;

// Where an op of the step being played stands.
enum class OpState : std::uint8_t { waiting, queued, in_flight, done };

struct InFlight {
  std::uint32_t op = 0;
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int count = 1;
  Clock::time_point issued;
};

// One MPI communicator per group this rank belongs to, per Program communicator.
class MpiCommunicators {
 public:
  explicit MpiCommunicators(const workloads::Program& program, int rank) {
    for (const workloads::Communicator& communicator : program.communicators) {
      const int group = communicator.group_of_rank[static_cast<std::size_t>(rank)];
      MPI_Comm comm = MPI_COMM_NULL;
      // Key = world rank, so a rank's position in its group is its MPI rank.
      MPI_Comm_split(MPI_COMM_WORLD, group < 0 ? MPI_UNDEFINED : group, rank, &comm);
      if (comm != MPI_COMM_NULL) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      comms_.push_back(comm);
    }
  }
  ~MpiCommunicators() {
    for (MPI_Comm& comm : comms_) {
      if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
    }
  }
  MpiCommunicators(const MpiCommunicators&) = delete;
  MpiCommunicators& operator=(const MpiCommunicators&) = delete;
  MPI_Comm operator[](int communicator) const { return comms_[static_cast<std::size_t>(communicator)]; }

 private:
  std::vector<MPI_Comm> comms_;
};

// Plays one rank's program, step after step.
class RankRun {
 public:
  RankRun(const workloads::Program& program, int rank, const ExecutionOptions& options)
      : program_(program), rank_(rank), ops_(program.program_of(rank).ops), options_(options), comms_(program, rank) {
    stream_ops_.resize(program.streams.size());
    comm_ops_.resize(program.communicators.size());
    buffers_.resize(program.streams.size());
    for (std::uint32_t i = 0; i < ops_.size(); ++i) {
      const Op& op = ops_[i];
      stream_ops_[static_cast<std::size_t>(op.stream)].push_back(i);
      if (op.kind == OpKind::collective) {
        comm_ops_[static_cast<std::size_t>(op.communicator)].push_back(i);
        auto& buffer = buffers_[static_cast<std::size_t>(op.stream)];
        const auto floats = static_cast<std::size_t>(std::ceil(op.bytes / sizeof(float))) + 1;
        if (buffer.send.size() < floats) {
          buffer.send.assign(floats, 1.0f);
          buffer.recv.assign(floats, 0.0f);
        }
      }
    }
    const auto& resident = program.program_of(rank).resident_bytes;
    for (std::size_t c = 0; c < resident.size(); ++c) {
      if (resident[c] > 0) memory_.allocate(static_cast<int>(c), resident[c]);
    }
  }

  // One step; `origin` receives its start on this host's monotonic clock.
  std::vector<MeasuredOp> step(bool inject_fault, Clock::time_point& origin) {
    const std::size_t n = ops_.size();
    std::vector<MeasuredOp> timing(n);
    std::vector<OpState> state(n, OpState::waiting);
    std::vector<std::size_t> head(stream_ops_.size(), 0), next_call(comm_ops_.size(), 0);
    std::vector<std::size_t> queued_on_stream(stream_ops_.size(), 0);
    std::vector<char> calling_on_stream(stream_ops_.size(), 0);  // a collective occupies it
    std::vector<InFlight> in_flight;
    std::size_t remaining = n;
    origin = Clock::now();
    compute_.set_origin(origin);
    Clock::time_point last_progress = origin;
    const auto finish = [&](std::uint32_t i) {
      const auto s = static_cast<std::size_t>(ops_[i].stream);
      if (state[i] == OpState::queued) --queued_on_stream[s];
      if (state[i] == OpState::in_flight) calling_on_stream[s] = 0;
      state[i] = OpState::done;
      --remaining;
    };
    const auto deps_are = [&](const Op& op, auto&& ok) {
      return std::all_of(op.deps.begin(), op.deps.end(), [&](std::uint32_t d) { return ok(state[d]); });
    };
    const auto ended = [](OpState s) { return s == OpState::done; };
    const auto ended_or_queued = [](OpState s) { return s == OpState::done || s == OpState::queued; };
    while (remaining > 0) {
      bool progressed = false;
      for (const auto& [i, measured] : compute_.take_finished()) {
        timing[i] = measured;
        finish(i);
        progressed = true;
      }
      for (auto it = in_flight.begin(); it != in_flight.end();) {
        int complete = 0;
        check(MPI_Testall(it->count, it->requests, &complete, MPI_STATUSES_IGNORE), ops_[it->op]);
        if (complete) {
          timing[it->op].end_seconds = seconds_between(origin, Clock::now());
          finish(it->op);
          it = in_flight.erase(it);
          progressed = true;
        } else {
          ++it;
        }
      }
      for (std::size_t s = 0; s < stream_ops_.size(); ++s) {
        while (head[s] < stream_ops_[s].size() && !calling_on_stream[s]) {
          const std::uint32_t i = stream_ops_[s][head[s]];
          const Op& op = ops_[i];
          const double now = seconds_between(origin, Clock::now());
          if (op.kind == OpKind::collective) {
            const auto c = static_cast<std::size_t>(op.communicator);
            // Its stream's queued ops and its deps must have ended, and an
            // earlier call on its communicator must have been issued.
            if (queued_on_stream[s] > 0 || !deps_are(op, ended) || comm_ops_[c][next_call[c]] != i) break;
            if (inject_fault && i == options_.fault.op) inject(op);
            ++next_call[c];
            timing[i].start_seconds = now;
            in_flight.push_back(issue(i));
            state[i] = OpState::in_flight;
            calling_on_stream[s] = 1;
          } else {
            if (!deps_are(op, ended_or_queued)) break;
            if (inject_fault && i == options_.fault.op) inject(op);
            if (op.kind == OpKind::memory && queued_on_stream[s] == 0 && deps_are(op, ended)) {
              apply_memory(op);
              timing[i] = {now, now};
              finish(i);
            } else {
              compute_.enqueue(op, i);
              state[i] = OpState::queued;
              ++queued_on_stream[s];
            }
          }
          ++head[s];
          progressed = true;
        }
      }
      const Clock::time_point now = Clock::now();
      if (progressed) {
        last_progress = now;
        continue;
      }
      watch(in_flight, now, last_progress, head);
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
    return timing;
  }

  // From the main thread or the queue's, whichever plays the memory op.
  void apply_memory(const Op& op) {
    std::lock_guard lock(memory_mutex_);
    if (op.bytes > 0) {
      memory_.allocate(static_cast<int>(op.memory), op.bytes);
    } else {
      memory_.release(static_cast<int>(op.memory), -op.bytes);
    }
  }

  void inject(const Op& op) const {
    if (options_.fault.kind == ExecutionOptions::Fault::Kind::kill) std::raise(SIGKILL);
    // hang: stop here, until the launcher ends the job.
    while (!stop_signal()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    throw ExecutionError(stop_message(rank_) + " while hanging (fault injected) before " + describe(op));
  }

  // Waits for a request (a barrier) under the same stall and signal rules.
  void wait(MPI_Request request, const std::string& what) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      int complete = 0;
      MPI_Test(&request, &complete, MPI_STATUS_IGNORE);
      if (complete) return;
      if (stop_signal()) throw ExecutionError(stop_message(rank_) + " during " + what);
      if (seconds_between(start, Clock::now()) > options_.stall_timeout_seconds) {
        throw ExecutionError("rank " + std::to_string(rank_) + ": " + what + " has not completed after " +
                             seconds_text(options_.stall_timeout_seconds) + " (a rank died or hangs)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  struct StreamBuffers {
    std::vector<float> send, recv;
  };

  std::string describe(const Op& op) const {
    return describe_op(program_, rank_, static_cast<std::uint32_t>(&op - ops_.data()));
  }

  void check(int status, const Op& op) const {
    if (status == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int length = 0;
    MPI_Error_string(status, text, &length);
    throw ExecutionError("rank " + std::to_string(rank_) + ": " + describe(op) + ": MPI error: " + text);
  }

  InFlight issue(std::uint32_t index) {
    const Op& op = ops_[index];
    MPI_Comm comm = comms_[op.communicator];
    int size = 1, me = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &me);
    StreamBuffers& b = buffers_[static_cast<std::size_t>(op.stream)];
    const auto bytes = static_cast<long long>(op.bytes);
    const int per_rank_bytes = static_cast<int>(bytes / size);
    const int floats = static_cast<int>(bytes / static_cast<long long>(sizeof(float)));
    const int per_rank_floats = floats / size;
    InFlight call;
    call.op = index;
    call.issued = Clock::now();
    int status = MPI_SUCCESS;
    switch (op.collective) {
      case CollectiveOp::all_reduce:
        status = MPI_Iallreduce(b.send.data(), b.recv.data(), floats, MPI_FLOAT, MPI_SUM, comm, &call.requests[0]);
        break;
      case CollectiveOp::all_gather:
        status = MPI_Iallgather(b.send.data(), per_rank_bytes, MPI_BYTE, b.recv.data(), per_rank_bytes, MPI_BYTE, comm,
                                &call.requests[0]);
        break;
      case CollectiveOp::reduce_scatter:
        status = MPI_Ireduce_scatter_block(b.send.data(), b.recv.data(), per_rank_floats, MPI_FLOAT, MPI_SUM, comm,
                                           &call.requests[0]);
        break;
      case CollectiveOp::broadcast:
        status = MPI_Ibcast(b.recv.data(), static_cast<int>(bytes), MPI_BYTE, op.root, comm, &call.requests[0]);
        break;
      case CollectiveOp::reduce:
        status = MPI_Ireduce(b.send.data(), b.recv.data(), floats, MPI_FLOAT, MPI_SUM, op.root, comm, &call.requests[0]);
        break;
      case CollectiveOp::all_to_all:
        status = MPI_Ialltoall(b.send.data(), per_rank_bytes, MPI_BYTE, b.recv.data(), per_rank_bytes, MPI_BYTE, comm,
                               &call.requests[0]);
        break;
      case CollectiveOp::send_recv:
        // Each rank sends its buffer to the next member and receives from the previous one.
        status = MPI_Irecv(b.recv.data(), static_cast<int>(bytes), MPI_BYTE, (me + size - 1) % size, 0, comm,
                           &call.requests[0]);
        if (status == MPI_SUCCESS) {
          status = MPI_Isend(b.send.data(), static_cast<int>(bytes), MPI_BYTE, (me + 1) % size, 0, comm,
                             &call.requests[1]);
        }
        call.count = 2;
        break;
      case CollectiveOp::send:
        if (size > 2) {
          // One root to many: the same bytes move as in a broadcast.
          status = MPI_Ibcast(b.recv.data(), static_cast<int>(bytes), MPI_BYTE, op.root, comm, &call.requests[0]);
        } else if (me == op.root) {
          status = MPI_Isend(b.send.data(), static_cast<int>(bytes), MPI_BYTE, 1 - me, 0, comm, &call.requests[0]);
        } else {
          status = MPI_Irecv(b.recv.data(), static_cast<int>(bytes), MPI_BYTE, op.root, 0, comm, &call.requests[0]);
        }
        break;
    }
    check(status, op);
    return call;
  }

  // Ends the run when a collective or the whole rank has been stuck too long.
  void watch(const std::vector<InFlight>& in_flight, Clock::time_point now, Clock::time_point last_progress,
             const std::vector<std::size_t>& head) const {
    const std::string who = "rank " + std::to_string(rank_) + ": ";
    if (stop_signal()) {
      std::string waiting;
      for (const InFlight& call : in_flight) waiting += "\n  in flight: " + describe(ops_[call.op]);
      throw ExecutionError(stop_message(rank_) + waiting);
    }
    const double limit = options_.stall_timeout_seconds;
    for (const InFlight& call : in_flight) {
      if (seconds_between(call.issued, now) > limit) {
        throw ExecutionError(who + describe(ops_[call.op]) + " has not completed " + seconds_text(limit) +
                             " after this rank issued it: a member died, or never issued it");
      }
    }
    if (in_flight.empty() && compute_.idle() && seconds_between(last_progress, now) > limit) {
      std::string heads;
      for (std::size_t s = 0; s < head.size(); ++s) {
        if (head[s] < stream_ops_[s].size()) {
          heads += "\n  stream " + program_.streams[s] + " waits to start " + describe(ops_[stream_ops_[s][head[s]]]);
        }
      }
      throw ExecutionError(who + "nothing could start for " + seconds_text(limit) + heads);
    }
  }

  const workloads::Program& program_;
  int rank_;
  const std::vector<Op>& ops_;
  ExecutionOptions options_;
  MpiCommunicators comms_;
  std::vector<std::vector<std::uint32_t>> stream_ops_, comm_ops_;
  std::vector<StreamBuffers> buffers_;
  CpuKernels kernels_;  // the queue's thread's only
  std::mutex memory_mutex_;
  HostMemoryPool memory_{touched_host_bytes};
  // Last: its thread runs ops with everything above.
  ComputeQueue compute_{[this](const Op& op) { op.kind == OpKind::memory ? apply_memory(op) : kernels_.run(op); }};
};

double available_host_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::stod(line.substr(13)) * 1024;
  }
  return 0;  // unknown: not checked
}

// Refuses, on every rank alike, a program whose memory would not fit on the
// host, before anything is allocated.
void check_host_memory(const workloads::Program& program, int rank) {
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
  const double mine = program_peak_memory_bytes(program, rank);
  double on_host = 0;
  MPI_Allreduce(&mine, &on_host, 1, MPI_DOUBLE, MPI_SUM, host);
  int ranks_on_host = 1;
  MPI_Comm_size(host, &ranks_on_host);
  MPI_Comm_free(&host);
  const double available = available_host_memory_bytes();
  int too_big = available > 0 && on_host > 0.9 * available;
  MPI_Allreduce(MPI_IN_PLACE, &too_big, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (too_big) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    std::ostringstream out;
    out.precision(3);
    out << "the program needs " << mine / kGiB << " GiB on rank " << rank << " (" << on_host / kGiB << " GiB for the "
        << ranks_on_host << " ranks on this host), more than the host's available memory; shrink it with --scale";
    throw std::invalid_argument(out.str());
  }
}

}  // namespace

double program_peak_memory_bytes(const workloads::Program& program, int rank) {
  const workloads::RankProgram& mine = program.program_of(rank);
  double resident = 0;
  for (double bytes : mine.resident_bytes) resident += bytes;
  double running = 0, peak = 0;
  for (const Op& op : mine.ops) {
    if (op.kind != OpKind::memory) continue;
    running += op.bytes;
    peak = std::max(peak, running);
  }
  return resident + peak;
}

MeasuredRun execute_on_cpu(const workloads::Program& program, const ExecutionOptions& options) {
  check_execution_request(program, options);
  check_one_process_per_rank(program);
  const int rank = world_rank();
  check_host_memory(program, rank);

  StopSignalHandlers signals;
  RankRun run(program, rank, options);
  int step = 0;
  const RankSteps mine = measure_steps(
      rank, options,
      [&] {
        MPI_Request barrier = MPI_REQUEST_NULL;
        MPI_Ibarrier(MPI_COMM_WORLD, &barrier);
        run.wait(barrier, "the barrier before step " + std::to_string(step++));
      },
      [&](bool inject, std::int64_t& origin_ns) {
        Clock::time_point origin;
        std::vector<MeasuredOp> timing = run.step(inject, origin);
        origin_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(origin.time_since_epoch()).count();
        return timing;
      });
  return measured_run(program, gather_measured_steps(mine, "cpu", cpu_description()));
}

}  // namespace shardsim::calib
