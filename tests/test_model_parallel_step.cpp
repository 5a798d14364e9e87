// Megatron-LM steps (tensor, pipeline and data parallelism) against the
// published counts: Megatron's two all-reduces per block per pass
// (Shoeybi et al. 2019), sequence parallelism moving the same bytes as an
// all-reduce plus the inputs gathered again for the weight gradients
// (Korthikanti et al. 2022), activations split t ways, every GEMM's FLOPs
// conserved across the group, 1F1B's p - s micro-batches in flight, and the
// simulated step consistent (every op once, after its dependencies).
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/step/step_simulator.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/ir/timeline_check.h"
#include "workloads/memory/activation_memory.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <tuple>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

StepConfig megatron(int tensor, int pipeline, int data, int micro_batches, bool sequence_parallel = false,
                    int virtual_stages = 1) {
  StepConfig config = test::pipeline_step("megatron-dp", virtual_stages > 1 ? 8 : 4, data, micro_batches);
  config.plan.model_parallel = {tensor, pipeline, virtual_stages, sequence_parallel};
  return config;
}

const test::World& world() { return test::pipeline_world(); }

double tensor_parallel_bytes_sent(const Program& program, int rank) {
  double sent = 0;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind != OpKind::collective || program.communicators[static_cast<std::size_t>(op.communicator)].name != "tensor_parallel") {
      continue;
    }
    const double t = program.communicators[static_cast<std::size_t>(op.communicator)].group_size();
    sent += (op.collective == CollectiveOp::all_reduce ? 2 : 1) * (t - 1) / t * op.bytes;
  }
  return sent;
}

double gemm_flops(const Program& program, int rank) {
  double flops = 0;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind == OpKind::compute && op.kernel != KernelClass::optimizer) flops += op.flops;
  }
  return flops;
}

}  // namespace

TEST_CASE("tensor parallelism all-reduces each block twice per pass, sequence parallelism moves the same bytes plus "
          "the re-gathered GEMM inputs and the norms' gradients",
          "[megatron][traffic]") {
  const int m = 3, L = 4;
  const double T = 512, h = 512, e = 2;
  for (int t : {2, 4, 8}) {
    INFO("t " << t);
    const Program plain = compile(megatron(t, 1, 1, m));
    validate_program(plain);
    const double share = 2.0 * (t - 1) / t;  // a ring all-reduce sends this much of its buffer
    // Per micro-batch: attention and MLP each all-reduce forward and
    // backward, the embedding forward, the LM head's input gradient
    // backward, and three fp32 values per token for the cross-entropy.
    const double expected = m * ((4.0 * L + 2) * share * T * h * e + 3 * share * 4 * T);
    for (int rank = 0; rank < t; ++rank) REQUIRE(tensor_parallel_bytes_sent(plain, rank) == Approx(expected).epsilon(1e-12));

    const Program sp = compile(megatron(t, 1, 1, m, true));
    validate_program(sp);
    // One all-gather per column-parallel GEMM (QKV, gate/up, LM head) again in backward.
    const double regathered = m * (2.0 * L + 1) * (t - 1.0) / t * T * h * e;
    // Once a step, the RMSNorm weights' fp32 gradients (2 per layer and the
    // final one), each GPU's a partial sum over its part of the sequence.
    const double norm_gradients = share * 4 * (2.0 * L + 1) * h;
    REQUIRE(tensor_parallel_bytes_sent(sp, 0) == Approx(expected + regathered + norm_gradients).epsilon(1e-12));
  }
}

