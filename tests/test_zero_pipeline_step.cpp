// ZeroPP steps (a TP-free pipeline with sharded stages) against what the
// technique says they must do (Tang et al. 2024; TECHNIQUES.md section 4):
// one gradient reduce-scatter per unit and chunk, parameters gathered once
// for a unit's forwards and once for its backwards unless the two
// interleave, model states sharded by the factors, activations bounded by
// one unit, and the simulated step consistent (every op once, after its
// dependencies, sends meeting their receives).
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/step/step_simulator.h"
#include "topology/base/presets.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/compile/zero_pipeline_step.h"
#include "workloads/ir/timeline_check.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// p stages of v chunks over p x data GPUs, m micro-batches per pipeline in
// units of u; factors as written (0 = all).
StepConfig zero_pipeline(int p, int v, int data, int m, int u, FactorSpec factors) {
  StepConfig config = test::pipeline_step("zero-pipeline-pp4", 2 * p * v, data, m);
  config.plan.factors = factors;
  config.plan.model_parallel = {1, p, v, false, u};
  return config;
}

const test::World& world() { return test::pipeline_world(); }

// Bytes of the stage's calls of one kind on one communicator.
double call_bytes(const Program& program, int stage, const std::string& communicator, CollectiveOp kind) {
  double bytes = 0;
  for (const Op& op : program.programs[static_cast<std::size_t>(stage)].ops) {
    if (op.kind == OpKind::collective && op.collective == kind &&
        program.communicators[static_cast<std::size_t>(op.communicator)].name == communicator) {
      bytes += op.bytes;
    }
  }
  return bytes;
}

double chunk_parameters(const ModelParallelPartition& partition, int stage, int chunk) {
  double parameters = 0;
  for (std::size_t m : partition.chunks[static_cast<std::size_t>(stage)][static_cast<std::size_t>(chunk)]) {
    parameters += partition.modules[m].parameters;
  }
  return parameters;
}

}  // namespace

TEST_CASE("a stage reduce-scatters its gradients once per unit and gathers its parameters once or twice",
          "[zero_pipeline][traffic]") {
  const double e = 2;
  SECTION("one stage: forwards and backwards of the chunk alternate, one gather per unit") {
    for (int u : {1, 2, 4}) {
      INFO("unit " << u);
      const StepConfig config = zero_pipeline(1, 1, 8, 4, u, {8, 8, 8});
      const Program program = compile(config);
      validate_program(program);
      const double psi = partition_model(config).stage_parameters.front();
      const double units = 4.0 / u;
      REQUIRE(call_bytes(program, 0, "parameters", CollectiveOp::reduce_scatter) == Approx(units * e * psi));
      REQUIRE(call_bytes(program, 0, "parameters", CollectiveOp::all_gather) == Approx(units * e * psi));
    }
  }
  SECTION("one unit over p stages of two chunks: chunk 0 twice, chunk 1 once") {
    // Chunk 0's forwards and backwards are separated by chunk 1's passes;
    // with a single unit, only weight gradients can run between chunk 1's
    // last forward and its first input gradient.
    const int p = 4, m = 4;
    const StepConfig config = zero_pipeline(p, 2, 2, m, m, {2, 2, 2});
    const Program program = compile(config);
    validate_program(program);
    const ModelParallelPartition partition = partition_model(config);
    for (int s = 0; s < p; ++s) {
      INFO("stage " << s);
      const double first = chunk_parameters(partition, s, 0), second = chunk_parameters(partition, s, 1);
      REQUIRE(call_bytes(program, s, "parameters", CollectiveOp::all_gather) == Approx(e * (2 * first + second)));
      REQUIRE(call_bytes(program, s, "parameters", CollectiveOp::reduce_scatter) == Approx(e * (first + second)));
    }
  }
  SECTION("more units, more calls: per chunk and unit, one reduce-scatter and one or two gathers") {
    const int p = 2, m = 8;
    for (int u : {2, 4, 8}) {
      INFO("unit " << u);
      const StepConfig config = zero_pipeline(p, 2, 2, m, u, {2, 2, 2});
      const Program program = compile(config);
      const ModelParallelPartition partition = partition_model(config);
      const double units = static_cast<double>(m) / u;
      for (int s = 0; s < p; ++s) {
        const double psi = partition.stage_parameters[static_cast<std::size_t>(s)];
        REQUIRE(call_bytes(program, s, "parameters", CollectiveOp::reduce_scatter) == Approx(units * e * psi));
        const double gathered = call_bytes(program, s, "parameters", CollectiveOp::all_gather);
        REQUIRE(gathered >= units * e * psi * (1 - 1e-12));
        REQUIRE(gathered <= 2 * units * e * psi * (1 + 1e-12));
      }
    }
  }
}

