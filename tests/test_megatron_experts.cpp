// Expert parallelism under Megatron-LM's pipelines (tensor 1): the groups
// Megatron-Core's order gives, the bytes each group moves counted by hand,
// model states under the expert-data-parallel sharding, and simulated steps
// that run every op once, in order, with the members of each call together.
#include "pipeline_checks.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "topology/placement.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace shardsim;
using namespace shardsim::workloads;
using topology::MoeLayout;

namespace {

// Four layers of eight SwiGLU experts, two per token.
ModelSpec small_moe_model() { return test::small_moe_model(4); }

// Megatron-LM, `pipeline` stages of `tensor` x `data` x `context` GPUs each
// (sequence parallelism with tensor parallelism), the experts over
// `expert_parallel` of them; micro-batches of one 512-token sequence.
StepConfig megatron_moe_step(int pipeline, int data, int expert_parallel, MoeLayout layout, int micro_batches = 4,
                             int context = 1, int tensor = 1) {
  StepConfig config = test::pipeline_step("megatron-tp4-pp4", 4, data, micro_batches);
  config.model = small_moe_model();
  ModelParallelism& mp = config.plan.model_parallel;
  mp.tensor = tensor;
  mp.sequence_parallel = tensor > 1;
  mp.pipeline = pipeline;
  mp.context = context;
  config.plan.experts = {expert_parallel, layout};
  return config;
}

// One SwiGLU expert: gate, up and down, h x f each.
double expert_parameters(const ModelSpec& model) {
  return 3.0 * static_cast<double>(model.hidden) * static_cast<double>(model.moe.expert_ffn_hidden);
}

std::vector<std::vector<int>> sorted(std::vector<std::vector<int>> groups) {
  std::sort(groups.begin(), groups.end());
  return groups;
}

// Per (communicator, collective): the calls and bytes of one rank's op list.
std::map<std::pair<std::string, CollectiveOp>, std::pair<int, double>> calls_of(const Program& program, int rank) {
  std::map<std::pair<std::string, CollectiveOp>, std::pair<int, double>> calls;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind != OpKind::collective) continue;
    auto& [count, bytes] = calls[{program.communicators[static_cast<std::size_t>(op.communicator)].name, op.collective}];
    ++count;
    bytes += op.bytes;
  }
  return calls;
}

}  // namespace

TEST_CASE("Megatron-LM's expert groups cut each stage's data-parallel GPUs as topology::moe_groups does",
          "[moe][megatron][groups]") {
  // Two stages of eight GPUs, ranks 0-7 and 8-15 (tensor 1: rank = dp + 8 pp).
  for (const auto layout : {MoeLayout::expert_data, MoeLayout::data_expert}) {
    INFO(topology::to_string(layout));
    const Program program = compile(megatron_moe_step(2, 8, 4, layout));
    const topology::MoeGroups stage = topology::moe_groups(8, 4, layout);
    std::vector<std::vector<int>> expert_parallel, expert_data;
    for (int pp = 0; pp < 2; ++pp) {
      for (const auto& [all, groups] : {std::tie(expert_parallel, stage.expert_parallel),
                                        std::tie(expert_data, stage.expert_data_parallel)}) {
        for (std::vector<int> group : groups) {
          for (int& rank : group) rank += 8 * pp;
          all.push_back(group);
        }
      }
    }
    REQUIRE(sorted(test::communicator_named(program, "expert_parallel").groups) == sorted(expert_parallel));
    REQUIRE(sorted(test::communicator_named(program, "expert_data_parallel").groups) == sorted(expert_data));
    REQUIRE(test::communicator_named(program, "data_parallel").groups.size() == 2);  // one per stage, as without MoE
    REQUIRE(program.description["experts"]["data_parallel"] == 2);
  }
  // Megatron-Core's order tp-cp-ep-dp-pp: an expert-parallel group is ep consecutive ranks.
  const Program megatron = compile(megatron_moe_step(2, 8, 4, MoeLayout::expert_data));
  REQUIRE(test::communicator_named(megatron, "expert_parallel").groups.front() == std::vector<int>{0, 1, 2, 3});

  // Experts over a whole stage: each lives on one GPU, with no group to reduce over.
  const Program whole = compile(megatron_moe_step(2, 8, 8, MoeLayout::expert_data));
  REQUIRE_THROWS(test::communicator_named(whole, "expert_data_parallel"));
  REQUIRE(whole.description["experts"]["data_parallel"] == 1);
}