TEST_CASE("tensor parallelism splits every GEMM's FLOPs and the parameters t ways, norms whole", "[megatron][compute]") {
  const Program whole = compile(megatron(1, 1, 1, 2));
  const double whole_gemm_flops = gemm_flops(whole, 0);
  const ModelSpec model = test::small_pipeline_model(4);
  const double psi = static_cast<double>(count_parameters(model).total());
  const double norms = (2.0 * model.layers + 1) * static_cast<double>(model.hidden);  // RMSNorm weights
  for (int t : {2, 4, 8}) {
    INFO("t " << t);
    const StepConfig config = megatron(t, 1, 1, 2);
    const ModelParallelPartition partition = partition_model(config);
    REQUIRE(partition.stage_parameters.front() * t - (t - 1) * norms == Approx(psi).epsilon(1e-12));
    // GEMM and attention FLOPs split exactly; element-wise work on whole
    // hidden states (norms, residuals) is repeated on every GPU.
    const Program program = compile(config);
    double split = 0, repeated_whole = 0, repeated_split = 0;
    for (const Op& op : program.programs.front().ops) {
      if (op.kind != OpKind::compute) continue;
      if (op.kernel == KernelClass::gemm || op.kernel == KernelClass::attention) split += op.flops;
    }
    for (const Op& op : whole.programs.front().ops) {
      if (op.kind == OpKind::compute && op.kernel == KernelClass::elementwise) repeated_whole += op.flops;
    }
    for (const Op& op : program.programs.front().ops) {
      if (op.kind == OpKind::compute && op.kernel == KernelClass::elementwise) repeated_split += op.flops;
    }
    double whole_split = 0;
    for (const Op& op : whole.programs.front().ops) {
      if (op.kind == OpKind::compute && (op.kernel == KernelClass::gemm || op.kernel == KernelClass::attention)) {
        whole_split += op.flops;
      }
    }
    REQUIRE(split * t == Approx(whole_split).epsilon(1e-12));
    REQUIRE(repeated_split < repeated_whole);
    REQUIRE(repeated_split > repeated_whole / t);
  }
  REQUIRE(whole_gemm_flops > 0);
}

TEST_CASE("activations per GPU: split t ways under sequence parallelism, all but the block inputs without",
          "[megatron][memory]") {
  const ModelSpec model = test::small_pipeline_model(4);
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 1;
  const double e = training.bytes_per_value, h = static_cast<double>(model.hidden);
  for (bool flash : {true, false}) {
    training.flash_attention = flash;
    const double whole = layer_activation_bytes_per_token(model, training, 0);
    for (int t : {2, 4, 8}) {
      INFO("t " << t << " flash " << flash);
      // Korthikanti et al. 2022, table 2: s b h (34 / t + 5 a s / (h t)) with sequence parallelism...
      REQUIRE(layer_activation_bytes_per_token(model, training, 0, {t, 1, 1, true}) == Approx(whole / t));
      // ...and s b h (10 + 24 / t + 5 a s / (h t)) without: the inputs of the two norms and two
      // first GEMMs stay whole (4 e h here, no dropout masks).
      REQUIRE(layer_activation_bytes_per_token(model, training, 0, {t, 1, 1, false}) ==
              Approx(4 * e * h + (whole - 4 * e * h) / t));
    }
  }
}

TEST_CASE("under 1F1B stage s holds p - s micro-batches of activations at its peak, as simulated and as estimated",
          "[megatron][pipeline][memory]") {
  const int p = 4, m = 8;
  const StepConfig config = megatron(2, p, 2, m);  // 16 GPUs
  const Program program = compile(config);
  validate_program(program);
  REQUIRE(program.programs.size() == static_cast<std::size_t>(p));
  const ModelParallelPartition partition = partition_model(config);
  const workloads::Timeline timeline = test::simulate_on(program, world(), sim::NetworkMode::analytical);
  REQUIRE_FALSE(timeline.out_of_memory);
  const std::vector<MemoryBreakdown> estimate = estimate_stage_memory(config);
  const ModelParallelLayout layout{2, 2, p};
  for (int s = 0; s < p; ++s) {
    INFO("stage " << s);
    double per_micro_batch = 0;
    for (std::size_t module : partition.chunks[static_cast<std::size_t>(s)].front()) {
      per_micro_batch += partition.modules[module].activation_bytes;
    }
    // The last stage also holds the loss's working set while it runs.
    const double working = test::largest_working_bytes(partition.modules, partition.chunks[static_cast<std::size_t>(s)]);
    REQUIRE((working > 0) == (s == p - 1));
    const double expected = (p - s) * per_micro_batch + working;
    const auto& peak = timeline.peak_memory[static_cast<std::size_t>(layout.rank(1, 1, s))];
    REQUIRE(peak.by_category[static_cast<std::size_t>(MemoryCategory::activations)] == Approx(expected));
    REQUIRE(estimate[static_cast<std::size_t>(s)].activations == Approx(expected));
    // Distributed optimizer, bf16 parameters with fp32 gradients: 2 + 4 + 12 / d bytes per parameter.
    const double psi = partition.stage_parameters[static_cast<std::size_t>(s)];
    REQUIRE(estimate[static_cast<std::size_t>(s)].model_states() == Approx((2 + 4 + 12.0 / 2) * psi));
    REQUIRE(peak.by_category[static_cast<std::size_t>(MemoryCategory::optimizer_states)] == Approx(12.0 / 2 * psi));
  }
}

