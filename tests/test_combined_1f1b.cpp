// Megatron-Core's --overlap-moe-expert-parallel-comm (combined 1F1B): the
// schedule merges each steady-state forward with the backward after it, one
// forward more in the warm-up (combined_1f1b.py, schedules.py); a merged step
// writes the two passes layer by layer in schedule_layer_1f1b's order, the
// dispatch and combine nodes on the all-to-all's stream (combined_1f1b.h).
// Checked against that order worked out by hand from Megatron-Core's source,
// against every kernel written once, and against what overlap can and cannot
// do to a step: shorter than without it, never shorter than the GPU's work.
#include "pipeline_checks.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/compile/combined_1f1b.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/kernels/transformer_kernels.h"

#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

std::string pass_name(const std::optional<PipelinePass>& pass) {
  if (!pass) return "-";
  return (pass->forward() ? "F" : "B") + std::to_string(pass->micro_batch) + "." + std::to_string(pass->chunk);
}

std::vector<std::string> describe(const std::vector<CombinedStep>& steps) {
  std::vector<std::string> out;
  for (const CombinedStep& step : steps) out.push_back(pass_name(step.forward) + " " + pass_name(step.backward));
  return out;
}

// A small MoE model's modules under expert parallelism over 8 GPUs.
std::vector<ModuleWork> moe_modules(int layers) {
  TrainingConfig training;
  training.sequence_length = 512;
  training.flash_attention = true;
  return transformer_modules(test::small_moe_model(layers), training, {}, {8});
}

// "F layer0.experts permute..residual @a2a": the pass, the module, the
// entries (or "all" for a whole list, with "dgrad" / "wgrad" for a half),
// and whether its kernels run on the all-to-all's stream.
std::string describe(const std::vector<ModuleWork>& modules, const KernelRange& range) {
  const ModuleWork& work = modules[range.module];
  const auto& list = kernel_list(work, range.list);
  std::string text = std::string(range.forward_pass ? "F " : "B ") + work.name + " ";
  if (range.list == KernelListKind::recompute) text += "recompute ";
  if (range.entries.begin == 0 && range.entries.end == list.size()) {
    text += "all";
  } else {
    text += list[range.entries.begin].name;
    if (range.entries.end - range.entries.begin > 1) text += ".." + list[range.entries.end - 1].name;
  }
  if (range.entries.half == ListRange::Half::input_gradient) text += " dgrad";
  if (range.entries.half == ListRange::Half::weight_gradient) text += " wgrad";
  if (range.on_communication_stream) text += " @a2a";
  return text;
}

std::vector<std::string> describe(const std::vector<ModuleWork>& modules, const std::vector<KernelRange>& ranges) {
  std::vector<std::string> out;
  for (const KernelRange& range : ranges) out.push_back(describe(modules, range));
  return out;
}

// Every entry of every list the passes run lies in exactly one range (the
// two halves of a split backward count as one), calls never on a half that
// leaves them out.
void require_every_entry_once(const std::vector<ModuleWork>& modules, const CombinedOrder& order,
                              const std::vector<std::size_t>& forward, const std::vector<std::size_t>& backward) {
  std::map<std::tuple<bool, std::size_t, KernelListKind, std::size_t>, int> seen;
  for (const auto* ranges : {&order.before_sends, &order.after_sends}) {
    for (const KernelRange& range : *ranges) {
      const auto& list = kernel_list(modules[range.module], range.list);
      REQUIRE(range.entries.end <= list.size());
      for (std::size_t i = range.entries.begin; i < range.entries.end; ++i) {
        const bool weight = list[i].weight_gradient && !list[i].call;
        if (range.entries.half == ListRange::Half::input_gradient && weight) continue;
        if (range.entries.half == ListRange::Half::weight_gradient && !weight) continue;
        ++seen[{range.forward_pass, range.module, range.list, i}];
      }
    }
  }
  std::size_t expected = 0;
  for (std::size_t m : forward) {
    for (std::size_t i = 0; i < modules[m].forward.size(); ++i) {
      REQUIRE(seen[{true, m, KernelListKind::forward, i}] == 1);
      ++expected;
    }
  }
  for (std::size_t m : backward) {
    for (KernelListKind kind : {KernelListKind::recompute, KernelListKind::backward}) {
      for (std::size_t i = 0; i < kernel_list(modules[m], kind).size(); ++i) {
        REQUIRE(seen[{false, m, kind, i}] == 1);
        ++expected;
      }
    }
  }
  REQUIRE(seen.size() == expected);
}

