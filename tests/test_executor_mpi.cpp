// The CPU executor for real, under mpirun with 4 ranks (CTest starts it so):
// the measured timeline of ZeRO-3 (also under Ulysses), ZeRO-1, AMSP and Megatron TP steps is complete and
// consistent: every op ran once, none before its dependencies or the
// previous op of its stream ended, and the members of every collective call
// were in it together. Every rank runs every test case (the executor is
// collective); assertions come after the collective part, and only rank 0
// holds the gathered timeline.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "calib/executor/cpu_executor.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/job_scale.h"
#include "workloads/ir/timeline_check.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// LLaMA-7B shrunk to `shape` (a --scale without micro_batches) on 4 ranks,
// `data_parallel` of them data-parallel.
Program scaled_program(Plan plan, int micro_batches, int data_parallel = 4,
                       const std::string& shape = "layers=2,hidden=128,ffn=344,vocab=512,seq=64") {
  StepConfig config;
  config.model = load_model("llama-7b");
  config.training = load_training_config("seq4096-mbs1-4m-tokens");
  config.plan = std::move(plan);
  config.data_parallel = data_parallel;
  config.gpus_per_node = 4;
  apply_job_scale(parse_job_scale(shape + ",micro_batches=" + std::to_string(micro_batches)), data_parallel,
                  config.model, config.training);
  return compile(config);
}

void require_consistent(const Program& program, const calib::MeasuredRun& run, int measured_steps) {
  REQUIRE(run.backend == "cpu");
  REQUIRE(run.step_seconds.size() == static_cast<std::size_t>(measured_steps));
  for (double seconds : run.step_seconds) REQUIRE(seconds > 0);
  // The reported step is the median one.
  std::vector<double> sorted = run.step_seconds;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(run.step_seconds[static_cast<std::size_t>(run.reported_step)] == sorted[(sorted.size() - 1) / 2]);
  REQUIRE(run.timeline.ops.size() == 4);
  for (int rank = 0; rank < 4; ++rank) {
    REQUIRE(run.timeline.ops[static_cast<std::size_t>(rank)].size() == program.program_of(rank).ops.size());
  }
  REQUIRE(run.shared_clock);  // one host

  const workloads::Timeline& timeline = run.timeline;
  const auto violations = workloads::timeline_violations(program, timeline, /*tolerance: 1 us*/ 1'000'000, 1000);
  for (const auto& v : violations) UNSCOPED_INFO(v);
  REQUIRE(violations.empty());
  // Kernels take time; GEMMs with real shapes take measurably long.
  for (int rank = 0; rank < 4; ++rank) {
    const auto& ops = program.program_of(rank).ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::compute && ops[i].kernel == KernelClass::gemm) {
        const auto& t = timeline.ops[static_cast<std::size_t>(rank)][i];
        REQUIRE(t.end > t.start);
      }
    }
  }
}

void run_and_check(const Program& program) {
  calib::ExecutionOptions options;
  options.warmup_steps = 1;
  options.measured_steps = 3;
  const calib::MeasuredRun run = calib::execute_on_cpu(program, options);  // collective: every rank
  if (world_rank() == 0) require_consistent(program, run, options.measured_steps);
}

}  // namespace

TEST_CASE("ZeRO-3 runs for real: every op once, causal, collective members together", "[executor]") {
  run_and_check(scaled_program(load_plan("zero3"), 2));
}

TEST_CASE("ZeRO-1 with gradient accumulation runs for real", "[executor]") {
  run_and_check(scaled_program(load_plan("zero1"), 3));
}

TEST_CASE("ZeRO-3 under DeepSpeed-Ulysses over 2 ranks (all-to-alls around attention) runs for real", "[executor]") {
  Plan plan = load_plan("zero3");
  plan.model_parallel.ulysses = 2;
  run_and_check(scaled_program(plan, 2, 4, "layers=2,hidden=256,ffn=688,vocab=512,seq=64"));
}

TEST_CASE("Megatron TP 4 with TP comm overlap (ring-exchange send_recv, sliced reduce-scatters) runs for real",
          "[executor]") {
  Plan plan = load_plan("megatron-tp8-sp");
  plan.model_parallel.tensor = 4;
  plan.model_parallel.tp_comm_overlap = true;
  run_and_check(scaled_program(plan, 2, 1, "layers=2,hidden=512,ffn=1376,vocab=512,seq=64"));
}

TEST_CASE("AMSP (P 1, G 2, OS 4: all-reduce, reduce-scatter, broadcast) runs for real", "[executor]") {
  Plan plan = load_plan("amsp-llama13b");
  plan.factors = {1, 2, 4};
  run_and_check(scaled_program(plan, 2));
}

TEST_CASE("a program for another number of ranks is refused", "[executor]") {
  StepConfig config;
  config.model = load_model("llama-7b");
  config.training = load_training_config("seq4096-mbs1-4m-tokens");
  config.plan = load_plan("zero1");
  config.data_parallel = 2;
  apply_job_scale(parse_job_scale("layers=1,hidden=128,vocab=512,seq=64,micro_batches=1"), 2, config.model, config.training);
  const Program program = compile(config);
  REQUIRE_THROWS_WITH(calib::execute_on_cpu(program, {}), Catch::Contains("mpirun -np 2"));
}

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  // One report: the other ranks' output goes nowhere, their failures still count.
  if (world_rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
  int failed = Catch::Session().run(argc, argv);
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed == 0 ? 0 : 1;
}
