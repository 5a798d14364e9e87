// MoE layers in the data-parallel compiler: parameter and FLOP counts
// against the published Mixtral figures, the work expert parallelism moves
// (and what it must not change), the E+D and D+E groups, model states under
// the expert factors, and simulated steps that are consistent and put the
// traffic where each layout says.
#include "pipeline_checks.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "topology/placement.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/model_flops.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <utility>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// Two layers of eight SwiGLU experts, two per token; heads and widths small
// enough to simulate 16 GPUs quickly.
ModelSpec tiny_moe_model(int shared_experts = 0) {
  ModelSpec model = test::small_moe_model(2);
  model.moe.shared_experts = shared_experts;
  model.moe.shared_expert_ffn_hidden = shared_experts > 0 ? 512 : 0;
  return model;
}

StepConfig moe_step(const std::string& plan, int ranks, int expert_parallel, topology::MoeLayout layout,
                    int micro_batches = 1) {
  StepConfig config = test::pipeline_step(plan, 2, ranks, micro_batches);
  config.model = tiny_moe_model();
  config.plan.experts = {expert_parallel, layout};
  return config;
}

// The routed experts' parameters of the whole model: 3 h f per SwiGLU expert.
double routed_parameters(const ModelSpec& model) {
  return static_cast<double>(model.layers) * model.moe.experts * 3.0 * static_cast<double>(model.hidden) *
         static_cast<double>(model.moe.expert_ffn_hidden);
}

// Summed durations of rank 0's calls on the communicator named `name`.
double seconds_on(const Program& program, const workloads::Timeline& timeline, const std::string& name) {
  double total = 0;
  const auto& ops = program.program_of(0).ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::collective &&
        program.communicators[static_cast<std::size_t>(ops[i].communicator)].name == name) {
      total += seconds_from_picoseconds(timeline.ops[0][i].end - timeline.ops[0][i].start);
    }
  }
  return total;
}

}  // namespace

TEST_CASE("Mixtral-8x7B counts the published 46.7 B parameters and 12.9 B active per token", "[moe][model]") {
  const ModelSpec model = load_model("mixtral-8x7b");
  const double h = 4096, kv = 1024, f = 14336, vocab = 32000, layers = 32;
  // Per layer: Q and O (h x h), K and V (h x kv), two RMSNorms, the router
  // (h x 8) and eight experts of three h x f matrices; then the embedding,
  // the untied LM head and the final norm.
  const double layer = 2 * h * h + 2 * h * kv + 2 * h + 8 * h + 8 * 3 * h * f;
  const double total = layers * layer + 2 * vocab * h + h;
  REQUIRE(static_cast<double>(count_parameters(model).total()) == total);
  // Jiang et al. 2024 and Mistral AI's release: 46.7 B in all.
  REQUIRE(total == Approx(46.7e9).epsilon(0.001));
  REQUIRE(routed_expert_parameters(model) == routed_parameters(model));

  // Model FLOPs count each token's two experts, not eight: 6 x active
  // parameters (the embedding lookup aside) plus attention's scores.
  TrainingConfig training;
  training.sequence_length = 4096;
  training.micro_batch_size = 1;
  training.global_batch_sequences = 1024;
  const double tokens = 4096.0 * 1024;
  const double scores = layers * 4 * 4096.0 * h;  // 4 s q per token and layer
  const double active = model_flops_per_step(model, training) / (3 * tokens) / 2 - scores / 2;
  REQUIRE(active == Approx(layers * (2 * h * h + 2 * h * kv + 8 * h + 2 * 3 * h * f) + vocab * h));
  // Mistral AI: 12.9 B parameters used per token, the embedding included.
  REQUIRE(active + vocab * h == Approx(12.9e9).epsilon(0.01));
}