// Megatron-LM on `pipeline` stages (v chunks each) of `data` GPUs, the
// small MoE model's experts over 8 of them, two layers a chunk, micro-batches
// of one 512-token sequence.
StepConfig moe_step(int pipeline, int chunks, int data, int micro_batches, bool overlap, bool delay = false) {
  StepConfig config = test::pipeline_step("megatron-tp4-pp4", 2 * pipeline * chunks, data, micro_batches);
  config.model = test::small_moe_model(2 * pipeline * chunks);
  ModelParallelism& mp = config.plan.model_parallel;
  mp.tensor = 1;
  mp.pipeline = pipeline;
  mp.virtual_stages = chunks;
  config.plan.experts = {8};
  config.plan.experts.overlap_expert_parallel_comm = overlap;
  config.plan.experts.delay_wgrad_compute = delay;
  return config;
}

double kernel_seconds(const Program& program, const workloads::Timeline& timeline, int rank) {
  double seconds = 0;
  const auto& ops = program.program_of(rank).ops;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::compute) continue;
    const auto& op = timeline.ops[static_cast<std::size_t>(rank)][i];
    seconds += seconds_from_picoseconds(op.end - op.start);
  }
  return seconds;
}

}  // namespace

TEST_CASE("without pipelining the combined 1F1B runs the first forward alone, then each forward with the backward "
          "before it",
          "[combined-1f1b][schedule]") {
  const auto steps = combined_1f1b_schedule(1, 1, 4);
  REQUIRE(steps.size() == 1);
  REQUIRE(describe(steps[0]) == std::vector<std::string>{"F0.0 -", "F1.0 B0.0", "F2.0 B1.0", "F3.0 B2.0", "- B3.0"});
  REQUIRE(describe(combined_1f1b_schedule(1, 1, 1)[0]) == std::vector<std::string>{"F0.0 -", "- B0.0"});
}

TEST_CASE("with interleaving the combined 1F1B warms up with one forward more and merges the steady state",
          "[combined-1f1b][schedule]") {
  for (const auto& [p, v, m] : {std::tuple{2, 2, 4}, std::tuple{4, 2, 8}, std::tuple{2, 3, 6}, std::tuple{4, 2, 4}}) {
    INFO("p " << p << " v " << v << " m " << m);
    const auto combined = combined_1f1b_schedule(p, v, m);
    const auto plain = pipeline_schedule(p, v, m);
    for (int s = 0; s < p; ++s) {
      INFO("stage " << s);
      const auto& steps = combined[static_cast<std::size_t>(s)];
      // Megatron-Core's get_pp_rank_microbatches, plus one.
      const int warmup = std::min(m * v, (p - s - 1) * 2 + (v - 1) * p + 1);
      std::set<std::tuple<bool, int, int>> seen;
      std::vector<PipelinePass> forwards, backwards;
      for (std::size_t k = 0; k < steps.size(); ++k) {
        const CombinedStep& step = steps[k];
        const bool warming = static_cast<int>(k) < warmup;
        REQUIRE(bool(step.forward) == (warming || k < static_cast<std::size_t>(m * v)));
        REQUIRE(bool(step.backward) == !warming);
        if (step.forward) {
          REQUIRE(seen.insert({true, step.forward->micro_batch, step.forward->chunk}).second);
          forwards.push_back(*step.forward);
        }
        if (step.backward) {
          // A merged pair never holds the two passes of one micro-batch's chunk.
          if (step.forward) REQUIRE_FALSE((step.forward->micro_batch == step.backward->micro_batch &&
                                           step.forward->chunk == step.backward->chunk));
          REQUIRE(seen.count({true, step.backward->micro_batch, step.backward->chunk}) == 1);
          REQUIRE(seen.insert({false, step.backward->micro_batch, step.backward->chunk}).second);
          backwards.push_back(*step.backward);
        }
      }
      REQUIRE(seen.size() == static_cast<std::size_t>(2 * m * v));
      // The forwards and the backwards each in the plain schedule's order.
      std::vector<PipelinePass> plain_forwards, plain_backwards;
      for (const PipelinePass& pass : plain[static_cast<std::size_t>(s)]) {
        (pass.forward() ? plain_forwards : plain_backwards).push_back(pass);
      }
      REQUIRE(forwards == plain_forwards);
      REQUIRE(backwards == plain_backwards);
    }
  }
  REQUIRE_THROWS_WITH(combined_1f1b_schedule(2, 1, 4), Catch::Contains("needs the interleaved schedule"));
}

