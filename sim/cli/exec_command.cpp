// shardsim exec: the Program `shardsim run` simulates, run for real
// (calib/executor) under mpirun, or on one machine's GPUs in one process,
// written as a measured Timeline in the simulator's HDF5 schema for
// `shardsim compare`.
#include "sim/cli/commands.h"

#include "calib/executor/execute.h"
#include "calib/profile.h"
#include "sim/cli/job_inputs.h"
#include "sim/report/chrome_trace.h"
#include "sim/report/hdf5_timeline.h"
#include "sim/report/step_report.h"
#include "sim/report/step_table.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/base/mpi_session.h"
#include "topology/cluster.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/ir/timeline_check.h"

#include <CLI/CLI.hpp>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace shardsim::cli {

namespace {

struct ExecOptions {
  JobOptions job;
  std::string profile;  // for MFU's peak; default: the cluster's
  std::string h5;
  std::string trace;
  std::string program;
  int steps = 10;
  int warmup = 3;
  double stall_timeout_seconds = 30;
  std::string fault;  // kill-rank=R,op=N
  std::string backend = "auto";
  bool json = false;
};

void parse_fault(const std::string& text, calib::ExecutionOptions& options) {
  char kind[8] = {};
  int rank = -1;
  long long op = -1;
  using Kind = calib::ExecutionOptions::Fault::Kind;
  if (std::sscanf(text.c_str(), "%4[a-z]-rank=%d,op=%lld", kind, &rank, &op) != 3 || rank < 0 || op < 0 ||
      (std::string(kind) != "kill" && std::string(kind) != "hang")) {
    throw std::invalid_argument("--inject-fault: expected kill-rank=R,op=N or hang-rank=R,op=N, got '" + text + "'");
  }
  options.fault.kind = std::string(kind) == "kill" ? Kind::kill : Kind::hang;
  options.fault.rank = rank;
  options.fault.op = static_cast<std::uint32_t>(op);
}

nlohmann::json measured_section(const calib::MeasuredRun& run) {
  const auto [fastest, slowest] = std::minmax_element(run.step_seconds.begin(), run.step_seconds.end());
  return {{"backend", run.backend},
          {"device", run.device},
          {"step_seconds", run.step_seconds},
          {"reported_step", run.reported_step},
          {"min_step_seconds", *fastest},
          {"max_step_seconds", *slowest},
          {"shared_clock", run.shared_clock}};
}

int exec_step(const ExecOptions& options) {
  // Under a launcher, one process per rank. Without one, the GPU backend
  // runs every rank in this process over the local GPUs, and the CPU
  // backend is a world of one MPI process.
  std::optional<MpiSession> mpi;
  if (launched_by_mpi()) mpi.emplace(MPI_THREAD_FUNNELED);
  const bool root = !mpi || mpi->rank() == 0;
  try {
    const calib::GpuBackend* gpu = calib::choose_gpu_backend(options.backend);
    if (!mpi && gpu == nullptr) mpi.emplace(MPI_THREAD_FUNNELED);
    JobOptions job = options.job;
    if (mpi) {
      if (job.gpus == 0) job.gpus = mpi->size();
      if (job.gpus != mpi->size()) {
        throw std::invalid_argument("--gpus " + std::to_string(job.gpus) + " but mpirun started " +
                                    std::to_string(mpi->size()) + " processes: one process per rank");
      }
    } else if (job.gpus == 0) {
      job.gpus = gpu->visible_gpus();
    }
    const JobInputs inputs = load_job_inputs(job);
    if (root) print_notes(inputs);  // every rank reads the same launch
    const calib::Profile profile = load_job_profile(options.profile, inputs.cluster);
    check_profile_runs_job(inputs, profile);
    const workloads::Program program = workloads::compile(inputs.step);
    calib::ExecutionOptions execution;
    execution.warmup_steps = options.warmup;
    execution.measured_steps = options.steps;
    execution.stall_timeout_seconds = options.stall_timeout_seconds;
    if (!options.fault.empty()) parse_fault(options.fault, execution);
    if (root && !options.program.empty()) {
      AtomicOutputFile out(options.program);
      out.stream() << workloads::program_to_json(program).dump(1) << "\n";
      out.commit();
    }
    if (root) {
      std::fprintf(stderr, "shardsim exec: %zu ops on %d ranks, %d warm-up + %d measured steps\n",
                   program.total_ops(), program.ranks, options.warmup, options.steps);
    }
    const calib::MeasuredRun run = calib::execute(program, execution, gpu);
    if (!root) return 0;

    const workloads::Timeline& timeline = run.timeline;
    // Tolerance: clock reads and the double round trip on the CPU (1 us);
    // on GPUs, each rank's events are put on the host clock through one
    // event synchronisation per step (50 us).
    const TimePs tolerance = picoseconds_from_seconds(run.backend == "gpu" ? 50e-6 : 1e-6);
    const auto violations = workloads::timeline_violations(program, timeline, tolerance);
    if (!violations.empty()) {
      std::string what = "the measured timeline is inconsistent (an executor bug):";
      for (const auto& v : violations) what += "\n  " + v;
      throw std::logic_error(what);
    }
    const sim::StepSummary summary =
        sim::summarize_step(program, timeline, profile, inputs.cluster.node.gpu_memory_bytes, 0);
    nlohmann::json summary_json = sim::summary_to_json(program, timeline, summary);
    summary_json["cluster"] = inputs.cluster.name;
    summary_json["profile"] = profile.name;
    summary_json["measured"] = measured_section(run);
    std::vector<int> all(static_cast<std::size_t>(program.ranks));
    std::iota(all.begin(), all.end(), 0);
    if (!options.trace.empty()) {
      AtomicOutputFile out(options.trace);
      sim::write_chrome_trace(out.stream(), program, timeline, all);
      out.commit();
    }
    if (!options.h5.empty()) {
      sim::write_hdf5_timeline(options.h5, program, timeline, all, topology::Cluster(inputs.cluster), summary_json);
    }
    if (options.json) {
      std::cout << summary_json.dump(2) << "\n";
    } else {
      const nlohmann::json& m = summary_json["measured"];
      std::printf("# measured on %s (%s backend): step %d of %zu measured steps (the median), min %.6f s, max %.6f s\n",
                  run.device.c_str(), run.backend.c_str(), run.reported_step, run.step_seconds.size(),
                  m["min_step_seconds"].get<double>(), m["max_step_seconds"].get<double>());
      print_step_table("shardsim exec", program, timeline, summary, inputs.cluster.name);
    }
    return 0;
  } catch (const calib::ExecutionError& e) {
    std::cerr << "shardsim exec: " << e.what() << std::endl;
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  } catch (const InputError& e) {
    // Every rank reads the same inputs and fails alike; one message will do.
    if (root) std::cerr << "shardsim: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    if (root) std::cerr << "shardsim: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace

void add_exec_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ExecOptions>();
  CLI::App* command = app.add_subcommand("exec", "Run the training step's Program for real and measure it");
  command->footer(
      "Runs the Program `shardsim run` simulates, one MPI process per rank, and writes the\n"
      "measured timeline in the simulator's HDF5 schema (compare them with `shardsim compare`).\n"
      "Backends: gpu (cuBLASLt GEMMs, NCCL collectives on their own streams, CUDA events for\n"
      "dependencies and timing; one process per GPU under mpirun, or without mpirun one process\n"
      "over this machine's GPUs, a host thread each, --gpus of them, by default all) and cpu\n"
      "(Eigen GEMMs with the Program's shapes, non-blocking MPI collectives with its groups and\n"
      "bytes, every dtype in fp32); auto picks gpu when a GPU is visible. --scale shrinks the\n"
      "model to fit the machine.\n"
      "Examples (4 ranks on one machine):\n"
      "  mpirun -np 4 shardsim exec --cluster cpu-4rank --model llama-7b --plan zero3 \\\n"
      "      --scale layers=2,hidden=256,seq=128,micro_batches=2 --h5 measured.h5\n"
      "  shardsim exec --backend gpu --gpus 4 --cluster h200-1024 --model llama-7b --plan zero3 \\\n"
      "      --scale layers=4 --h5 measured.h5\n"
      "Exit code 2 on bad input; 3 when a rank fails or a collective stalls (the message names\n"
      "the op and its ranks; no measured file is written).");
  add_job_options(*command, options->job);
  add_plan_variant_options(*command, options->job);
  command->add_option("--profile", options->profile, "Profile whose peak FLOP/s MFU is taken against (default: the cluster's)");
  command->add_option("--steps", options->steps, "Measured steps (the median is reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--warmup", options->warmup, "Warm-up steps before the measured ones")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  command->add_option("--stall-timeout", options->stall_timeout_seconds,
                      "Seconds a collective may stay in flight (or a rank stay stuck) before the run ends")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  command->add_option("--backend", options->backend, "gpu, cpu, or auto (gpu when one is visible)")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
      ->capture_default_str();
  command->add_option("--h5", options->h5, "Write the measured timeline of every rank as HDF5");
  command->add_option("--trace", options->trace, "Write a Chrome trace (Perfetto) of the measured step, every rank");
  command->add_option("--program", options->program, "Write the Program as JSON");
  command->add_option("--inject-fault", options->fault,
                      "Testing: kill-rank=R,op=N kills rank R at op N of the first measured step; hang-rank=R,op=N "
                      "stops it there")
      ->group("Testing");
  command->add_flag("--json", options->json, "Print one JSON object instead of the table");
  command->callback([options, &exit_code] { exit_code = exec_step(*options); });
}

}  // namespace shardsim::cli