TEST_CASE("expert parallelism moves the experts' tokens between GPUs, not the work they do", "[moe][kernels]") {
  const ModelSpec model = tiny_moe_model();
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 2;
  training.global_batch_sequences = 2;
  const double T = 1024, h = 512, f = 704, k = 2, E = 8, e = 2;
  for (const auto& [ep, c] : {std::pair{1, 1.0}, std::pair{2, 1.0}, std::pair{4, 1.0}, std::pair{8, 1.0},
                              std::pair{8, 1.25}}) {
    INFO("expert parallelism " << ep << ", capacity factor " << c);
    const std::vector<ModuleWork> modules = transformer_modules(model, training, {}, {ep, {}, c});
    // embedding, then (attention, mlp, experts) per layer, then the head
    REQUIRE(modules.size() == 1 + 3 * 2 + 1);
    const ModuleWork& experts = modules[3];
    REQUIRE(experts.name == "layer0.experts");
    REQUIRE(experts.routed_experts);
    REQUIRE(experts.parameters == E / ep * 3 * h * f);
    REQUIRE_FALSE(modules[2].routed_experts);
    REQUIRE(modules[2].parameters == h + h * E);  // its norm and the router

    double forward_flops = 0, backward_flops = 0;
    int calls = 0;
    for (const auto* list : {&experts.forward, &experts.backward}) {
      for (const KernelSpec& spec : *list) {
        if (spec.call) {
          ++calls;
          REQUIRE(spec.call->group == CallGroup::expert_parallel);
          REQUIRE(spec.call->op == CollectiveOp::all_to_all);
          REQUIRE(spec.call->bytes == e * c * T * k * h);  // every routed token copy (padded), each way
          continue;
        }
        if (spec.kernel != KernelClass::gemm) continue;
        (list == &experts.forward ? forward_flops : backward_flops) += spec.flops;
        // One expert's GEMM: the tokens of every expert-parallel rank routed to it.
        const std::int64_t m = static_cast<std::int64_t>(ep * c * T * k / E);
        REQUIRE((spec.gemm.m == m || spec.gemm.n == m || spec.gemm.k == m));
      }
    }
    // T k token copies (padded to capacity) through gate/up (2f wide) and
    // down, on whichever GPUs hold their experts.
    REQUIRE(forward_flops == Approx(2 * c * T * k * 3 * h * f));
    REQUIRE(backward_flops == 2 * forward_flops);
    REQUIRE(calls == (ep > 1 ? 4 : 0));
  }
}

TEST_CASE("shared experts run as one MLP of their summed width beside the router", "[moe][kernels]") {
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 1;
  training.global_batch_sequences = 1;
  const std::vector<ModuleWork> modules = transformer_modules(tiny_moe_model(2), training, {}, {4});
  const ModuleWork& mlp = modules[2];
  const double T = 512, h = 512, width = 2 * 512;
  REQUIRE(mlp.parameters == h + h * 8 + 2 * 3 * h * 512);
  double flops = 0;
  for (const KernelSpec& spec : mlp.forward) {
    if (spec.kernel == KernelClass::gemm) flops += spec.flops;
  }
  REQUIRE(flops == 2 * T * h * 8 + 2 * T * 3 * h * width);  // router, then gate/up and down
}

TEST_CASE("E+D and D+E compile into the expert groups topology::moe_groups places", "[moe][groups]") {
  for (const auto layout : {topology::MoeLayout::expert_data, topology::MoeLayout::data_expert}) {
    INFO(topology::to_string(layout));
    const Program program = compile(moe_step("zero3", 16, 8, layout, 2));
    const topology::MoeGroups groups = topology::moe_groups(16, 8, layout);
    REQUIRE(test::communicator_named(program, "expert_parallel").groups == groups.expert_parallel);
    // ZeRO-3 shards each expert over the ranks holding it, the dense modules over all.
    REQUIRE(test::communicator_named(program, "expert_parameters").groups == groups.expert_data_parallel);
    REQUIRE(test::communicator_named(program, "parameters").groups.size() == 1);
    REQUIRE(program.description["experts"]["data_parallel"] == 2);
    // Two all-to-alls forward and two backward, per MoE layer and micro-batch.
    int all_to_alls = 0;
    for (const Op& op : program.program_of(0).ops) all_to_alls += op.kind == OpKind::collective && op.collective == CollectiveOp::all_to_all;
    REQUIRE(all_to_alls == 2 * 2 * 4);
  }
}

