// Megatron-Core's --moe-shared-expert-overlap: the shared experts run as a
// chain on a compute stream of their own beside the routed experts' dispatch
// (moe_kernels.h), and kernels running at once share the GPU
// (step_simulator.h). Checked against the same layer run in line: the same
// work, one sequence-parallel gather fewer, a step no longer than before on
// one GPU with nothing to wait for (the GPU does the same work either way),
// and shorter where the all-to-alls leave the GPU idle.
#include "pipeline_checks.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// The small MoE model with two shared experts of width 512 beside its eight
// routed ones.
ModelSpec shared_moe_model(int layers) {
  ModelSpec model = test::small_moe_model(layers);
  model.moe.shared_experts = 2;
  model.moe.shared_expert_ffn_hidden = 512;
  return model;
}

bool is_shared(const KernelSpec& spec) { return spec.name.rfind("shared.", 0) == 0; }

struct Work {
  double gemm_flops = 0, other_bytes = 0;
};

// The kernels' GEMM FLOPs and other bytes over `lists`, calls left out.
Work work_of(std::initializer_list<const std::vector<KernelSpec>*> lists) {
  Work work;
  for (const auto* list : lists) {
    for (const KernelSpec& spec : *list) {
      if (spec.call) continue;
      if (spec.kernel == KernelClass::gemm) {
        work.gemm_flops += spec.flops;
      } else {
        work.other_bytes += spec.hbm_bytes;
      }
    }
  }
  return work;
}

std::vector<CollectiveOp> tensor_calls(const std::vector<KernelSpec>& list, double bytes) {
  std::vector<CollectiveOp> calls;
  for (const KernelSpec& spec : list) {
    if (!spec.call || spec.call->group != CallGroup::tensor_parallel) continue;
    REQUIRE(spec.call->bytes == bytes);
    calls.push_back(spec.call->op);
  }
  return calls;
}

// Megatron-LM on `pipeline` stages of `tensor` x `data` GPUs, the experts
// over `expert_parallel` of them, micro-batches of one 512-token sequence.
StepConfig megatron_shared_step(int pipeline, int tensor, int data, int expert_parallel, bool overlap) {
  StepConfig config = test::pipeline_step("megatron-tp4-pp4", 2 * pipeline, data, 4);
  config.model = shared_moe_model(2 * pipeline);
  ModelParallelism& mp = config.plan.model_parallel;
  mp.tensor = tensor;
  mp.sequence_parallel = tensor > 1;
  mp.pipeline = pipeline;
  config.plan.experts = {expert_parallel};
  config.plan.experts.shared_expert_overlap = overlap;
  return config;
}

workloads::Timeline simulate(const Program& program) {
  return test::simulate_on(program, test::pipeline_world(), sim::NetworkMode::analytical);
}

}  // namespace