TEST_CASE("Megatron-LM with expert parallelism: every group's bytes and the optimizer shard, counted by hand",
          "[moe][megatron][bytes]") {
  // Two stages of two layers; 8 data-parallel GPUs a stage, experts over 4,
  // so each GPU holds 2 of the 8 experts and each expert sits on 2 GPUs.
  const int p = 2, d = 8, ep = 4, m = 4;
  StepConfig config = megatron_moe_step(p, d, ep, MoeLayout::expert_data, m);
  const ModelSpec& model = config.model;
  const double psi = static_cast<double>(count_parameters(model).total());
  const double experts_per_gpu = model.moe.experts / ep * expert_parameters(model);  // per layer
  const double layers_per_stage = 2;
  const double T = 512, k = 2, h = 512, e = 2, fp32 = 4;

  SECTION("distributed optimizer: reduce-scatters and all-gathers, each group over its own GPUs") {
    const Program program = compile(config);
    double dense_reduced = 0, dense_gathered = 0;
    for (int pp = 0; pp < p; ++pp) {
      INFO("stage " << pp);
      const auto calls = calls_of(program, d * pp);
      const double stage_experts = layers_per_stage * experts_per_gpu;
      // Megatron-LM keeps bf16 gradients in fp32; bf16 parameters are gathered.
      REQUIRE(calls.at({"expert_data_parallel", CollectiveOp::reduce_scatter}).second == Approx(fp32 * stage_experts));
      REQUIRE(calls.at({"expert_data_parallel", CollectiveOp::all_gather}).second == Approx(e * stage_experts));
      dense_reduced += calls.at({"data_parallel", CollectiveOp::reduce_scatter}).second / fp32;
      dense_gathered += calls.at({"data_parallel", CollectiveOp::all_gather}).second / e;
      // Dispatch and combine, forward and backward, per MoE layer and
      // micro-batch, each moving every routed token copy.
      const auto [count, bytes] = calls.at({"expert_parallel", CollectiveOp::all_to_all});
      REQUIRE(count == 4 * layers_per_stage * m);
      REQUIRE(bytes == Approx(count * e * T * k * h));
      REQUIRE(calls.count({"data_parallel", CollectiveOp::all_to_all}) == 0);

      // Adam's 12 bytes per parameter: the dense states over the stage's 8
      // GPUs, the experts' over the 2 holding them.
      const double stage_psi = program.program_of(d * pp).resident_bytes[static_cast<std::size_t>(MemoryCategory::parameters)] / e;
      const double optimizer = 12 * ((stage_psi - stage_experts) / d + stage_experts / (d / ep));
      REQUIRE(program.program_of(d * pp).resident_bytes[static_cast<std::size_t>(MemoryCategory::optimizer_states)] ==
              Approx(optimizer));
      REQUIRE(estimate_stage_memory(config)[static_cast<std::size_t>(pp)].optimizer_states == Approx(optimizer));
    }
    // Every parameter but the routed experts' is reduced and gathered over the data-parallel group once.
    const double routed = model.layers * model.moe.experts * expert_parameters(model);
    REQUIRE(dense_reduced == Approx(psi - routed));
    REQUIRE(dense_gathered == Approx(psi - routed));
  }
  SECTION("without it: all-reduces of the whole gradients, nothing gathered, the optimizer states whole") {
    config.plan.factors = {1, 1, 1};
    const Program program = compile(config);
    const auto calls = calls_of(program, 0);
    REQUIRE(calls.at({"expert_data_parallel", CollectiveOp::all_reduce}).second ==
            Approx(fp32 * layers_per_stage * experts_per_gpu));
    REQUIRE(calls.count({"expert_data_parallel", CollectiveOp::all_gather}) == 0);
    REQUIRE(calls.count({"data_parallel", CollectiveOp::all_gather}) == 0);
    const double stage_psi = program.program_of(0).resident_bytes[static_cast<std::size_t>(MemoryCategory::parameters)] / e;
    REQUIRE(program.program_of(0).resident_bytes[static_cast<std::size_t>(MemoryCategory::optimizer_states)] ==
            Approx(12 * stage_psi));
  }
  SECTION("experts over the whole stage: their gradients stay where they are") {
    test::require_expert_states_stay_put(compile(megatron_moe_step(p, d, d, MoeLayout::expert_data, m)));
  }
}

