// DeepSpeed-Ulysses sequence parallelism (Jacobs et al. 2023) in the
// data-parallel compiler, against closed forms: per layer and micro-batch
// four all-to-alls of this GPU's T / u tokens (q, k, v and the context, each
// way), the same FLOPs per GPU and step as without it (u times the
// micro-batches, each 1/u of the work), 1/u of the activations, groups of u
// consecutive ranks; and the simulated step consistent.
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/step/step_simulator.h"
#include "topology/base/presets.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

constexpr int kLayers = 4;
constexpr double kTokens = 512, kHidden = 512, kBytes = 2;  // one sequence per micro-batch

// `plan` on 16 GPUs, 2 sequences per GPU and step, split over u GPUs.
StepConfig ulysses(const std::string& plan, int u) {
  StepConfig config = test::pipeline_step(plan, kLayers, 16, 2);
  config.plan.model_parallel.ulysses = u;
  return config;
}

struct RankTotals {
  double all_to_all_bytes = 0;
  int all_to_alls = 0;
  double flops = 0;  // GEMMs and attention
};

RankTotals totals(const Program& program, int rank) {
  RankTotals t;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind == OpKind::collective && op.collective == CollectiveOp::all_to_all) {
      REQUIRE(program.communicators[static_cast<std::size_t>(op.communicator)].name == "ulysses");
      t.all_to_all_bytes += op.bytes;
      ++t.all_to_alls;
    }
    if (op.kind == OpKind::compute && (op.kernel == KernelClass::gemm || op.kernel == KernelClass::attention)) {
      t.flops += op.flops;
    }
  }
  return t;
}

}  // namespace

TEST_CASE("Ulysses: four all-to-alls of T/u tokens per layer and micro-batch, the same FLOPs per GPU, 1/u of the "
          "activations",
          "[ulysses]") {
  const Program plain = compile(ulysses("zero3", 1));
  const RankTotals none = totals(plain, 0);
  REQUIRE(none.all_to_alls == 0);
  const double activations = estimate_step_memory(ulysses("zero3", 1)).memory.activations;
  for (int u : {2, 4, 8}) {
    INFO("u " << u);
    const StepConfig config = ulysses("zero3", u);
    const Program program = compile(config);
    validate_program(program);
    // 2 sequences per GPU, u GPUs per sequence: 2 u micro-batches per rank.
    const double m = 2.0 * u;
    REQUIRE(micro_batches_per_step(config) == 2 * u);
    REQUIRE(program.description.at("gradient_accumulation_steps") == 2 * u);
    for (int rank : {0, u - 1, 15}) {
      const RankTotals t = totals(program, rank);
      REQUIRE(t.all_to_alls == m * kLayers * 4);
      // q, k, v (3h values a token, no grouped-query heads here) and the
      // context (h), forward and backward, of this GPU's T / u tokens.
      REQUIRE(t.all_to_all_bytes == Approx(m * kLayers * 2 * (3 + 1) * kBytes * kHidden * kTokens / u).epsilon(1e-12));
      REQUIRE(t.flops == Approx(none.flops).epsilon(1e-12));
    }
    // The attention core runs on the whole sequence.
    bool attention_seen = false;
    for (const Op& op : program.programs.front().ops) {
      if (op.kind != OpKind::compute || op.kernel != KernelClass::attention) continue;
      attention_seen = true;
      REQUIRE(op.gemm.m == kTokens);
      REQUIRE(op.gemm.n == kTokens);
    }
    REQUIRE(attention_seen);
    // u consecutive ranks per group.
    const Communicator* group = nullptr;
    for (const Communicator& c : program.communicators) {
      if (c.name == "ulysses") group = &c;
    }
    REQUIRE(group != nullptr);
    REQUIRE(group->groups.size() == static_cast<std::size_t>(16 / u));
    for (std::size_t g = 0; g < group->groups.size(); ++g) {
      for (int i = 0; i < u; ++i) REQUIRE(group->groups[g][static_cast<std::size_t>(i)] == static_cast<int>(g) * u + i);
    }
    REQUIRE(estimate_step_memory(config).memory.activations == Approx(activations / u).epsilon(1e-12));
  }
}