TEST_CASE("a micro-batch group of N lets interleaving run m not a multiple of p, with (v - 1) N warm-up forwards",
          "[megatron][pipeline][memory]") {
  // 2 stages x 2 chunks, 3 micro-batches: refused in groups of p = 2, run in
  // one group of 3 (Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage).
  StepConfig config = megatron(1, 2, 8, 3, false, 2);  // 16 GPUs, 8 layers
  REQUIRE_THROWS_WITH(compile(config),
                      Catch::Contains("training.json: global_batch") && Catch::Contains("microbatch_group_size"));
  config.plan.model_parallel.microbatch_group_size = 3;
  const Program program = compile(config);
  validate_program(program);
  test::require_boundary_sends(program, config, 2.0 * 512 * 512);
  test::require_consistent_step(program, world());

  // Forwards in order: micro-batches 0-2 through chunk 0, then chunk 1.
  // Stage 0 warms up with (2 - 1) 2 + (2 - 1) 3 = 5 and runs the 6th before
  // its first backward: all three micro-batches of both chunks live. Stage 1
  // warms up with 3 (chunk 0's) and runs chunk 1's first forward before its
  // first backward: three of chunk 0, one of chunk 1.
  const ModelParallelPartition partition = partition_model(config);
  const auto chunk_bytes = [&](int stage, int chunk) {
    double bytes = 0;
    for (std::size_t module : partition.chunks[static_cast<std::size_t>(stage)][static_cast<std::size_t>(chunk)]) {
      bytes += partition.modules[module].activation_bytes;
    }
    return bytes;
  };
  // The last stage's chunk 1 ends in the loss, whose working set it holds
  // on top while the loss runs.
  const double working = test::largest_working_bytes(partition.modules, partition.chunks[1]);
  REQUIRE(working > 0);
  const std::vector<double> expected = {3 * chunk_bytes(0, 0) + 3 * chunk_bytes(0, 1),
                                        3 * chunk_bytes(1, 0) + chunk_bytes(1, 1) + working};
  const std::vector<MemoryBreakdown> estimate = estimate_stage_memory(config);
  const workloads::Timeline timeline = test::simulate_on(program, world(), sim::NetworkMode::analytical);
  const ModelParallelLayout layout{1, 8, 2};
  for (int s = 0; s < 2; ++s) {
    INFO("stage " << s);
    REQUIRE(estimate[static_cast<std::size_t>(s)].activations == Approx(expected[static_cast<std::size_t>(s)]));
    const auto& peak = timeline.peak_memory[static_cast<std::size_t>(layout.rank(0, 0, s))];
    REQUIRE(peak.by_category[static_cast<std::size_t>(MemoryCategory::activations)] ==
            Approx(expected[static_cast<std::size_t>(s)]));
  }

  // A group that leaves a short last one is the plan's fault.
  config = megatron(1, 2, 2, 11, false, 2);              // 11 micro-batches
  config.plan.model_parallel.microbatch_group_size = 5;  // 5, 5 and 1
  REQUIRE_THROWS_WITH(compile(config), Catch::Contains("plan.json: model_parallel.microbatch_group_size") &&
                                                Catch::Contains("last group of 1"));
  config.plan.model_parallel.microbatch_group_size = 4;  // 4, 4 and 3
  test::require_consistent_step(compile(config), world());
}

TEST_CASE("both of Megatron's rank orders number every (tp, data, pp) once and invert", "[megatron]") {
  for (const RankOrder order : {RankOrder::tp_cp_dp_pp, RankOrder::tp_cp_pp_dp}) {
    const ModelParallelLayout layout{2, 6, 4, 2, order};  // tensor 2, context 2 x data 3, pipeline 4
    std::vector<int> seen(static_cast<std::size_t>(layout.ranks()), 0);
    for (int pp = 0; pp < 4; ++pp) {
      for (int dp = 0; dp < 6; ++dp) {
        for (int tp = 0; tp < 2; ++tp) {
          const int rank = layout.rank(tp, dp, pp);
          REQUIRE(rank >= 0);
          REQUIRE(rank < 48);
          ++seen[static_cast<std::size_t>(rank)];
          REQUIRE(layout.tp(rank) == tp);
          REQUIRE(layout.dp(rank) == dp);
          REQUIRE(layout.pp(rank) == pp);
        }
      }
    }
    REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  }
}