TEST_CASE("Megatron-LM MoE steps with expert parallelism run every op once, in order, with each call's GPUs together",
          "[moe][megatron][causality]") {
  struct Case {
    std::string what;
    StepConfig config;
  };
  std::vector<Case> cases = {
      {"1F1B, E+D", megatron_moe_step(2, 8, 4, MoeLayout::expert_data)},
      {"1F1B, D+E", megatron_moe_step(2, 8, 4, MoeLayout::data_expert)},
      {"experts over the whole stage", megatron_moe_step(2, 8, 8, MoeLayout::expert_data)},
      // The expert-parallel groups span the data x context GPUs.
      {"context parallel 2", megatron_moe_step(2, 4, 8, MoeLayout::expert_data, 4, 2)},
  };
  Case interleaved{"interleaved, 2 chunks a stage", megatron_moe_step(2, 8, 4, MoeLayout::expert_data)};
  interleaved.config.plan.model_parallel.virtual_stages = 2;
  cases.push_back(interleaved);
  Case serial{"no overlap, full recompute", megatron_moe_step(2, 8, 2, MoeLayout::expert_data)};
  apply_overlap_level(serial.config.plan, "none");
  serial.config.training.recompute = Recompute::full;
  cases.push_back(serial);
  cases.push_back({"tensor 2, experts over 4", megatron_moe_step(2, 4, 4, MoeLayout::expert_data, 4, 1, 2)});
  cases.push_back({"tensor 2, experts over the stage", megatron_moe_step(2, 4, 8, MoeLayout::data_expert, 4, 1, 2)});
  Case overlapped{"tensor 2, TP comm overlap, shared experts, all-gather dispatcher",
                  megatron_moe_step(2, 4, 2, MoeLayout::expert_data, 4, 1, 2)};
  overlapped.config.plan.model_parallel.tp_comm_overlap = true;
  overlapped.config.model.moe.shared_experts = 1;
  overlapped.config.model.moe.shared_expert_ffn_hidden = 512;
  overlapped.config.plan.experts.dispatcher = TokenDispatcher::all_gather;
  cases.push_back(overlapped);
  for (const Case& c : cases) {
    INFO(c.what);
    const Program program = compile(c.config);
    validate_program(program);
    test::require_consistent_step(program, test::pipeline_world());
  }
}