TEST_CASE("a merged step writes both passes in schedule_layer_1f1b's order, each kernel once",
          "[combined-1f1b][order]") {
  const std::vector<ModuleWork> modules = moe_modules(2);
  std::vector<std::size_t> all(modules.size());
  for (std::size_t m = 0; m < all.size(); ++m) all[m] = m;
  const std::string combine_backward = "B layer1.experts residual.backward..combine.backward.all_to_all @a2a";
  // Forward layer 0 paired with backward layer 1, then forward layer 1 with
  // backward layer 0; the combine(i - 1) and attn.backward(j + 1) of each
  // pair are the pair before's, the embedding's forward and the head's
  // backward for the first.
  const std::vector<std::string> expected = {
      "F embedding all",
      "B head all",
      combine_backward,
      "F layer0.attention all",
      "F layer0.mlp all",
      "F layer0.experts permute",
      "F layer0.experts dispatch.all_to_all",
      "B layer1.experts down.dgrad..gate_up.wgrad",
      "B layer1.experts dispatch.backward.all_to_all",
      "F layer0.experts gate_up..down",
      "F layer0.experts combine.all_to_all..residual @a2a",
      "B layer1.experts permute.backward",
      "B layer1.mlp all",
      "B layer1.attention all",
      "B layer0.experts residual.backward..combine.backward.all_to_all @a2a",
      "F layer1.attention all",
      "F layer1.mlp all",
      "F layer1.experts permute",
      "F layer1.experts dispatch.all_to_all",
      "B layer0.experts down.dgrad..gate_up.wgrad",
      "B layer0.experts dispatch.backward.all_to_all",
      "F layer1.experts gate_up..down",
      // The tail: the last backward attn node and the embedding's backward,
      // then the last combine and the head's forward.
      "B layer0.experts permute.backward",
      "B layer0.mlp all",
      "B layer0.attention all",
      "B embedding all",
      "F layer1.experts combine.all_to_all..residual @a2a",
      "F head all",
  };
  const CombinedOrder order = combined_1f1b_order(modules, 2, &all, &all, false);
  REQUIRE(describe(modules, order.before_sends) == expected);
  REQUIRE(order.after_sends.empty());
  require_every_entry_once(modules, order, all, all);

  SECTION("delayed weight gradients run where the dw nodes go, the last after the sends") {
    const CombinedOrder delayed = combined_1f1b_order(modules, 2, &all, &all, true);
    const std::vector<std::string> described = describe(modules, delayed.before_sends);
    const auto at = [&](const std::string& text) {
      const auto it = std::find(described.begin(), described.end(), text);
      REQUIRE(it != described.end());
      return it - described.begin();
    };
    // mlp.dw after dispatch.backward, before the forward's mlp node.
    REQUIRE(at("B layer1.experts down.dgrad..gate_up.wgrad wgrad") ==
            at("B layer1.experts dispatch.backward.all_to_all") + 1);
    REQUIRE(at("F layer0.experts gate_up..down") == at("B layer1.experts down.dgrad..gate_up.wgrad wgrad") + 1);
    // attn.dw of layer 1 after the next combine.backward, before attn(1).
    REQUIRE(at("B layer1.attention all wgrad") > at("B layer0.experts residual.backward..combine.backward.all_to_all @a2a"));
    REQUIRE(at("B layer1.attention all wgrad") < at("F layer1.attention all"));
    // Layer 0's attn.dw is the one left for after the pipeline sends (the
    // permutation's backward has no weight gradient).
    REQUIRE(describe(modules, delayed.after_sends) ==
            std::vector<std::string>{"B layer0.mlp all wgrad", "B layer0.attention all wgrad"});
    require_every_entry_once(modules, delayed, all, all);
  }
  SECTION("a lone pass runs its layers in order, each node's kernels once") {
    const CombinedOrder forward = combined_1f1b_order(modules, 2, &all, nullptr, true);
    REQUIRE(describe(modules, forward.before_sends).front() == "F embedding all");
    REQUIRE(describe(modules, forward.before_sends).back() == "F head all");
    require_every_entry_once(modules, forward, all, {});
    const CombinedOrder backward = combined_1f1b_order(modules, 2, nullptr, &all, true);
    REQUIRE(describe(modules, backward.before_sends).front() == "B head all");
    REQUIRE(describe(modules, backward.before_sends).back() == "B embedding all");
    REQUIRE(backward.after_sends.empty());  // no pair left a dw pending
    require_every_entry_once(modules, backward, {}, all);
  }
}