TEST_CASE("rank order tp-cp-pp-dp keeps each pipeline on consecutive ranks and puts data parallelism outermost",
          "[megatron]") {
  // Tensor 2, data 4, pipeline 2 on two nodes of 8. Megatron's default
  // (rank = tp + 2 (dp + 4 pp)) puts stage 0 on node 0 and stage 1 on node 1:
  // the data-parallel groups stay in a node, the pipeline crosses. With
  // tp-cp-pp-dp (rank = tp + 2 (pp + 2 dp)) a pipeline is 4 consecutive ranks
  // inside a node and the data-parallel groups span both.
  StepConfig config = megatron(2, 2, 4, 4);
  const auto node = [](int rank) { return rank / 8; };
  for (const RankOrder order : {RankOrder::tp_cp_dp_pp, RankOrder::tp_cp_pp_dp}) {
    const bool data_outermost = order == RankOrder::tp_cp_pp_dp;
    INFO((data_outermost ? "tp-cp-pp-dp" : "tp-cp-dp-pp"));
    config.plan.model_parallel.rank_order = order;
    const Program program = compile(config);
    validate_program(program);
    const Communicator& data = test::communicator_named(program, "data_parallel");
    REQUIRE(data.group_of(0) == (data_outermost ? std::vector<int>{0, 4, 8, 12} : std::vector<int>{0, 2, 4, 6}));
    const Communicator& forward = test::communicator_named(program, "pipeline_forward0");
    REQUIRE(forward.group_of(0) == (data_outermost ? std::vector<int>{0, 2} : std::vector<int>{0, 8}));
    for (const auto& group : data.groups) {
      REQUIRE((node(group.front()) != node(group.back())) == data_outermost);
    }
    for (int rank = 0; rank < 16; ++rank) {
      REQUIRE(program.program_of_rank[static_cast<std::size_t>(rank)] == (data_outermost ? rank / 2 % 2 : rank / 8));
    }
    test::require_boundary_sends(program, config, 2.0 * 512 * 512);
    test::require_consistent_step(program, world());
  }

  // With context parallelism the context ranks stay next to the tensor
  // ones: tensor 2, context 2, data 2, pipeline 2 numbers rank = tp + 2 (cp
  // + 2 (pp + 2 dp)).
  config = megatron(2, 2, 2, 4);
  config.plan.model_parallel.context = 2;
  config.plan.model_parallel.rank_order = RankOrder::tp_cp_pp_dp;
  const Program program = compile(config);
  REQUIRE(program.ranks == 16);
  REQUIRE(test::communicator_named(program, "context_parallel").group_of(0) == std::vector<int>{0, 2});
  REQUIRE(test::communicator_named(program, "data_parallel").group_of(0) == std::vector<int>{0, 2, 8, 10});
  test::require_consistent_step(program, world());
}

TEST_CASE("a Megatron step runs every op once, after its dependencies, sends meeting their receives",
          "[megatron][causality]") {
  StepConfig recompute = megatron(2, 2, 4, 4, true);
  recompute.training.recompute = Recompute::full;
  for (const StepConfig& config : {megatron(2, 2, 4, 4), megatron(2, 4, 2, 8, true, 2), megatron(8, 2, 1, 2, true),
                                   megatron(1, 4, 4, 4), megatron(4, 1, 4, 2), recompute}) {
    const ModelParallelism& mp = config.plan.model_parallel;
    INFO("t " << mp.tensor << " p " << mp.pipeline << " v " << mp.virtual_stages << " d " << config.data_parallel);
    const Program program = compile(config);
    validate_program(program);
    REQUIRE(program.ranks == 16);
    // Sends: one 512-token hidden state a boundary, split t ways under sequence parallelism.
    test::require_boundary_sends(program, config, 2.0 * 512 * 512 / (mp.sequence_parallel ? mp.tensor : 1));
    // Whatever a stage allocates in the step it frees (activations, rebuilt layers).
    for (const RankProgram& stage : program.programs) {
      double allocated = 0, freed = 0;
      for (const Op& op : stage.ops) {
        if (op.kind == OpKind::memory) (op.bytes > 0 ? allocated : freed) += op.bytes;
      }
      REQUIRE(allocated > 0);
      REQUIRE(freed == Approx(-allocated));
    }
    test::require_consistent_step(program, world());
    // The Program survives its JSON form (ranks outside a pipeline pair included).
    const Program back = program_from_json(program_to_json(program), "program.json");
    REQUIRE(back.total_ops() == program.total_ops());
    REQUIRE(back.communicators.size() == program.communicators.size());
  }
}