TEST_CASE("the all-gather dispatcher gathers the expert-parallel group's tokens and reduce-scatters them back",
          "[moe][kernels]") {
  const ModelSpec model = small_moe_model();
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 2;
  training.global_batch_sequences = 2;
  const double T = 1024, h = 512, f = 704, k = 2, e = 2;
  for (int ep : {2, 8}) {
    INFO("experts over " << ep);
    const std::vector<ModuleWork> gather = transformer_modules(model, training, {}, {ep, {}, 1.0, TokenDispatcher::all_gather});
    const std::vector<ModuleWork> exchange = transformer_modules(model, training, {}, {ep});
    const ModuleWork& experts = gather[3];
    REQUIRE(experts.name == "layer0.experts");
    // Forward: gather (dispatch) then reduce-scatter (combine); backward the reverse, each of all ep ranks' T tokens.
    std::vector<CollectiveOp> calls;
    for (const auto* list : {&experts.forward, &experts.backward}) {
      for (const KernelSpec& spec : *list) {
        if (!spec.call) continue;
        calls.push_back(spec.call->op);
        REQUIRE(spec.call->group == CallGroup::expert_parallel);
        REQUIRE(spec.call->bytes == e * ep * T * h);
      }
    }
    REQUIRE(calls == std::vector<CollectiveOp>{CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
                                               CollectiveOp::all_gather, CollectiveOp::reduce_scatter});
    // The experts do the same work whichever way their tokens come.
    const auto gemm_flops = [](const ModuleWork& work) {
      double flops = 0;
      for (const auto* list : {&work.forward, &work.backward}) {
        for (const KernelSpec& spec : *list) flops += spec.kernel == KernelClass::gemm && !spec.call ? spec.flops : 0;
      }
      return flops;
    };
    REQUIRE(gemm_flops(experts) == Approx(3 * 2 * T * k * 3 * h * f));
    REQUIRE(gemm_flops(experts) == gemm_flops(exchange[3]));
  }
  // Megatron-LM with the all-gather dispatcher: a consistent step.
  StepConfig config = megatron_moe_step(2, 8, 4, MoeLayout::expert_data);
  config.plan.experts.dispatcher = TokenDispatcher::all_gather;
  const Program program = compile(config);
  REQUIRE(program.description["experts"]["dispatcher"] == "all_gather");
  test::require_consistent_step(program, test::pipeline_world());
  // And ZeRO-3 with it.
  StepConfig zero3 = test::pipeline_step("zero3", 4, 16, 2);
  zero3.model = small_moe_model();
  zero3.plan.experts = {8, MoeLayout::data_expert, 1.0, TokenDispatcher::all_gather};
  test::require_consistent_step(compile(zero3), test::pipeline_world());
}

TEST_CASE("under tensor parallelism a MoE layer splits its shared experts, the router and the routed experts stay whole",
          "[moe][megatron][kernels]") {
  ModelSpec model = small_moe_model();
  model.moe.shared_experts = 2;
  model.moe.shared_expert_ffn_hidden = 512;
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 2;
  training.global_batch_sequences = 2;
  const double T = 1024, h = 512, f = 704, shared = 1024, E = 8, k = 2, e = 2, ep = 2;
  double whole_flops = 0;  // of one layer's MLP block, forward, on one GPU without tensor parallelism
  for (int t : {1, 2, 4}) {
    INFO("tensor " << t);
    ModelParallelism parallel;
    parallel.tensor = t;
    parallel.sequence_parallel = t > 1;
    const std::vector<ModuleWork> modules = transformer_modules(model, training, parallel, {2});
    const ModuleWork &mlp = modules[2], &experts = modules[3];
    REQUIRE(mlp.name == "layer0.mlp");
    // RMSNorm and router whole, the shared experts' 3 h (2 f_s) split.
    REQUIRE(mlp.parameters == h + h * E + 3 * h * shared / t);
    REQUIRE(experts.parameters == E / ep * 3 * h * f);
    double flops = 0;
    for (const ModuleWork* work : {&mlp, &experts}) {
      for (const KernelSpec& spec : work->forward) {
        if (spec.kernel == KernelClass::gemm && !spec.call) flops += spec.flops;
        if (!spec.call) continue;
        if (work == &experts) {
          // Each GPU dispatches its own T / t tokens' copies.
          REQUIRE(spec.call->group == CallGroup::expert_parallel);
          REQUIRE(spec.call->bytes == e * T / t * k * h);
        } else {
          // The shared experts' input gathered along the sequence, their output reduce-scattered.
          REQUIRE(spec.call->group == CallGroup::tensor_parallel);
          REQUIRE(spec.call->bytes == e * T * h);
        }
      }
    }
    // The router on T / t tokens, the shared experts' 1/t on all T, the
    // routed experts on the copies of T / t tokens: the layer's work split t ways.
    REQUIRE(flops == Approx((2 * T * h * E + 2 * T * 3 * h * shared + 2 * T * k * 3 * h * f) / t));
    if (t == 1) whole_flops = flops;
    REQUIRE(flops * t == Approx(whole_flops));
  }
}