TEST_CASE("model states per GPU: dense ones under the plan's factors, routed experts' under the expert factors",
          "[moe][memory]") {
  const int n = 16;
  const ModelSpec model = tiny_moe_model();
  const double psi = static_cast<double>(count_parameters(model).total());
  const double routed = routed_parameters(model);
  const double dense = psi - routed;
  const auto resident = [](const Program& program, MemoryCategory category) {
    return program.programs.front().resident_bytes[static_cast<std::size_t>(category)];
  };
  SECTION("ZeRO-1, experts over 4: every rank keeps its experts whole, the optimizer shards over 16 and 4") {
    const Program program = compile(moe_step("zero1", n, 4, topology::MoeLayout::expert_data));
    REQUIRE(resident(program, MemoryCategory::parameters) == Approx(2 * (dense + routed / 4)));
    REQUIRE(resident(program, MemoryCategory::optimizer_states) == Approx(12 * (dense / n + routed / 4 / 4)));
  }
  SECTION("ZeRO-3, experts over 4: each expert over the 4 ranks holding it, 2 Psi / N in all") {
    const Program program = compile(moe_step("zero3", n, 4, topology::MoeLayout::data_expert));
    REQUIRE(resident(program, MemoryCategory::parameters) == Approx(2 * psi / n));
    REQUIRE(resident(program, MemoryCategory::optimizer_states) == Approx(12 * psi / n));
  }
  SECTION("MiCS-8, experts over 4: f = 8 becomes gcd(8, 4) = 4 for the experts") {
    const Program program = compile(moe_step("mics-8", n, 4, topology::MoeLayout::data_expert));
    REQUIRE(program.description["experts"]["factors"]["parameters"] == 4);
    REQUIRE(resident(program, MemoryCategory::parameters) == Approx(2 * (dense / 8 + routed / 4 / 4)));
  }
  SECTION("ZeRO-3, experts over all 16: each expert lives on one rank, nothing of it is gathered") {
    const Program program = compile(moe_step("zero3", n, 8, topology::MoeLayout::expert_data));
    REQUIRE(resident(program, MemoryCategory::parameters) == Approx(2 * (dense / n + routed / 8 / 2)));
    test::require_expert_states_stay_put(compile(moe_step("zero3", 8, 8, topology::MoeLayout::expert_data)));
  }
}

TEST_CASE("MoE steps run every op once, after its dependencies, under every data-parallel system",
          "[moe][causality]") {
  using topology::MoeLayout;
  for (const std::string plan : {"zero1", "zero2", "zero3", "mics-8", "zeropp-hpz8", "fsdp-hybrid-8", "amsp-llama13b"}) {
    for (const auto& [ep, layout] : {std::pair{1, MoeLayout::expert_data}, std::pair{8, MoeLayout::expert_data},
                                     std::pair{4, MoeLayout::data_expert}}) {
      INFO(plan << ", experts over " << ep << " " << topology::to_string(layout));
      const Program program = compile(moe_step(plan, 16, ep, layout, 2));
      validate_program(program);
      test::require_consistent_step(program, test::pipeline_world());
    }
  }
  // Pipelines without tensor parallelism take MoE layers with their experts local.
  for (const auto& [plan, layers] : {std::pair{"megatron-tp4-pp4", 4}, std::pair{"zero-pipeline-pp4", 8}}) {
    INFO(plan);
    StepConfig pipeline = moe_step(plan, 4, 1, MoeLayout::expert_data, 8);
    pipeline.plan.model_parallel.tensor = 1;
    pipeline.model.layers = layers;
    if (pipeline.plan.system == ShardingSystem::zero_pipeline) pipeline.plan.factors = {4, 4, 4};  // over 4 GPUs a stage
    test::require_consistent_step(compile(pipeline), test::pipeline_world());
  }
  StepConfig recompute = moe_step("zero3", 16, 8, MoeLayout::data_expert);
  recompute.training.recompute = Recompute::full;
  const Program program = compile(recompute);
  test::require_consistent_step(program, test::pipeline_world());
  // The whole layer is rebuilt before its experts' backward, all-to-alls included.
  int recomputed_all_to_alls = 0;
  for (const Op& op : program.program_of(0).ops) {
    recomputed_all_to_alls += op.name.find("experts.recompute.dispatch.all_to_all") != std::string::npos;
  }
  REQUIRE(recomputed_all_to_alls == 2);
}