TEST_CASE("ZeroPP's hybrids: the last unit's shards all-reduced across nodes, or reduce-scattered and the update "
          "gathered (ZeRO-1 across nodes)",
          "[zero_pipeline][traffic][memory]") {
  const int p = 2, d = 16;
  const double e = 2;
  for (const FactorSpec factors : {FactorSpec{8, 8, 8}, FactorSpec{8, 8, 0}}) {
    const bool zero1 = factors.optimizer == 0;
    INFO((zero1 ? "ZeRO-3 + PP + ZeRO-1" : "ZeRO-3 + PP + DP"));
    const StepConfig config = zero_pipeline(p, 1, d, 4, 2, factors);
    const Program program = compile(config);
    validate_program(program);
    const ModelParallelPartition partition = partition_model(config);
    for (int s = 0; s < p; ++s) {
      const double psi = partition.stage_parameters[static_cast<std::size_t>(s)];
      const double shard = e * psi / 8;
      const auto kind = zero1 ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce;
      REQUIRE(call_bytes(program, s, "parameter_replicas", kind) == Approx(shard));
      REQUIRE(call_bytes(program, s, "parameter_update", CollectiveOp::all_gather) == Approx(zero1 ? shard : 0));
      // Model states: 2 / 8 + 2 / 8 + 12 / f_OS bytes per parameter.
      const auto& resident = program.programs[static_cast<std::size_t>(s)].resident_bytes;
      const double f_os = zero1 ? d : 8;
      REQUIRE(resident[static_cast<std::size_t>(MemoryCategory::parameters)] == Approx(e * psi / 8));
      REQUIRE(resident[static_cast<std::size_t>(MemoryCategory::gradients)] == Approx(e * psi / 8));
      REQUIRE(resident[static_cast<std::size_t>(MemoryCategory::optimizer_states)] == Approx(12 * psi / f_os));
    }
  }
}

TEST_CASE("a stage holds at most one unit's activations, as simulated and as estimated", "[zero_pipeline][memory]") {
  const int p = 4, v = 2, m = 8;
  for (int u : {4, 8}) {
    INFO("unit " << u);
    const StepConfig config = zero_pipeline(p, v, 2, m, u, {2, 2, 2});
    const Program program = compile(config);
    const ModelParallelPartition partition = partition_model(config);
    const workloads::Timeline timeline = test::simulate_on(program, world(), sim::NetworkMode::analytical);
    REQUIRE_FALSE(timeline.out_of_memory);
    const std::vector<MemoryBreakdown> estimate = estimate_zero_pipeline_memory(config);
    const ModelParallelLayout layout{1, 2, p};
    int stages_with_loss = 0;
    for (int s = 0; s < p; ++s) {
      INFO("stage " << s);
      double unit_bytes = 0;  // u micro-batches through every chunk of the stage
      for (const auto& chunk : partition.chunks[static_cast<std::size_t>(s)]) {
        for (std::size_t module : chunk) unit_bytes += u * partition.modules[module].activation_bytes;
      }
      // Besides them, the loss's working set on the stage that computes it.
      const double working = test::largest_working_bytes(partition.modules, partition.chunks[static_cast<std::size_t>(s)]);
      stages_with_loss += working > 0 ? 1 : 0;
      const auto& peak = timeline.peak_memory[static_cast<std::size_t>(layout.rank(0, 1, s))];
      REQUIRE(peak.by_category[static_cast<std::size_t>(MemoryCategory::activations)] <=
              (unit_bytes + working) * (1 + 1e-12));
      REQUIRE(estimate[static_cast<std::size_t>(s)].activations <= (unit_bytes + working) * (1 + 1e-12));
      // The first stage runs a whole unit forward before its first backward comes back.
      if (s == 0) REQUIRE(estimate.front().activations == Approx(unit_bytes + working));
      REQUIRE(estimate[static_cast<std::size_t>(s)].model_states() ==
              Approx((2.0 / 2 + 2.0 / 2 + 12.0 / 2) * partition.stage_parameters[static_cast<std::size_t>(s)]));
    }
    REQUIRE(stages_with_loss == 1);
  }
}

