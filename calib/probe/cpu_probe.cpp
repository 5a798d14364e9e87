#include "calib/probe/cpu_probe.h"

#include "calib/probe/probe_timing.h"

#include <Eigen/Dense>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace shardsim::calib {

namespace {

using workloads::CollectiveOp;

MachineInfo machine_info(int& nodes) {
  nodes = node_count();
  int length = 0;
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  MPI_Get_library_version(library, &length);
  std::string mpi(library);
  mpi = mpi.substr(0, mpi.find_first_of(",\n"));
  MachineInfo machine;
  machine.host = processor_name();
  machine.device = cpu_description();
  machine.backend = "cpu";
  machine.software = mpi + "; Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
                     std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) + "; " +
                     std::to_string(world_size()) + " MPI ranks";
  return machine;
}

template <typename Scalar>
void probe_gemms(const ProbeOptions& options, const std::vector<GemmShape3>& shapes, const char* dtype, Measurements& out) {
  using Matrix = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic>;
  for (const auto& shape : shapes) {
    Matrix a = Matrix::Random(shape.m, shape.k);
    Matrix b = Matrix::Random(shape.k, shape.n);
    Matrix c(shape.m, shape.n);
    const double seconds = time_together(options, [&] { c.noalias() = a * b; });
    out.gemm.push_back({dtype, shape.m, shape.n, shape.k, seconds});
    options.print("gemm " + std::string(dtype) + " " + std::to_string(shape.m) + "x" + std::to_string(shape.n) + "x" +
                  std::to_string(shape.k) + ": " + std::to_string(2.0 * shape.m * shape.n * shape.k / seconds / 1e9) +
                  " GFLOP/s");
  }
}

void probe_copies(const ProbeOptions& options, Measurements& out) {
  const auto largest = static_cast<std::size_t>(std::min(options.max_bytes, options.quick ? 16.0 * (1 << 20) : 256.0 * (1 << 20)));
  std::vector<char> from(largest, 1), to(largest, 0);
  for (std::size_t bytes = 64 << 10; bytes <= largest; bytes *= 4) {
    const double seconds = time_together(options, [&] { std::memcpy(to.data(), from.data(), bytes); });
    out.copies.push_back({"host_copy", static_cast<double>(bytes), seconds});
    options.print("host_copy " + std::to_string(bytes) + " B: " + std::to_string(2.0 * bytes / seconds / 1e9) + " GB/s");
  }
}