TEST_CASE("overlapped shared experts are a side-stream chain in the experts' module doing the same work",
          "[moe][shared-overlap][kernels]") {
  const ModelSpec model = shared_moe_model(1);
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 2;
  training.global_batch_sequences = 2;
  const double T = 1024, h = 512, e = 2;
  for (int t : {1, 2, 4}) {
    INFO("tensor " << t);
    ModelParallelism parallel;
    parallel.tensor = t;
    parallel.sequence_parallel = t > 1;
    ExpertParallelism overlap{2};
    overlap.shared_expert_overlap = true;
    const std::vector<ModuleWork> in_line = transformer_modules(model, training, parallel, {2});
    const std::vector<ModuleWork> beside = transformer_modules(model, training, parallel, overlap);
    const ModuleWork &mlp = beside[2], &experts = beside[3];
    REQUIRE(experts.name == "layer0.experts");
    // The router's module keeps none of the shared experts.
    for (const auto* list : {&mlp.forward, &mlp.backward}) {
      REQUIRE(std::none_of(list->begin(), list->end(), [](const KernelSpec& s) { return is_shared(s); }));
    }
    // In the experts' module the shared experts, and only they, are on the
    // side stream: forward, forked before the permutation and joined by the
    // residual add; backward, forked after the residual's gradient and joined
    // by the permutation's gradient, the module's last kernel.
    for (const auto* list : {&experts.forward, &experts.backward}) {
      for (const KernelSpec& spec : *list) {
        INFO(spec.name);
        REQUIRE(spec.on_side_stream == is_shared(spec));
      }
      REQUIRE(std::count_if(list->begin(), list->end(), [](const KernelSpec& s) { return s.joins_side_stream; }) == 1);
    }
    REQUIRE(experts.forward.front().on_side_stream);
    REQUIRE(std::find_if(experts.forward.begin(), experts.forward.end(), [](const KernelSpec& s) {
              return s.joins_side_stream;
            })->name == "residual");
    REQUIRE(experts.backward.front().name == "residual.backward");
    REQUIRE(experts.backward.at(1).on_side_stream);
    REQUIRE(experts.backward.back().name == "permute.backward");
    REQUIRE(experts.backward.back().joins_side_stream);

    // The same GEMMs and element-wise passes as in line, forward and backward.
    const Work forward = work_of({&mlp.forward, &experts.forward});
    const Work forward_in_line = work_of({&in_line[2].forward, &in_line[3].forward});
    REQUIRE(forward.gemm_flops == Approx(forward_in_line.gemm_flops).epsilon(1e-12));
    REQUIRE(forward.other_bytes == Approx(forward_in_line.other_bytes).epsilon(1e-12));
    const Work backward = work_of({&mlp.backward, &experts.backward});
    const Work backward_in_line = work_of({&in_line[2].backward, &in_line[3].backward});
    REQUIRE(backward.gemm_flops == Approx(backward_in_line.gemm_flops).epsilon(1e-12));
    REQUIRE(backward.other_bytes == Approx(backward_in_line.other_bytes).epsilon(1e-12));

    // The module's own sequence-parallel calls, each of all T tokens: the
    // input gathered and the output reduce-scattered, backward the reverse.
    // In line, the first linear gathers its input again for its weight
    // gradient; beside, it kept the gathered input.
    using C = CollectiveOp;
    const double bytes = e * T * h;
    if (t == 1) {
      REQUIRE(tensor_calls(experts.forward, bytes).empty());
      REQUIRE(tensor_calls(experts.backward, bytes).empty());
      continue;
    }
    REQUIRE(tensor_calls(experts.forward, bytes) == std::vector<C>{C::all_gather, C::reduce_scatter});
    REQUIRE(tensor_calls(experts.backward, bytes) == std::vector<C>{C::all_gather, C::reduce_scatter});
    REQUIRE(tensor_calls(in_line[2].backward, bytes) == std::vector<C>{C::all_gather, C::all_gather, C::reduce_scatter});
    // ...which it keeps whole along the sequence: e h per token beyond its
    // 1 / t share.
    const double extra = layer_activation_bytes_per_token(model, training, 0, parallel, overlap) -
                         layer_activation_bytes_per_token(model, training, 0, parallel, {2});
    REQUIRE(extra == Approx(e * h * (1 - 1.0 / t)));
  }
}

TEST_CASE("on one GPU with nothing to wait for, shared experts beside the routed ones take the same step",
          "[moe][shared-overlap][step]") {
  // No call, so the GPU never idles: run in line or on two streams sharing
  // it, the same kernels take the same time in all.
  const Program in_line = compile(megatron_shared_step(1, 1, 1, 1, false));
  const Program beside = compile(megatron_shared_step(1, 1, 1, 1, true));
  REQUIRE(beside.description["shared_expert_overlap"] == true);
  const auto side = std::find(beside.streams.begin(), beside.streams.end(), "shared_experts");
  REQUIRE(side != beside.streams.end());
  const int side_stream = static_cast<int>(side - beside.streams.begin());
  std::size_t on_side = 0;
  for (const Op& op : beside.program_of(0).ops) {
    if (op.stream != side_stream) continue;
    REQUIRE(op.kind == OpKind::compute);
    REQUIRE(op.name.find(".shared.") != std::string::npos);
    ++on_side;
  }
  // Two layers, 4 micro-batches: forward (gate_up, swiglu, down) and
  // backward (five kernels) of each.
  REQUIRE(on_side == 2 * 4 * (3 + 5));
  const workloads::Timeline a = simulate(in_line), b = simulate(beside);
  REQUIRE(workloads::timeline_violations(beside, b).empty());
  REQUIRE(seconds_from_picoseconds(b.step_time) == Approx(seconds_from_picoseconds(a.step_time)).epsilon(1e-9));
}