TEST_CASE("without gradient-accumulation fusion every micro-batch adds its gradients into main_grad",
          "[megatron][compute]") {
  // bf16: the micro-batch's gradient in bf16 (2 bytes) read, the fp32 main
  // gradient (4 bytes) read and written: 10 bytes per parameter of the stage.
  for (const auto& [t, p, v] : std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {2, 2, 1}, {1, 4, 2}}) {
    INFO("t " << t << " p " << p << " v " << v);
    StepConfig config = megatron(t, p, 16 / (t * p), 4, false, v);
    const Program fused = compile(config);
    config.plan.model_parallel.gradient_accumulation_fusion = false;
    const Program unfused = compile(config);
    const ModelParallelPartition partition = partition_model(config);
    REQUIRE(partition.gradient_bytes_per_value == 4);
    for (int stage = 0; stage < p; ++stage) {
      const auto added = [stage](const Program& program) {
        double bytes = 0;
        for (const Op& op : program.programs[static_cast<std::size_t>(stage)].ops) {
          if (op.name.size() > 13 && op.name.compare(op.name.size() - 13, 13, "main_grad.add") == 0) bytes += op.hbm_bytes;
        }
        return bytes;
      };
      REQUIRE(added(fused) == 0);
      REQUIRE(added(unfused) == Approx(4 * 10 * partition.stage_parameters[static_cast<std::size_t>(stage)]).epsilon(1e-12));
    }
    validate_program(unfused);
    test::require_consistent_step(unfused, world());
    REQUIRE(unfused.description.at("gradient_accumulation_fusion") == false);
  }
}

TEST_CASE("scatter/gather sends each tensor-parallel rank's 1/t of a pipeline tensor and all-gathers it on arrival",
          "[megatron][pipeline]") {
  const double hidden_state = 2.0 * 512 * 512;  // one 512-token micro-batch of h 512 in bf16
  const auto gathers = [](const Program& program, int stage) {
    int count = 0;
    double bytes = 0;
    for (const Op& op : program.programs[static_cast<std::size_t>(stage)].ops) {
      if (op.kind != OpKind::collective || op.collective != CollectiveOp::all_gather ||
          op.name.find("receive_") == std::string_view::npos) {
        continue;
      }
      ++count;
      bytes += op.bytes;
      REQUIRE(program.communicators[static_cast<std::size_t>(op.communicator)].name == "tensor_parallel");
    }
    return std::pair(count, bytes);
  };
  for (const auto& [t, p, v] : std::vector<std::tuple<int, int, int>>{{2, 2, 1}, {4, 2, 2}}) {
    INFO("t " << t << " p " << p << " v " << v);
    StepConfig config = megatron(t, p, 16 / (t * p), 4, false, v);
    config.plan.model_parallel.scatter_gather_pipeline_tensors = true;
    const Program program = compile(config);
    test::require_boundary_sends(program, config, hidden_state / t);
    // Every stage receives (p v - 1) / p boundaries' worth each way: with
    // p = 2, v chunks, stage 0 takes v gradients and v - 1 activations per
    // micro-batch, stage 1 the reverse; each is gathered whole.
    for (int stage = 0; stage < p; ++stage) {
      const auto [count, bytes] = gathers(program, stage);
      REQUIRE(count == 4 * (2 * v - 1));
      REQUIRE(bytes == Approx(count * hidden_state));
    }
    validate_program(program);
    test::require_consistent_step(program, world());
    REQUIRE(program.description.at("scatter_gather_pipeline_tensors") == true);
  }
  SECTION("under sequence parallelism the tensor is split already: nothing changes") {
    StepConfig config = megatron(2, 2, 4, 4, true);
    config.plan.model_parallel.scatter_gather_pipeline_tensors = true;
    const Program program = compile(config);
    test::require_boundary_sends(program, config, hidden_state / 2);
    REQUIRE(gathers(program, 0).first == 0);
    REQUIRE_FALSE(program.description.contains("scatter_gather_pipeline_tensors"));
  }
}