// One nccl-tests size of `op`: element counts that split evenly where the
// collective needs it. Returns false when the size rounds to nothing.
bool run_collective(const ProbeOptions& options, CollectiveOp op, long long requested_bytes, int nodes,
                    Measurements& out) {
  const int n = world_size();
  const int rank = world_rank();
  const bool split = op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter || op == CollectiveOp::all_to_all;
  long long count = requested_bytes / 4;
  if (split) count = count / n * n;
  if (count == 0) return false;
  const int chunk = static_cast<int>(split ? count / n : count);
  std::vector<float> send(static_cast<std::size_t>(count), static_cast<float>(rank + 1));
  std::vector<float> receive(static_cast<std::size_t>(count), 0.0f);
  std::function<void()> call;
  switch (op) {
    case CollectiveOp::all_reduce:
      call = [&] { MPI_Allreduce(send.data(), receive.data(), chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      break;
    case CollectiveOp::all_gather:
      call = [&] { MPI_Allgather(send.data(), chunk, MPI_FLOAT, receive.data(), chunk, MPI_FLOAT, MPI_COMM_WORLD); };
      break;
    case CollectiveOp::reduce_scatter:
      call = [&] { MPI_Reduce_scatter_block(send.data(), receive.data(), chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
      break;
    case CollectiveOp::broadcast:
      call = [&] { MPI_Bcast(send.data(), chunk, MPI_FLOAT, 0, MPI_COMM_WORLD); };
      break;
    case CollectiveOp::all_to_all:
      call = [&] { MPI_Alltoall(send.data(), chunk, MPI_FLOAT, receive.data(), chunk, MPI_FLOAT, MPI_COMM_WORLD); };
      break;
    case CollectiveOp::send_recv:
      call = [&] {
        MPI_Sendrecv(send.data(), chunk, MPI_FLOAT, (rank + 1) % n, 0, receive.data(), chunk, MPI_FLOAT,
                     (rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      };
      break;
    case CollectiveOp::reduce:
      call = [&] { MPI_Reduce(send.data(), receive.data(), chunk, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD); };
      break;
    case CollectiveOp::send:
      throw std::logic_error("the probe sweeps nccl-tests' collectives; send is priced as send_recv");
  }
  // Results checked once, as nccl-tests' #wrong: all-reduce and all-gather
  // have closed-form answers.
  std::optional<double> wrong;
  if (op == CollectiveOp::all_reduce || op == CollectiveOp::all_gather) {
    call();
    double bad = 0;
    for (long long i = 0; i < (op == CollectiveOp::all_reduce ? chunk : count); ++i) {
      const float expected = op == CollectiveOp::all_reduce ? static_cast<float>(n * (n + 1) / 2)
                                                            : static_cast<float>(i / chunk + 1);
      bad += receive[static_cast<std::size_t>(i)] != expected;
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    wrong = bad;
  }
  const double seconds = time_together(options, call);
  CollectiveMeasurement m;
  m.op = op;
  m.algorithm = "mpi";
  m.ranks = n;
  m.nodes = nodes;
  m.bytes = static_cast<double>(count) * 4;
  m.type = "float";
  m.seconds = seconds;
  m.wrong = wrong;
  m.source = "shardsim-probe --backend cpu";
  out.collectives.push_back(m);
  return true;
}

void probe_interference(const ProbeOptions& options, Measurements& out) {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    options.print("interference skipped: MPI gives no MPI_THREAD_SERIALIZED");
    return;
  }
  const long long size = options.quick ? 256 : 768;
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(size, size), b = Eigen::MatrixXf::Random(size, size), c(size, size);
  const double alone = time_together(options, [&] { c.noalias() = a * b; });

  // The communication thread owns MPI while it runs; every iteration also
  // agrees on whether to stop, so all ranks leave after the same call.
  const double bytes = options.quick ? (1 << 20) : (16 << 20);
  std::vector<float> send(static_cast<std::size_t>(bytes / 4), 1.0f), receive(send.size());
  std::atomic<bool> stop{false};
  std::thread communication([&] {
    for (int done = 0; !done;) {
      MPI_Allreduce(send.data(), receive.data(), static_cast<int>(send.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      done = stop.load() ? 1 : 0;
      MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
  });
  std::vector<double> samples;
  for (int i = 0; i < options.warmup + options.repeats; ++i) {
    const double t = seconds_of([&] { c.noalias() = a * b; });
    if (i >= options.warmup) samples.push_back(t);
  }
  stop = true;
  communication.join();
  double with = median_of(samples);
  MPI_Allreduce(MPI_IN_PLACE, &with, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  out.interference.push_back({"fp32", size, size, size, alone, with, CollectiveOp::all_reduce, bytes});
  options.print("interference: GEMM " + std::to_string(alone * 1e3) + " ms alone, " + std::to_string(with * 1e3) +
                " ms beside an all-reduce loop");
}

}  // namespace

Measurements run_cpu_probe(const ProbeOptions& options) {
  Measurements out;
  int nodes = 1;
  out.machine = machine_info(nodes);
  const auto shapes = options.quick ? probe_gemm_shapes(256, 256, 1024) : probe_gemm_shapes(1024, 1024, 4096);
  probe_gemms<float>(options, shapes, "fp32", out);
  probe_gemms<double>(options, options.quick ? probe_gemm_shapes(128, 128, 256) : probe_gemm_shapes(512, 512, 1024),
                      "fp64", out);
  probe_copies(options, out);
  const long long largest = static_cast<long long>(std::min(options.max_bytes, options.quick ? double(1 << 20) : 256.0 * (1 << 20)));
  for (CollectiveOp op : workloads::nccl_tests_collective_ops()) {
    for (long long bytes = 8; bytes <= largest; bytes *= options.quick ? 8 : 2) run_collective(options, op, bytes, nodes, out);
  }
  probe_interference(options, out);
  return out;
}

}  // namespace shardsim::calib