TEST_CASE("shared experts beside the dispatch hide behind the all-to-alls, at most all of their time",
          "[moe][shared-overlap][step]") {
  // Two stages of 2 x 4 GPUs on two nodes, the experts over a stage's 8 GPUs.
  const Program in_line = compile(megatron_shared_step(2, 2, 4, 8, false));
  const Program beside = compile(megatron_shared_step(2, 2, 4, 8, true));
  const workloads::Timeline a = simulate(in_line), b = simulate(beside);
  // What rank 0 spent on the shared experts in line, kernels and calls.
  double shared_seconds = 0;
  const auto& ops = in_line.program_of(0).ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].name.find(".shared.") == std::string::npos) continue;
    shared_seconds += seconds_from_picoseconds(a.ops[0][i].end - a.ops[0][i].start);
  }
  REQUIRE(shared_seconds > 0);
  const double step_in_line = seconds_from_picoseconds(a.step_time), step_beside = seconds_from_picoseconds(b.step_time);
  REQUIRE(step_beside < step_in_line);
  REQUIRE(step_beside >= step_in_line - shared_seconds);

  // Consistent on both networks, also with full recompute (the chain runs
  // again in the recomputed forward) and with TP communication overlap.
  StepConfig recomputed = megatron_shared_step(2, 2, 4, 4, true);
  recomputed.training.recompute = Recompute::full;
  recomputed.plan.model_parallel.tp_comm_overlap = true;
  test::require_consistent_step(beside, test::pipeline_world());
  test::require_consistent_step(compile(recomputed), test::pipeline_world());
}

TEST_CASE("a launch's --moe-shared-expert-overlap is read, and refused where Megatron-Core refuses it",
          "[moe][shared-overlap][megatron-args]") {
  const TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
  const auto import = [&](const std::string& flags, const std::string& model) {
    return parse_megatron_args("--micro-batch-size 1 --bf16 --expert-model-parallel-size 8 " + flags, "args.sh",
                               load_model(model), training, 16, 8);
  };
  const MegatronJob job = import("--moe-token-dispatcher-type alltoall --moe-shared-expert-overlap", "deepseek-v3");
  REQUIRE(job.plan.experts.shared_expert_overlap);
  REQUIRE(job.notes.empty());
  // Mixtral has no shared experts: nothing to overlap.
  const MegatronJob mixtral = import("--moe-token-dispatcher-type alltoall --moe-shared-expert-overlap", "mixtral-8x7b");
  REQUIRE_FALSE(mixtral.plan.experts.shared_expert_overlap);
  REQUIRE_THAT(mixtral.notes.at(0), Catch::Contains("model mixtral-8x7b has no shared experts, nothing to overlap"));
  REQUIRE_THROWS_WITH(import("--moe-shared-expert-overlap", "deepseek-v3"),
                      Catch::Contains("args.sh: --moe-shared-expert-overlap (line 1): works with "
                                      "--moe-token-dispatcher-type alltoall only (Megatron-Core raises it with "
                                      "allgather)"));
  // A plan file says the same, for Megatron-LM only.
  nlohmann::json plan = load_json_file(resolve_preset("megatron-tp4-pp4", "workloads/plans", "plan"));
  plan["experts"] = {{"parallel", 8}, {"shared_expert_overlap", true}};
  REQUIRE(parse_plan(plan, "p.json").experts.shared_expert_overlap);
  plan["experts"]["dispatcher"] = "all_gather";
  REQUIRE_THROWS_WITH(parse_plan(plan, "p.json"),
                      Catch::Contains("p.json: experts.shared_expert_overlap: works with the all_to_all dispatcher"));
  plan = load_json_file(resolve_preset("zero3", "workloads/plans", "plan"));
  plan["experts"] = {{"parallel", 8}, {"shared_expert_overlap", true}};
  REQUIRE_THROWS_WITH(parse_plan(plan, "p.json"),
                      Catch::Contains("p.json: experts.shared_expert_overlap: is Megatron-Core's"));
}
