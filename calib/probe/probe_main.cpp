// shardsim-probe: measures the machine it runs on into raw measurements
// (calib/measurements.h) for `shardsim calib fit`.
//
//   shardsim-probe --out h200.json                      GPU: cuBLASLt, copies, launch, NCCL over local GPUs
//   mpirun -np 8 shardsim-probe --out multi.json        one process per GPU, NCCL across nodes
//   mpirun -np 2 shardsim-probe --backend cpu --quick --out cpu.json
//
// A plain run on GPUs needs no MPI (one process drives every local GPU, as
// nccl-tests does), so it starts MPI only under a launcher or to measure
// the CPU (a world of one process).
//
// Rank 0 prints progress and an nccl-tests-style table and writes the file
// (to a temporary name, renamed when complete).
#include "calib/measurements.h"
#include "calib/nccl_tests_table.h"
#include "calib/probe/cpu_probe.h"
#include "calib/probe/probe_options.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/base/mpi_session.h"
#include "topology/base/mpi_world.h"
#ifdef SHARDSIM_PROBE_WITH_CUDA
#include "calib/probe/gpu_probe.h"
#endif

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <iostream>
#include <map>
#include <optional>

namespace {

using namespace shardsim;

void print_collectives(const calib::Measurements& m) {
  std::map<workloads::CollectiveOp, std::vector<calib::NcclTestsRow>> by_op;
  for (const auto& c : m.collectives) {
    calib::NcclTestsRow row;
    row.op = c.op;
    row.size = calib::nccl_tests_size(c.op, static_cast<long long>(c.bytes), *calib::parse_data_type("float"), c.ranks);
    row.type = c.type;
    row.root = c.op == workloads::CollectiveOp::broadcast ? 0 : -1;
    row.seconds = c.seconds;
    row.ranks = c.ranks;
    row.algorithm = c.algorithm;
    by_op[c.op].push_back(row);
  }
  for (const auto& [op, rows] : by_op) {
    std::cout << "#\n# Collective test: " << workloads::to_string(op) << " (" << rows.front().ranks << " ranks)\n";
    calib::write_nccl_tests_header(std::cout);
    for (const auto& row : rows) calib::write_nccl_tests_row(std::cout, row);
    calib::write_nccl_tests_footer(std::cout, rows);
  }
}

int run(int argc, char** argv, int rank, std::optional<MpiSession>& mpi) {
  CLI::App app{"shardsim-probe: measure GEMMs, memory copies, kernel launches and collectives for shardsim calib fit",
               "shardsim-probe"};
  std::string backend = "auto";
  std::string output;
  calib::ProbeOptions options;
  app.add_option("--backend", backend, "gpu (CUDA, cuBLASLt, NCCL), cpu (Eigen, MPI) or auto (gpu when one is visible)")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}));
  app.add_option("-o,--out", output, "raw measurements JSON to write")->required();
  app.add_flag("--quick", options.quick, "small sizes and few repeats (a CI smoke run)");
  app.add_option("--max-bytes", options.max_bytes, "largest collective and copy, bytes");
  app.add_option("--repeats", options.repeats, "timed repeats per point (the median is kept)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed calls before timing")->check(CLI::NonNegativeNumber);
  app.add_option("--min-time", options.min_timed_seconds,
                 "seconds of back-to-back calls per timing, whose mean is kept (CPU; GPU collectives, GEMMs, attention)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup-time", options.warmup_seconds,
                 "GPU GEMMs and attention: seconds of back-to-back calls before timing, to reach the clock held under load")
      ->check(CLI::NonNegativeNumber);
  app.footer("Then: shardsim calib fit " + std::string("OUT.json --base h200 --cluster h200-1024 -o profile.json"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    return code == 0 ? 0 : 2;
  }
  if (options.quick && !app.count("--repeats")) options.repeats = 3;
  if (options.quick && !app.count("--warmup")) options.warmup = 1;
  if (options.quick && !app.count("--min-time")) options.min_timed_seconds = 0.002;
  if (options.quick && !app.count("--warmup-time")) options.warmup_seconds = 0.005;
  if (rank == 0) options.print = [](const std::string& line) { std::cout << "# " << line << "\n" << std::flush; };

#ifdef SHARDSIM_PROBE_WITH_CUDA
  if (backend == "gpu" && !calib::gpu_visible()) {
    if (rank == 0) std::cerr << "shardsim-probe: --backend gpu: no CUDA device visible; use --backend cpu\n";
    return 2;
  }
  const bool gpu = backend == "gpu" || (backend == "auto" && calib::gpu_visible());
#else
  if (backend == "gpu") {
    if (rank == 0) std::cerr << "shardsim-probe: built without CUDA/NCCL; use --backend cpu\n";
    return 2;
  }
  const bool gpu = false;
#endif
  if (!gpu && backend == "auto" && rank == 0) std::cout << "# no GPU visible: measuring the CPU (Eigen, MPI)\n";
  if (!gpu && !mpi) mpi.emplace(MPI_THREAD_SERIALIZED);
  calib::Measurements measurements;
#ifdef SHARDSIM_PROBE_WITH_CUDA
  if (gpu) measurements = calib::run_gpu_probe(options);
#endif
  if (!gpu) measurements = calib::run_cpu_probe(options);

  if (rank == 0) {
    print_collectives(measurements);
    AtomicOutputFile file(output);
    file.stream() << calib::measurements_to_json(measurements).dump(1) << "\n";
    file.commit();
    std::cout << "# wrote " << measurements.gemm.size() << " GEMMs, " << measurements.copies.size() << " copies, "
              << measurements.collectives.size() << " collective points to " << output << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<shardsim::MpiSession> mpi;
  if (shardsim::launched_by_mpi()) mpi.emplace(MPI_THREAD_SERIALIZED);
  const int rank = shardsim::world_rank();
  int code = 0;
  try {
    code = run(argc, argv, rank, mpi);
  } catch (const shardsim::InputError& e) {
    std::cerr << "shardsim-probe: " << e.what() << "\n";
    code = 2;
  } catch (const std::exception& e) {
    // One rank failing leaves the others inside a collective: abort them all.
    std::cerr << "shardsim-probe: rank " << rank << ": " << e.what() << "\n";
    if (shardsim::mpi_running()) MPI_Abort(MPI_COMM_WORLD, 1);
    code = 1;
  }
  return code;  // the MpiSession, if any, finalises MPI

}