TEST_CASE("E+D keeps the all-to-all inside a node and sends expert gradients across, D+E the reverse",
          "[moe][placement]") {
  // Two nodes of eight GPUs, experts over 8. E+D: all-to-all groups are the
  // nodes and each expert's two replicas sit on different nodes; D+E: the two
  // replicas share a node and each all-to-all group spans both.
  const auto step = [](topology::MoeLayout layout) {
    const Program program = compile(moe_step("zero1", 16, 8, layout));
    return std::pair{program, test::simulate_on(program, test::pipeline_world(), sim::NetworkMode::flow)};
  };
  const auto [ed, ed_timeline] = step(topology::MoeLayout::expert_data);
  const auto [de, de_timeline] = step(topology::MoeLayout::data_expert);
  // NVLink moves a byte twelve times faster than one InfiniBand NIC (300 vs
  // 25 GB/s); half of a D+E all-to-all's peers are remote. The calls are
  // small (1 MiB), so latency narrows the gap (3.3x and 5.3x here).
  REQUIRE(seconds_on(ed, ed_timeline, "expert_parallel") * 2 < seconds_on(de, de_timeline, "expert_parallel"));
  REQUIRE(seconds_on(de, de_timeline, "expert_parameter_replicas") * 2 <
          seconds_on(ed, ed_timeline, "expert_parameter_replicas"));
}

TEST_CASE("expert parallelism that does not fit the model, the GPUs or the system is refused with the field",
          "[moe][errors]") {
  StepConfig dense = test::pipeline_step("zero3", 2, 16, 1);
  dense.plan.experts.parallel = 8;
  REQUIRE_THROWS_WITH(compile(dense), Catch::Contains("plan.json: experts.parallel: the model has no MoE layers"));
  REQUIRE_THROWS_WITH(compile(moe_step("zero3", 16, 16, topology::MoeLayout::expert_data)),
                      Catch::Contains("experts.parallel: 16 does not divide the model's 8 routed experts"));
  REQUIRE_THROWS_WITH(compile(moe_step("zero3", 12, 8, topology::MoeLayout::expert_data)),
                      Catch::Contains("experts.parallel: 8 does not divide the 12 data-parallel GPUs"));
  REQUIRE_THROWS_WITH(estimate_step_memory(moe_step("zero3", 12, 8, topology::MoeLayout::expert_data)),
                      Catch::Contains("experts.parallel"));

  nlohmann::json zero3 = load_json_file(resolve_preset("zero3", "workloads/plans", "plan"));
  zero3["experts"] = {{"parallel", 8}, {"layout", "E-D"}};
  REQUIRE_THROWS_WITH(parse_plan(zero3, "z.json"), Catch::Contains("z.json: experts.layout"));
  zero3["experts"] = {{"parallel", 8}, {"capacity_factor", 0}};
  REQUIRE_THROWS_WITH(parse_plan(zero3, "z.json"), Catch::Contains("z.json: experts.capacity_factor"));
  zero3["experts"] = {{"parallel", 8}, {"layout", "D+E"}, {"capacity_factor", 1.25}};
  const Plan parsed = parse_plan(zero3, "z.json");
  REQUIRE(parsed.experts.parallel == 8);
  REQUIRE(parsed.experts.layout == topology::MoeLayout::data_expert);
  REQUIRE(parsed.experts.capacity_factor == 1.25);

  StepConfig tensor = moe_step("megatron-tp4-pp4", 1, 1, topology::MoeLayout::expert_data);
  tensor.model.layers = 4;  // one per pipeline stage
  tensor.plan.model_parallel.sequence_parallel = false;
  REQUIRE_THROWS_WITH(compile(tensor), Catch::Contains("MoE layers under tensor parallelism need sequence "
                                                            "parallelism"));
}