TEST_CASE("Ulysses steps are consistent: every op once, after its dependencies, all-to-all members together",
          "[ulysses]") {
  StepConfig recompute = ulysses("zero3", 4);
  recompute.training.recompute = Recompute::full;
  StepConfig amsp = ulysses("amsp-llama7b", 2);
  amsp.plan.factors = {1, 1, 8};
  for (const StepConfig& config : {ulysses("zero3", 4), ulysses("zero1", 8), ulysses("mics-8", 2), amsp, recompute}) {
    INFO(config.plan.name);
    const Program program = compile(config);
    validate_program(program);
    test::require_consistent_step(program, test::pipeline_world());
    // The attention core and the output projection wait for the exchange
    // before them, the kernel after the backward core for its exchange.
    const workloads::Timeline timeline = test::simulate_on(program, test::pipeline_world(), sim::NetworkMode::flow);
    const auto& ops = program.program_of(0).ops;
    std::size_t waited = 0;
    for (std::size_t i = 0, last_exchange = ops.size(); i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::collective && ops[i].collective == CollectiveOp::all_to_all) last_exchange = i;
      if (ops[i].kind != OpKind::compute || last_exchange == ops.size()) continue;
      REQUIRE(timeline.ops[0][i].start >= timeline.ops[0][last_exchange].end);
      last_exchange = ops.size();
      ++waited;
    }
    REQUIRE(waited == static_cast<std::size_t>(totals(program, 0).all_to_alls));
  }
}

TEST_CASE("an all-to-all over 16 GPUs of two nodes outlasts one over a node's 8, with half the bytes",
          "[ulysses]") {
  const auto mean_all_to_all_seconds = [](int u) {
    StepConfig config = ulysses("zero3", u);
    config.model.heads = config.model.kv_heads = 16;  // 16 heads of 32, so u = 16 divides them
    config.model.head_dim = 32;
    const Program program = compile(config);
    const workloads::Timeline timeline = test::simulate_on(program, test::pipeline_world(), sim::NetworkMode::flow);
    double seconds = 0;
    int calls = 0;
    const auto& ops = program.program_of(0).ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != OpKind::collective || ops[i].collective != CollectiveOp::all_to_all) continue;
      const workloads::OpTiming& t = timeline.ops[0][i];
      seconds += static_cast<double>(t.end - t.moving) * 1e-12;
      ++calls;
    }
    return seconds / calls;
  };
  REQUIRE(mean_all_to_all_seconds(16) > 1.5 * mean_all_to_all_seconds(8));
}

TEST_CASE("Ulysses plans that cannot run are refused naming the file and the field", "[ulysses][input]") {
  nlohmann::json document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/zero3.json"));
  document["model_parallel"] = {{"ulysses", 4}};
  REQUIRE(parse_plan(document, "p.json").model_parallel.ulysses == 4);
  document["model_parallel"] = {{"ulysses", 4}, {"tensor", 2}};
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel") &&
                                                          Catch::Contains("{\"ulysses\": u} alone"));
  document["model_parallel"] = {{"ulysses", 0}};
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel.ulysses"));
  document["model_parallel"] = {{"ulysses", 2}};
  document["experts"] = {{"parallel", 2}};
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: experts.parallel") &&
                                                          Catch::Contains("DeepSpeed-Ulysses"));

  nlohmann::json megatron =
      nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-tp8-sp.json"));
  megatron["model_parallel"]["ulysses"] = 2;
  REQUIRE_THROWS_WITH(parse_plan(megatron, "m.json"), Catch::Contains("m.json: model_parallel.ulysses"));
  Plan pipeline = load_plan("zero-pipeline-pp4");
  pipeline.model_parallel.ulysses = 2;
  REQUIRE_THROWS_WITH(check_parallelism_system(pipeline, "z.json"), Catch::Contains("z.json: model_parallel.ulysses"));

  StepConfig uneven = ulysses("zero3", 3);  // 16 GPUs
  REQUIRE_THROWS_WITH(compile(uneven), Catch::Contains("plan.json: model_parallel.ulysses") &&
                                                Catch::Contains("does not divide the 16"));
  StepConfig heads = ulysses("zero3", 16);  // 8 heads
  REQUIRE_THROWS_WITH(compile(heads), Catch::Contains("heads (8) must divide over the 16 DeepSpeed-Ulysses GPUs"));
}