TEST_CASE("Megatron plans that cannot run are refused naming the file and the field", "[megatron][input]") {
  StepConfig layers = megatron(1, 3, 1, 3);  // 4 layers over 3 stages
  REQUIRE_THROWS_WITH(compile(layers), Catch::Contains("plan.json: model_parallel") && Catch::Contains("4 layers"));
  StepConfig interleaved = megatron(1, 2, 1, 3, false, 2);  // 3 micro-batches over 2 stages
  REQUIRE_THROWS_WITH(compile(interleaved), Catch::Contains("training.json: global_batch"));
  StepConfig heads = megatron(16, 1, 1, 1);
  heads.gpus_per_node = 16;
  REQUIRE_THROWS_WITH(compile(heads), Catch::Contains("heads (8) must divide over the 16"));
  // Sequence parallelism splits the sequence over the tensor-parallel group;
  // without it, and without context parallelism, any length runs.
  StepConfig odd = megatron(4, 1, 1, 1, true);
  odd.training.sequence_length += 2;
  REQUIRE_THROWS_WITH(compile(odd), Catch::Contains("sequence_length (" + std::to_string(odd.training.sequence_length) +
                                                         ") must divide over the 4 sequence-parallel GPUs"));
  odd.plan.model_parallel.sequence_parallel = false;
  odd.training.sequence_length += 1;
  REQUIRE(compile(odd).ranks == 4);
  REQUIRE_THROWS_WITH(data_parallel_size(load_plan("megatron-tp8-sp"), 16, 4, "plan.json"),
                      Catch::Contains("plan.json: model_parallel.tensor"));
  REQUIRE_THROWS_WITH(data_parallel_size(load_plan("megatron-tp4-pp4"), 24, 8, "plan.json"),
                      Catch::Contains("does not divide the 24 GPUs"));
  nlohmann::json document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-dp.json"));
  document["factors"]["parameters"] = "all";
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: factors") && Catch::Contains("Megatron"));
  document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/zero3.json"));
  document["model_parallel"] = {{"tensor", 2}, {"pipeline", 1}};
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel"));
  document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-dp.json"));
  document["model_parallel"]["gradient_accumulation_fusion"] = false;
  REQUIRE_FALSE(parse_plan(document, "p.json").model_parallel.gradient_accumulation_fusion);
  document["model_parallel"]["scatter_gather_pipeline_tensors"] = true;
  REQUIRE(parse_plan(document, "p.json").model_parallel.scatter_gather_pipeline_tensors);
  document["model_parallel"]["gradient_accumulation_fusion"] = "no";
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      Catch::Contains("p.json: model_parallel.gradient_accumulation_fusion: must be true or false"));
  document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/zero-pipeline-pp4.json"));
  document["model_parallel"]["gradient_accumulation_fusion"] = false;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      "p.json: model_parallel.gradient_accumulation_fusion: is Megatron-LM's (system \"megatron\")");
  document["model_parallel"].erase("gradient_accumulation_fusion");
  document["model_parallel"]["scatter_gather_pipeline_tensors"] = true;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      "p.json: model_parallel.scatter_gather_pipeline_tensors: is Megatron-LM's (system \"megatron\")");
  document["model_parallel"].erase("scatter_gather_pipeline_tensors");
  document["model_parallel"]["microbatch_group_size"] = 8;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      Catch::Contains("p.json: model_parallel.microbatch_group_size: is Megatron-LM's"));
  document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-tp4-pp4.json"));
  document["model_parallel"]["microbatch_group_size"] = 8;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel.microbatch_group_size") &&
                                                          Catch::Contains("needs virtual_stages > 1"));
  document["model_parallel"]["virtual_stages"] = 2;
  REQUIRE(parse_plan(document, "p.json").model_parallel.microbatch_group() == 8);
  document["model_parallel"]["microbatch_group_size"] = 3;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      "p.json: model_parallel.microbatch_group_size: must be at least the 4 pipeline stages, got 3");
  document["model_parallel"].erase("microbatch_group_size");
  document["model_parallel"]["rank_order"] = "tp-cp-pp-dp";
  REQUIRE(parse_plan(document, "p.json").model_parallel.rank_order == RankOrder::tp_cp_pp_dp);
  document["model_parallel"]["rank_order"] = "dp-first";
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel.rank_order"));
}