TEST_CASE("a ZeroPP step runs every op once, after its dependencies, sends meeting their receives",
          "[zero_pipeline][causality]") {
  StepConfig recompute = zero_pipeline(2, 2, 8, 4, 2, {8, 8, 0});
  recompute.training.recompute = Recompute::full;
  StepConfig no_overlap = zero_pipeline(4, 2, 4, 4, 4, {2, 2, 4});
  apply_overlap_level(no_overlap.plan, "none");
  StepConfig tied = zero_pipeline(2, 1, 8, 4, 4, {8, 8, 8});
  tied.model.tied_embeddings = true;
  // A multi-token-prediction depth on the last chunk, which gathers the
  // last stage's embedding copy for its lookup.
  StepConfig mtp = zero_pipeline(2, 2, 8, 4, 2, {8, 8, 8});
  mtp.model.mtp_layers = 1;
  for (const StepConfig& config : {zero_pipeline(4, 2, 4, 8, 4, {4, 4, 4}), zero_pipeline(2, 1, 8, 4, 2, {1, 1, 1}),
                                   zero_pipeline(2, 2, 8, 4, 4, {1, 1, 0}), zero_pipeline(1, 1, 16, 2, 1, {8, 8, 0}),
                                   recompute, no_overlap, tied, mtp}) {
    const ModelParallelism& mp = config.plan.model_parallel;
    INFO("p " << mp.pipeline << " v " << mp.virtual_stages << " d " << config.data_parallel << " unit "
              << mp.scheduling_unit);
    const Program program = compile(config);
    validate_program(program);
    REQUIRE(program.ranks == 16);
    test::require_boundary_sends(program, config, 2.0 * 512 * 512);
    const double micro_batches = static_cast<double>(config.training.global_batch_sequences) / config.data_parallel;
    // Each compute kernel of the micro-batch passes once: forward, input
    // gradient and weight gradient split the backward without loss.
    const ModelParallelPartition partition = partition_model(config);
    for (std::size_t s = 0; s < program.programs.size(); ++s) {
      double expected = 0, compiled = 0;
      for (const auto& chunk : partition.chunks[s]) {
        for (std::size_t module : chunk) {
          const ModuleWork& work = partition.modules[module];
          for (const auto* list : {&work.forward, &work.backward, &work.recompute}) {
            for (const KernelSpec& spec : *list) expected += micro_batches * spec.flops;
          }
        }
      }
      double allocated = 0, freed = 0;
      for (const Op& op : program.programs[s].ops) {
        if (op.kind == OpKind::compute && op.kernel != KernelClass::optimizer) compiled += op.flops;
        if (op.kind == OpKind::memory) (op.bytes > 0 ? allocated : freed) += op.bytes;
      }
      REQUIRE(compiled == Approx(expected).epsilon(1e-12));
      REQUIRE(freed == Approx(-allocated));  // activations, gathered parameters, gradient buffers
    }
    test::require_consistent_step(program, world());
    const Program back = program_from_json(program_to_json(program), "program.json");
    REQUIRE(back.total_ops() == program.total_ops());
  }
}

TEST_CASE("ZeroPP plans that cannot run are refused naming the file and the field", "[zero_pipeline][input]") {
  StepConfig unit = zero_pipeline(2, 1, 2, 6, 4, {2, 2, 2});
  REQUIRE_THROWS_WITH(compile(unit), Catch::Contains("plan.json: model_parallel.scheduling_unit") &&
                                              Catch::Contains("micro-batches per step (6)"));
  StepConfig layers = zero_pipeline(2, 2, 2, 4, 2, {2, 2, 2});
  layers.model.layers = 6;
  REQUIRE_THROWS_WITH(compile(layers), Catch::Contains("plan.json: model_parallel") && Catch::Contains("6 layers"));
  const nlohmann::json preset =
      nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/zero-pipeline-pp4.json"));
  nlohmann::json document = preset;
  document["model_parallel"]["tensor"] = 2;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel.tensor") &&
                                                          Catch::Contains("TP-free"));
  document = preset;
  document["factors"]["gradients"] = "all";
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: factors") &&
                                                          Catch::Contains("must equal the parameters factor"));
  document = preset;
  document.erase("model_parallel");
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel"));
  document = preset;
  document["model_parallel"].erase("scheduling_unit");
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("scheduling_unit"));
}