TEST_CASE("the combined 1F1B hides all-to-alls behind the other micro-batch's compute, never below the GPU's work",
          "[combined-1f1b][step]") {
  // Without pipelining on 16 GPUs, and on 2 stages of 2 chunks over two
  // nodes; each with its experts over 8 GPUs.
  for (const auto& [p, v, d] : {std::tuple{1, 1, 16}, std::tuple{2, 2, 8}}) {
    INFO("p " << p << " v " << v);
    const Program plain = compile(moe_step(p, v, d, 4, false));
    for (bool delay : {false, true}) {
      INFO("delay_wgrad_compute " << delay);
      const Program merged = compile(moe_step(p, v, d, 4, true, delay));
      REQUIRE(merged.description["overlap_expert_parallel_comm"] == true);
      test::require_consistent_step(merged, test::pipeline_world());
      // The all-to-all's stream runs the combine nodes' kernels besides the calls.
      const auto a2a = std::find(merged.streams.begin(), merged.streams.end(), "expert_all_to_all");
      REQUIRE(a2a != merged.streams.end());
      std::set<std::string> kernels;
      for (const Op& op : merged.program_of(0).ops) {
        if (op.stream != a2a - merged.streams.begin()) continue;
        if (op.kind == OpKind::collective) {
          REQUIRE(op.collective == CollectiveOp::all_to_all);
          continue;
        }
        kernels.insert(std::string(op.name.substr(op.name.rfind("experts.") + 8)));
      }
      REQUIRE(kernels == std::set<std::string>{"unpermute", "residual", "residual.backward", "unpermute.backward"});
      // The same kernels, all written once: as many compute ops.
      const auto compute_ops = [](const Program& program) {
        return std::count_if(program.program_of(0).ops.begin(), program.program_of(0).ops.end(),
                             [](const Op& op) { return op.kind == OpKind::compute; });
      };
      REQUIRE(compute_ops(merged) == compute_ops(plain));

      const workloads::Timeline a = test::simulate_on(plain, test::pipeline_world(), sim::NetworkMode::analytical);
      const workloads::Timeline b = test::simulate_on(merged, test::pipeline_world(), sim::NetworkMode::analytical);
      REQUIRE(b.step_time < a.step_time);
      // One GPU does one GPU's work: its kernels, alone, took no longer.
      for (int rank : {0, merged.ranks - 1}) {
        REQUIRE(seconds_from_picoseconds(b.step_time) >= kernel_seconds(plain, a, rank));
      }
    }
  }
}

TEST_CASE("a combined step holds one micro-batch's activations more", "[combined-1f1b][memory]") {
  // Without pipelining 1F1B holds one micro-batch at a time; the combined
  // 1F1B holds the next one's forward while the last one's backward runs.
  // On top of both, the loss's largest working set (no recompute here).
  const StepConfig config = moe_step(1, 1, 16, 4, false);
  const auto before = estimate_stage_memory(config);
  const auto after = estimate_stage_memory(moe_step(1, 1, 16, 4, true));
  const workloads::LossWorkingBytes loss = workloads::head_working_bytes_per_token(config.model, config.training);
  const double working = static_cast<double>(config.training.tokens_per_micro_batch()) * std::max(loss.forward_total(), loss.backward_total());
  REQUIRE(working > 0);
  REQUIRE(before[0].activations > working);
  REQUIRE(after[0].activations - working == Approx(2 * (before[0].activations - working)));
  REQUIRE(after[0].parameters == before[0].parameters);
}