TEST_CASE("Megatron-LM with tensor parallelism: experts over a stage's tensor x data GPUs, each expert whole",
          "[moe][megatron][groups]") {
  // Two stages of 2 x 4 GPUs: ranks 0-7 and 8-15, tensor rank fastest.
  const int p = 2, t = 2, d = 4, m = 4;
  const Program program = compile(megatron_moe_step(p, d, 4, MoeLayout::expert_data, m, 1, t));
  validate_program(program);
  using Groups = std::vector<std::vector<int>>;
  REQUIRE(sorted(test::communicator_named(program, "expert_parallel").groups) ==
          Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  REQUIRE(sorted(test::communicator_named(program, "expert_data_parallel").groups) ==
          Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  REQUIRE(sorted(test::communicator_named(program, "data_parallel").groups) ==
          Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}});
  // The distributed optimizer shards the experts over their 2 GPUs and the rest over 4.
  const ModelSpec model = small_moe_model();
  const double stage_experts = 2 * (8 / 4) * expert_parameters(model), e = 2, fp32 = 4;
  const auto calls = calls_of(program, 0);
  REQUIRE(calls.at({"expert_data_parallel", CollectiveOp::reduce_scatter}).second == Approx(fp32 * stage_experts));
  const auto& resident = program.program_of(0).resident_bytes;
  const double stage_psi = resident[static_cast<std::size_t>(MemoryCategory::parameters)] / e;
  REQUIRE(resident[static_cast<std::size_t>(MemoryCategory::optimizer_states)] ==
          Approx(12 * ((stage_psi - stage_experts) / d + stage_experts / 2)));
  REQUIRE(program.description["experts"]["factors"]["optimizer"] == 2);

  // Without expert parallelism each GPU holds all 8 experts, and their
  // gradients are reduced over the stage's 8 GPUs, not the data-parallel 4.
  const Program local = compile(megatron_moe_step(p, d, 1, MoeLayout::expert_data, m, 1, t));
  REQUIRE_THROWS(test::communicator_named(local, "expert_parallel"));
  REQUIRE(test::communicator_named(local, "expert_data_parallel").groups.front() ==
          std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(calls_of(local, 0).at({"expert_data_parallel", CollectiveOp::reduce_scatter}).second ==
          Approx(fp32 * 2 * 8 * expert_parameters(model)));
}

TEST_CASE("expert parallelism a Megatron-LM stage cannot take, or ZeroPP, is refused with the field",
          "[moe][megatron][errors]") {
  // 8 experts over 8 of a stage's 4 data-parallel GPUs.
  REQUIRE_THROWS_WITH(compile(megatron_moe_step(2, 4, 8, MoeLayout::expert_data)),
                      Catch::Contains("plan.json: experts.parallel: 8 does not divide the 4 GPUs of a pipeline stage"));
  REQUIRE_THROWS_WITH(estimate_step_memory(megatron_moe_step(2, 4, 8, MoeLayout::expert_data)),
                      Catch::Contains("experts.parallel"));
  nlohmann::json plan = load_json_file(resolve_preset("zero-pipeline-pp4", "workloads/plans", "plan"));
  plan["experts"] = {{"parallel", 8}};
  REQUIRE_THROWS_WITH(parse_plan(plan, "zpp.json"),
                      Catch::Contains("zpp.json: experts.parallel: expert parallelism is compiled for the "
                                      "data-parallel systems (zero, fsdp, mics, zeropp, amsp) and Megatron-LM"));
}