TEST_CASE("the plan field and the launch flags are read, and refused where Megatron-Core refuses them",
          "[combined-1f1b][plan][megatron-args]") {
  nlohmann::json plan = load_json_file(resolve_preset("megatron-tp8-pp8-interleaved", "workloads/plans", "plan"));
  plan["experts"] = {{"parallel", 8}, {"overlap_expert_parallel_comm", true}, {"delay_wgrad_compute", true}};
  const Plan parsed = parse_plan(plan, "p.json");
  REQUIRE(parsed.experts.overlap_expert_parallel_comm);
  REQUIRE(parsed.experts.delay_wgrad_compute);
  const auto refused = [&](nlohmann::json changed, const std::string& message) {
    REQUIRE_THROWS_WITH(parse_plan(changed, "p.json"), Catch::Contains(message));
  };
  nlohmann::json changed = plan;
  changed["experts"]["dispatcher"] = "all_gather";
  refused(changed, "p.json: experts.overlap_expert_parallel_comm: works with the all_to_all dispatcher only");
  changed = plan;
  changed["experts"]["parallel"] = 1;
  refused(changed, "p.json: experts.overlap_expert_parallel_comm: overlaps the expert-parallel all-to-alls: needs "
                   "experts.parallel > 1");
  changed = plan;
  changed["experts"]["overlap_expert_parallel_comm"] = false;
  refused(changed, "p.json: experts.delay_wgrad_compute: delays weight gradients for the combined 1F1B");
  changed = load_json_file(resolve_preset("megatron-tp4-pp4", "workloads/plans", "plan"));
  changed["experts"] = plan["experts"];
  refused(changed, "p.json: experts.overlap_expert_parallel_comm: with pipeline stages needs the interleaved schedule");
  changed = load_json_file(resolve_preset("zero3", "workloads/plans", "plan"));
  changed["experts"] = plan["experts"];
  refused(changed, "p.json: experts.overlap_expert_parallel_comm: is Megatron-Core's --overlap-moe-expert-parallel-comm");
  // Full recompute, which the training config sets.
  StepConfig config = moe_step(1, 1, 16, 4, true);
  config.training.recompute = Recompute::full;
  REQUIRE_THROWS_WITH(compile(config),
                      Catch::Contains("training.json: recompute: full recompute cannot run with the plan's "
                                      "experts.overlap_expert_parallel_comm"));

  const TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
  const auto import = [&](const std::string& flags) {
    return parse_megatron_args("--micro-batch-size 1 --bf16 --expert-model-parallel-size 8 "
                               "--moe-token-dispatcher-type alltoall " + flags,
                               "args.sh", load_model("mixtral-8x7b"), training, 16, 8);
  };
  const MegatronJob job = import("--overlap-moe-expert-parallel-comm --delay-wgrad-compute");
  REQUIRE(job.plan.experts.overlap_expert_parallel_comm);
  REQUIRE(job.plan.experts.delay_wgrad_compute);
  REQUIRE_THROWS_WITH(import("--delay-wgrad-compute"),
                      Catch::Contains("args.sh: --delay-wgrad-compute (line 1): needs --overlap-moe-expert-parallel-comm"));
  REQUIRE_THROWS_WITH(import("--overlap-moe-expert-parallel-comm --pipeline-model-parallel-size 2"),
                      Catch::Contains("--overlap-moe-expert-parallel-comm (line 1): with --pipeline-model-parallel-size "
                                      "> 1 needs the interleaved schedule"));
  REQUIRE_THROWS_WITH(import("--overlap-moe-expert-parallel-comm --recompute-granularity full --recompute-method uniform"),
                      Catch::Contains("cannot run with --recompute-granularity full"));
}
