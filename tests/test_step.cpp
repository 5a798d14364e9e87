// The training step end to end: compile (model, training, plan) into a
// Program, simulate it, and check what must hold whatever the numbers:
// traffic volumes, causality, the time breakdown, overlaps, memory.
#include "fixtures.h"
#include "sim/report/step_report.h"
#include "sim/step/kernel_time.h"
#include "sim/step/step_simulator.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/model_flops.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

ModelSpec tiny_model(MlpKind mlp = MlpKind::swiglu) {
  ModelSpec model;
  model.name = "tiny";
  model.layers = 2;
  model.hidden = 512;
  model.heads = 8;
  model.kv_heads = 8;
  model.head_dim = 64;
  model.ffn_hidden = mlp == MlpKind::swiglu ? 1408 : 2048;
  model.vocab = 1000;
  model.max_positions = 1024;
  model.mlp = mlp;
  model.norm = NormKind::rmsnorm;
  return model;
}

TrainingConfig tiny_training(std::int64_t global_sequences) {
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 1;
  training.global_batch_sequences = global_sequences;
  return training;
}

StepConfig step_config(const std::string& plan, int ranks, int micro_batches = 1) {
  StepConfig config;
  config.model = tiny_model();
  config.training = tiny_training(static_cast<std::int64_t>(ranks) * micro_batches);
  config.plan = load_plan(plan);
  config.data_parallel = ranks;
  config.gpus_per_node = 8;
  return config;
}

Plan amsp_plan(int parameters, int gradients, int optimizer) {
  Plan plan = load_plan("amsp-llama13b");
  plan.factors = {parameters, gradients, optimizer};
  return plan;
}

double psi() { return static_cast<double>(count_parameters(tiny_model()).total()); }

const test::World& world() {
  static const test::World w("dgx-a100-8node");
  return w;
}

workloads::Timeline simulate(const Program& program, sim::NetworkMode network = sim::NetworkMode::flow) {
  sim::StepSimulationOptions options;
  options.network = network;
  return sim::simulate(program, world().cluster(), world().router(), world().profile(), options);
}

double step_seconds(StepConfig config, const std::string& level) {
  apply_overlap_level(config.plan, level);
  return seconds_from_picoseconds(simulate(compile(config)).step_time);
}

// Every op ran once, after its dependencies, one at a time on its stream; the
// members of a collective call end it together.
void require_causal(const Program& program, const workloads::Timeline& timeline) {
  REQUIRE(timeline.ops.size() == static_cast<std::size_t>(program.ranks));
  std::map<std::tuple<int, int, int>, TimePs> call_end;  // (communicator, group, call) -> end
  for (int rank = 0; rank < program.ranks; ++rank) {
    const auto& ops = program.program_of(rank).ops;
    const auto& t = timeline.ops[static_cast<std::size_t>(rank)];
    REQUIRE(t.size() == ops.size());
    std::vector<TimePs> stream_free(program.streams.size(), 0);
    std::vector<int> calls(program.communicators.size(), 0);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      INFO("rank " << rank << " op " << ops[i].name);
      REQUIRE(t[i].start >= 0);
      REQUIRE(t[i].end >= t[i].start);
      for (std::uint32_t dep : ops[i].deps) REQUIRE(t[i].start >= t[dep].end);
      auto& free_at = stream_free[static_cast<std::size_t>(ops[i].stream)];
      REQUIRE(t[i].start >= free_at);
      free_at = t[i].end;
      if (ops[i].kind == OpKind::collective) {
        const auto c = static_cast<std::size_t>(ops[i].communicator);
        const auto key = std::make_tuple(ops[i].communicator, program.communicators[c].group_of_rank[rank], calls[c]++);
        const auto [it, first] = call_end.try_emplace(key, t[i].end);
        REQUIRE(it->second == t[i].end);
      }
    }
  }
}

}  // namespace

TEST_CASE("bytes each rank sends per step are 2 Psi, 2 Psi, 2 Psi and 3 Psi for ZeRO 0-3", "[step][traffic]") {
  // Ring volumes of the Program's collectives: (n - 1) / n of the ideal per
  // byte. Buckets partition the modules, so bucketing moves no extra bytes:
  // the match is exact up to rounding. DeepSpeed's persistent tensors, its
  // prefetch (whose queue keeps what it passes) and its reuse distance are
  // switched off here (sections below), so ZeRO-3 gathers every parameter for
  // the forward and again for the backward.
  const int n = 16;
  const double e = 2, ideal = e * psi() * (n - 1) / n;
  const auto config_of = [&](const std::string& plan, int micro_batches) {
    StepConfig config = step_config(plan, n, micro_batches);
    config.plan.buckets.persistence_threshold_parameters = 0;
    config.plan.buckets.prefetch_bytes = 0;
    config.plan.buckets.max_reuse_distance_parameters = 0;
    return config;
  };
  const std::vector<std::pair<std::string, double>> cases = {{"zero0", 2}, {"zero1", 2}, {"zero2", 2}, {"zero3", 3}};
  for (const auto& [plan, multiple] : cases) {
    INFO(plan);
    const Program program = compile(config_of(plan, 1));
    validate_program(program);
    for (int rank : {0, 7, 15}) REQUIRE(bytes_sent_per_rank(program, rank) == Approx(multiple * ideal).epsilon(1e-12));
  }
  SECTION("gradient accumulation repeats ZeRO-3's gathers and reduce-scatters, not ZeRO-1's reduction") {
    const int micro_batches = 4;
    REQUIRE(bytes_sent_per_rank(compile(config_of("zero3", micro_batches)), 0) ==
            Approx(3 * micro_batches * ideal).epsilon(1e-12));
    REQUIRE(bytes_sent_per_rank(compile(config_of("zero1", micro_batches)), 0) ==
            Approx(2 * ideal).epsilon(1e-12));
  }
  SECTION("a tied LM head gathers the embedding again, which is reduced and updated once") {
    // The head's GEMM uses the embedding's V x h weight: ZeRO-3 gathers it
    // for the head in forward and in backward as well as for the embedding,
    // while the gradient reduce-scatter and ZeRO-1's all-reduce move the
    // model's parameters once.
    StepConfig zero3 = config_of("zero3", 1), zero1 = config_of("zero1", 1);
    zero3.model.tied_embeddings = zero1.model.tied_embeddings = true;
    const double tied_psi = static_cast<double>(count_parameters(zero3.model).total());
    const double vh = static_cast<double>(zero3.model.vocab * zero3.model.hidden);
    REQUIRE(tied_psi == Approx(psi() - vh));
    const double per_value = e * (n - 1.0) / n;
    REQUIRE(bytes_sent_per_rank(compile(zero3), 3) == Approx(per_value * (2 * (tied_psi + vh) + tied_psi)).epsilon(1e-12));
    REQUIRE(bytes_sent_per_rank(compile(zero1), 3) == Approx(per_value * 2 * tied_psi).epsilon(1e-12));
  }
  // The tiny model's norm weights (512 elements, 2 per layer and the final
  // one) fall under the 1e5 persistence threshold.
  const double persistent = (2 * 2 + 1) * 512.0;
  const double per_element = e * (n - 1.0) / n;
  SECTION("persistent tensors are gathered once per step, after the optimizer, not per module") {
    for (const int b : {1, 4}) {
      StepConfig config = config_of("zero3", b);
      config.plan.buckets.persistence_threshold_parameters = 1e5;
      const Program program = compile(config);
      const double expected = per_element * (2 * b * (psi() - persistent) + persistent + b * psi());
      REQUIRE(bytes_sent_per_rank(program, 5) == Approx(expected).epsilon(1e-12));
      // Held whole on every GPU, less the GPU's own shard.
      const auto gathered = static_cast<std::size_t>(MemoryCategory::gathered_parameters);
      REQUIRE(program.program_of(5).resident_bytes[gathered] == Approx(per_element * persistent));
    }
  }
  SECTION("DeepSpeed keeps a model below its live limit and reuse distance gathered from forward to backward") {
    // Psi < 1e9 (the default stage3_max_live_parameters and
    // stage3_max_reuse_distance): nothing is released between a module's
    // forward and its backward.
    for (const int b : {1, 4}) {
      StepConfig config = step_config("zero3", n, b);
      REQUIRE(config.plan.buckets.max_reuse_distance_parameters == 1e9);
      const double expected = per_element * (b * (psi() - persistent) + persistent + b * psi());
      REQUIRE(bytes_sent_per_rank(compile(config), 5) == Approx(expected).epsilon(1e-12));
      // The whole model is gathered at the turn from forward to backward.
      const MemoryBreakdown memory = estimate_memory(config.model, config.training, config.plan,
                                                     resolve_factors(config.plan, n, 8, "plan"), n);
      REQUIRE(memory.gathered_parameters == Approx(per_element * psi()));
    }
  }
}

TEST_CASE("DeepSpeed ZeRO-1/2 reduce each gradient bucket to its owners, or all-reduce it with multi-rank bucketing",
          "[step][traffic]") {
  // The flat buffer of all Psi parameters is split into n equal partitions;
  // whatever the buckets, each owner receives exactly its partition per
  // reduction pass (ZeRO-2 reduces after every micro-batch, ZeRO-1 after the
  // last), and a bucket makes one reduce per partition it touches.
  const int n = 16, micro_batches = 2;
  const double e = 2, ideal = e * psi() * (n - 1) / n;
  for (const auto& [plan, passes] : std::vector<std::pair<std::string, int>>{{"zero1", 1}, {"zero2", 2}}) {
    INFO(plan);
    StepConfig config = step_config(plan, n, micro_batches);
    REQUIRE(config.plan.as_implemented);
    REQUIRE_FALSE(config.plan.multi_rank_bucketing);
    config.plan.buckets.reduce_bytes = 1.5e6;  // 5 buckets of whole modules of the 15 MB model
    const Program owners = compile(config);
    validate_program(owners);
    std::map<int, double> reduced_to;
    std::map<std::string, int> reduces_of_bucket;
    for (const Op& op : owners.program_of(0).ops) {
      if (op.kind != OpKind::collective) continue;
      REQUIRE(op.collective != CollectiveOp::reduce_scatter);
      if (op.collective != CollectiveOp::reduce) continue;
      reduced_to[op.root] += op.bytes;
      ++reduces_of_bucket[std::string(op.name.substr(0, op.name.find(".reduce_to")))];
    }
    REQUIRE(reduced_to.size() == static_cast<std::size_t>(n));
    for (const auto& [owner, bytes] : reduced_to) REQUIRE(bytes == Approx(passes * e * psi() / n).epsilon(1e-12));
    const int buckets = static_cast<int>(reduces_of_bucket.size()) / passes;
    REQUIRE(buckets >= 4);
    int reduces = 0;
    for (const auto& [bucket, count] : reduces_of_bucket) reduces += count;
    // Each bucket boundary inside a partition splits it in two.
    REQUIRE(reduces >= passes * n);
    REQUIRE(reduces <= passes * (n + buckets - 1));
    // A reduce chain forwards (n - 1) / n of what it reduces, as a reduce-scatter does.
    REQUIRE(bytes_sent_per_rank(owners, 3) == Approx((passes + 1) * ideal).epsilon(1e-12));

    config.plan.multi_rank_bucketing = true;
    const Program packed = compile(config);
    for (const Op& op : packed.program_of(0).ops) {
      if (op.kind == OpKind::collective) REQUIRE(op.collective != CollectiveOp::reduce);
    }
    // Every pass all-reduces the whole model (2 Psi), then the update gathers it (Psi).
    REQUIRE(bytes_sent_per_rank(packed, 3) == Approx((2 * passes + 1) * ideal).epsilon(1e-12));

    config.plan.as_implemented = false;
    REQUIRE(bytes_sent_per_rank(compile(config), 3) == Approx((passes + 1) * ideal).epsilon(1e-12));
  }
  SECTION("a bucket per module, one of them without parameters (a head tied to the embedding)") {
    StepConfig config = step_config("zero1", n);
    config.model.tied_embeddings = true;
    config.plan.buckets.reduce_bytes = 0;
    const Program program = compile(config);
    validate_program(program);
    const double tied_psi = static_cast<double>(count_parameters(config.model).total());
    std::map<int, double> reduced_to;
    for (const Op& op : program.program_of(0).ops) {
      if (op.kind == OpKind::collective && op.collective == CollectiveOp::reduce) reduced_to[op.root] += op.bytes;
    }
    REQUIRE(reduced_to.size() == static_cast<std::size_t>(n));
    for (const auto& [owner, bytes] : reduced_to) REQUIRE(bytes == Approx(e * tied_psi / n).epsilon(1e-12));
  }
}

TEST_CASE("from the second micro-batch on each rank adds the new gradient into the 1/f_G it keeps",
          "[step][compute]") {
  // PyTorch's AccumulateGrad where gradients stay whole (f_G 1): micro-batch
  // 0 leaves its gradient in param.grad, each later one reads it and its own
  // and writes the sum, 3 e bytes per parameter, before a hook may reduce
  // it. Sharded gradients: the same over the rank's 1/f_G.
  const int n = 16, micro_batches = 3;
  const double e = 2;
  const auto added = [](const Program& program, const std::string& micro_batch) {
    double bytes = 0;
    for (const Op& op : program.program_of(0).ops) {
      if (op.name.ends_with("grad.accumulate") && op.name.starts_with(micro_batch)) {
        REQUIRE(op.kind == OpKind::compute);
        REQUIRE(program.streams[static_cast<std::size_t>(op.stream)] == "compute");
        bytes += op.hbm_bytes;
      }
    }
    return bytes;
  };
  for (const auto& [plan, kept] : std::vector<std::pair<std::string, int>>{
           {"zero0", 1}, {"zero1", 1}, {"amsp-llama7b", 1}, {"zero2", n}, {"zero3", n}, {"mics-8", 8}}) {
    INFO(plan);
    const Program program = compile(step_config(plan, n, micro_batches));
    validate_program(program);
    REQUIRE(added(program, "mb0.") == 0);
    for (int m = 1; m < micro_batches; ++m) {
      REQUIRE(added(program, "mb" + std::to_string(m) + ".") == Approx(3 * e * psi() / kept).epsilon(1e-12));
    }
    REQUIRE(added(compile(step_config(plan, n, 1)), "mb") == 0);
    if (kept > 1) continue;
    // Whole gradients: the last micro-batch's reductions start from the sum.
    const auto& ops = program.program_of(0).ops;
    int reductions = 0;
    for (const Op& op : ops) {
      if (op.kind != OpKind::collective || !op.name.starts_with("mb2.grad.")) continue;
      for (std::uint32_t dep : op.deps) {
        if (ops[dep].kind != OpKind::compute) continue;
        REQUIRE(ops[dep].name.ends_with("grad.accumulate"));
        ++reductions;
      }
    }
    REQUIRE(reductions > 0);
  }
}

TEST_CASE("every op runs exactly once and none starts before its dependencies end", "[step][causality]") {
  std::vector<StepConfig> configs = {step_config("zero1", 16, 2), step_config("zero3", 16, 2),
                                     step_config("mics-8", 32, 2), step_config("zeropp-hpz8", 16),
                                     step_config("fsdp-shard-grad-op", 16, 2)};
  StepConfig amsp = step_config("zero1", 64);
  amsp.plan = amsp_plan(8, 8, 32);
  configs.push_back(amsp);
  StepConfig recompute = step_config("zero3", 16);
  recompute.training.recompute = Recompute::full;
  configs.push_back(recompute);
  for (const StepConfig& config : configs) {
    INFO(config.plan.name << " on " << config.data_parallel);
    const Program program = compile(config);
    validate_program(program);
    const workloads::Timeline timeline = simulate(program);
    REQUIRE_FALSE(timeline.out_of_memory);
    require_causal(program, timeline);
  }
}

TEST_CASE("with every overlap off the step is compute + communication + idle", "[step][breakdown]") {
  for (const std::string plan : {"zero1", "zero3", "mics-8"}) {
    INFO(plan);
    StepConfig config = step_config(plan, 16, 2);
    config.plan.overlap = {false, false, false};
    const Program program = compile(config);
    const workloads::Timeline timeline = simulate(program);
    const sim::StepSummary summary =
        sim::summarize_step(program, timeline, world().profile(), world().cluster().spec().node.gpu_memory_bytes);
    const sim::TimeBreakdown& b = summary.breakdown;
    // Nothing hides: all communication is exposed.
    REQUIRE(b.exposed_total() == Approx(b.communication_seconds).epsilon(1e-9));
    REQUIRE(b.communication_seconds > 0);
    // Compute is the sum of the kernels' own times (no interference in this profile).
    double kernels = 0;
    for (const Op& op : program.program_of(0).ops) {
      if (op.kind == OpKind::compute) kernels += seconds_from_picoseconds(picoseconds_from_seconds(sim::kernel_seconds(op, world().profile())));
    }
    REQUIRE(b.compute_seconds == Approx(kernels).epsilon(1e-9));
    REQUIRE(b.compute_seconds + b.exposed_total() + b.waiting_seconds + b.idle_seconds ==
            Approx(summary.step_seconds).epsilon(1e-12));
  }
}

TEST_CASE("overlaps never slow a step: the four ablation levels are monotonic", "[step][overlap]") {
  StepConfig amsp = step_config("zero1", 64, 2);
  amsp.plan = amsp_plan(8, 8, 32);
  StepConfig amsp_in_node = step_config("zero1", 16, 2);
  amsp_in_node.plan = amsp_plan(4, 4, 8);
  for (const StepConfig& config : {step_config("zero3", 16, 2), step_config("mics-8", 32, 2), amsp, amsp_in_node}) {
    INFO(config.plan.name << " f " << config.plan.factors.parameters << "," << config.plan.factors.optimizer);
    const double none = step_seconds(config, "none"), ag_rs = step_seconds(config, "ag-rs"),
                 ar = step_seconds(config, "ag-rs+ar"), all = step_seconds(config, "all");
    REQUIRE(ag_rs <= none);
    REQUIRE(ar <= ag_rs);
    REQUIRE(all <= ar);
    REQUIRE(all < none);
  }
  SECTION("removing DeepSpeed's and MiCS's implementation limits never slows them") {
    for (const std::string plan : {"zero3", "mics-8", "zeropp-hpz8"}) {
      StepConfig config = step_config(plan, 16, 2);
      const double as_implemented = seconds_from_picoseconds(simulate(compile(config)).step_time);
      config.plan.as_implemented = false;
      REQUIRE(seconds_from_picoseconds(simulate(compile(config)).step_time) <= as_implemented);
    }
  }
}

TEST_CASE("simulated memory: model states as the factors say, every activation alive at the peak", "[step][memory]") {
  for (const std::string plan : {"zero0", "zero1", "zero2", "zero3", "mics-8", "zero3-window"}) {
    INFO(plan);
    // zero3-window: a prefetch window of a third of the model, released
    // as soon as used, so gathers and frees interleave through the step.
    StepConfig config = step_config(plan == "zero3-window" ? "zero3" : plan, 16);
    if (plan == "zero3-window") {
      config.training.sequence_length = 8192;  // compute-bound: the gather stream runs ahead
      config.plan.buckets.max_live_parameters = psi() / 3;
      config.plan.buckets.max_reuse_distance_parameters = 0;
    }
    const Program program = compile(config);
    const workloads::Timeline timeline = simulate(program);
    const ShardingFactors f = resolve_factors(config.plan, 16, 8, "plan");
    const double e = 2;
    const workloads::MemoryPeak& peak = timeline.peak_memory[3];
    const auto at = [&](MemoryCategory c) { return peak.by_category[static_cast<std::size_t>(c)]; };
    REQUIRE(at(MemoryCategory::parameters) == Approx(e * psi() / f.parameters));
    REQUIRE(at(MemoryCategory::gradients) == Approx(e * psi() / f.gradients));
    REQUIRE(at(MemoryCategory::optimizer_states) == Approx(12 * psi() / f.optimizer));
    // The memory model's gathered parameters are the most the fetch schedule
    // holds at once: replayed in time (frees first at equal times), the
    // simulated step never holds more.
    const MemoryBreakdown estimate = estimate_memory(config.model, config.training, config.plan, f, 16);
    std::vector<std::pair<TimePs, double>> changes;
    const auto& ops = program.program_of(3).ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == OpKind::memory && ops[i].memory == MemoryCategory::gathered_parameters) {
        changes.emplace_back(timeline.ops[3][i].start, ops[i].bytes);
      }
    }
    std::sort(changes.begin(), changes.end());
    double gathered = program.program_of(3).resident_bytes[static_cast<std::size_t>(MemoryCategory::gathered_parameters)];
    double most = gathered;
    for (const auto& [time, bytes] : changes) most = std::max(most, gathered += bytes);
    REQUIRE(most <= estimate.gathered_parameters * (1 + 1e-12));
    REQUIRE(at(MemoryCategory::gathered_parameters) <= most * (1 + 1e-12));
    // Without gradient or gather buffers (f_P = f_G = 1) the peak comes at the
    // start of the backward, with every layer's activations and the head's held.
    if (f.parameters == 1 && f.gradients == 1) {
      REQUIRE(at(MemoryCategory::activations) == Approx(activation_footprint(config.model, config.training).total()));
    }
  }
}

TEST_CASE("a plan that does not fit is reported at the allocation that fails, not simulated past", "[step][memory]") {
  topology::ClusterSpec spec = topology::load_cluster_spec("dgx-a100-2node");
  spec.node.gpu_memory_bytes = 16 * psi() + 1e6;  // model states fit, the activations do not
  const test::World small(spec, calib::load_profile("a100"));
  const Program program = compile(step_config("zero0", 16));
  const workloads::Timeline timeline =
      sim::simulate(program, small.cluster(), small.router(), small.profile(), sim::StepSimulationOptions{});
  REQUIRE(timeline.out_of_memory.has_value());
  double held = 0;
  for (double bytes : timeline.out_of_memory->by_category) held += bytes;
  REQUIRE(held > spec.node.gpu_memory_bytes);
  REQUIRE(held - timeline.out_of_memory->requested_bytes <= spec.node.gpu_memory_bytes);
  REQUIRE(timeline.out_of_memory->op.find("alloc") != std::string::npos);
}

TEST_CASE("kernel times are the roofline of the profile's numbers", "[step][kernel]") {
  const calib::Profile profile = test::uniform_profile(0);  // 100 TFLOP/s at efficiency 1, 1 TB/s HBM
  Op gemm;
  gemm.kind = OpKind::compute;
  gemm.kernel = KernelClass::gemm;
  gemm.flops = 2.0 * 4096 * 4096 * 4096;
  gemm.hbm_bytes = 3 * 2.0 * 4096 * 4096;
  REQUIRE(sim::kernel_seconds(gemm, profile) == Approx(gemm.flops / 1e14));
  gemm.hbm_bytes = 2e9;  // now memory-bound: 2 ms of HBM traffic against 1.37 ms of FLOPs
  REQUIRE(sim::kernel_seconds(gemm, profile) == Approx(2e-3));
  Op norm;
  norm.kind = OpKind::compute;
  norm.kernel = KernelClass::elementwise;
  norm.hbm_bytes = 5e8;
  REQUIRE(sim::kernel_seconds(norm, profile) == Approx(5e-4));
  SECTION("GEMM efficiency interpolates in log FLOPs and clamps at the ends") {
    calib::DtypeCompute dtype;
    dtype.gemm_efficiency = {{1e9, 0.4}, {1e11, 0.8}};
    REQUIRE(dtype.gemm_efficiency_at(1e10) == Approx(0.6));
    REQUIRE(dtype.gemm_efficiency_at(1e6) == Approx(0.4));
    REQUIRE(dtype.gemm_efficiency_at(1e15) == Approx(0.8));
  }
}

TEST_CASE("model FLOPs are Megatron-LM's count, and MFU divides them by the GPUs' peak", "[step][mfu]") {
  ModelSpec gpt = tiny_model(MlpKind::gelu);
  gpt.positions = PositionKind::learned;
  const TrainingConfig training = tiny_training(64);
  const double B = 64, s = 512, L = 2, h = 512, V = 1000;
  const double megatron = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
  REQUIRE(model_flops_per_step(gpt, training) == Approx(megatron).epsilon(1e-12));

  StepConfig config = step_config("zero1", 16, 4);
  config.model = gpt;
  const Program program = compile(config);
  const workloads::Timeline timeline = simulate(program);
  const sim::StepSummary summary = sim::summarize_step(program, timeline, world().profile(), 80e9);
  const double expected = megatron / (summary.step_seconds * 16 * 312e12);  // A100 bf16 dense peak
  REQUIRE(summary.mfu == Approx(expected).epsilon(1e-12));
  REQUIRE(summary.tokens_per_gpu_per_second == Approx(B * s / (summary.step_seconds * 16)));
}

namespace {

// Two ranks: an optional 1 ms kernel on rank 1 before a 64 MiB all-reduce, or
// a kernel beside the all-reduce on each rank.
Program two_rank_program(bool delay_rank1, bool kernel_beside) {
  Program program;
  program.ranks = 2;
  program.streams = {"compute", "communication"};
  program.communicators.push_back(make_communicator("pair", 2, [](int) { return 0; }));
  for (int rank = 0; rank < 2; ++rank) {
    RankProgram p;
    Op kernel;
    kernel.kind = OpKind::compute;
    kernel.kernel = KernelClass::elementwise;
    kernel.hbm_bytes = 1e9;  // 1 ms at 1 TB/s
    Op all_reduce;
    all_reduce.kind = OpKind::collective;
    all_reduce.stream = 1;
    all_reduce.collective = CollectiveOp::all_reduce;
    all_reduce.communicator = 0;
    all_reduce.bytes = 64.0 * (1 << 20);
    if (kernel_beside) {
      p.append(kernel, "kernel");
      p.append(all_reduce, "all_reduce");
    } else if (delay_rank1 && rank == 1) {
      p.append(kernel, "kernel");
      p.append(all_reduce, "all_reduce", {0});
    } else {
      p.append(all_reduce, "all_reduce");
    }
    program.programs.push_back(p);
    program.program_of_rank.push_back(rank);
  }
  validate_program(program);
  return program;
}

}  // namespace

const test::World& pair_world(double interference) {
  static std::map<double, std::unique_ptr<test::World>> worlds;
  auto& w = worlds[interference];
  if (!w) {
    nlohmann::json profile = test::uniform_profile_json(1e-6);
    profile["compute"]["interference_slowdown"] = interference;
    w = std::make_unique<test::World>(topology::load_cluster_spec("dgx-a100-2node"),
                                      calib::parse_profile(profile, "interference.json"));
  }
  return *w;
}

workloads::Timeline simulate_pair(const Program& program, double interference = 0) {
  const test::World& w = pair_world(interference);
  return sim::simulate(program, w.cluster(), w.router(), w.profile(), sim::StepSimulationOptions{});
}

TEST_CASE("a collective starts when every member has issued it", "[step][collective]") {
  const workloads::Timeline together = simulate_pair(two_rank_program(false, false));
  const TimePs alone = together.ops[0][0].end;
  REQUIRE(alone > 0);
  const workloads::Timeline delayed = simulate_pair(two_rank_program(true, false));
  const TimePs one_ms = picoseconds_from_seconds(1e-3);
  REQUIRE(delayed.ops[1][0].end == one_ms);
  // Rank 0 issued at once and waits; both end one collective after rank 1 issues.
  REQUIRE(delayed.ops[0][0].start == 0);
  REQUIRE(delayed.ops[0][0].end == one_ms + alone);
  REQUIRE(delayed.ops[1][1].end == one_ms + alone);
}

TEST_CASE("time a rank spends waiting for the others to issue a collective is waiting, not communication",
          "[step][collective][report]") {
  // Rank 0 issues the all-reduce at once, rank 1 after its 1 ms kernel: rank
  // 0 waits 1 ms, then the all-reduce moves data for as long as it takes
  // alone, with nothing computing beside it.
  const Program program = two_rank_program(true, false);
  const TimePs alone = simulate_pair(two_rank_program(false, false)).ops[0][0].end;
  const workloads::Timeline timeline = simulate_pair(program);
  const TimePs ms = picoseconds_from_seconds(1e-3);
  CHECK(timeline.ops[0][0].moving == ms);
  CHECK(timeline.ops[1][1].moving == ms);
  const sim::TimeBreakdown waiting = sim::time_breakdown(program, timeline, 0);
  CHECK(waiting.waiting_seconds == Approx(1e-3).epsilon(1e-12));
  CHECK(waiting.exposed_total() == Approx(seconds_from_picoseconds(alone)).epsilon(1e-12));
  CHECK(waiting.communication_seconds == Approx(seconds_from_picoseconds(alone)).epsilon(1e-12));
  CHECK(waiting.idle_seconds == 0);
  CHECK(waiting.compute_seconds == 0);
  // Rank 1 computed for that millisecond and never waited.
  const sim::TimeBreakdown late = sim::time_breakdown(program, timeline, 1);
  CHECK(late.waiting_seconds == 0);
  CHECK(late.compute_seconds == Approx(1e-3).epsilon(1e-12));
  CHECK(late.exposed_total() == Approx(seconds_from_picoseconds(alone)).epsilon(1e-12));
}

TEST_CASE("compute slows by the profile's interference factor while a collective moves data", "[step][interference]") {
  const Program program = two_rank_program(false, true);
  const workloads::Timeline quiet = simulate_pair(program, 0);
  const TimePs kernel = quiet.ops[0][0].end, collective = quiet.ops[0][1].end;
  REQUIRE(kernel == picoseconds_from_seconds(1e-3));
  REQUIRE(collective < kernel);
  // Slowdown 1: half speed while the all-reduce runs (c), full speed after:
  // the kernel ends at c + (1 ms - c / 2).
  const workloads::Timeline slowed = simulate_pair(program, 1.0);
  REQUIRE(slowed.ops[0][1].end == collective);
  const double expected = seconds_from_picoseconds(collective) + (1e-3 - seconds_from_picoseconds(collective) / 2);
  REQUIRE(seconds_from_picoseconds(slowed.ops[0][0].end) == Approx(expected).epsilon(1e-9));
}

TEST_CASE("kernels sharing the GPU are slowed by interference as well: by (1 + s) n on n streams",
          "[step][interference][kernel]") {
  // Rank 0 also runs a second 1 ms kernel on a third stream, beside its
  // first kernel and the all-reduce (c long). Slowdown 1: over [0, c] each
  // kernel runs at 1 / (2 x 2), so c / 4 of each is done; then at 1 / 2,
  // ending at c + 2 (1 ms - c / 4) = 2 ms + c / 2. Rank 1's lone kernel ends
  // at c + (1 ms - c / 2).
  Program program = two_rank_program(false, true);
  program.streams.push_back("side");
  Op side = program.programs[0].ops.at(0);
  side.stream = 2;
  program.programs[0].append(side, "side");
  validate_program(program);
  const double c = seconds_from_picoseconds(simulate_pair(two_rank_program(false, true), 0).ops[0][1].end);
  REQUIRE(c < 1e-3);
  const workloads::Timeline slowed = simulate_pair(program, 1.0);
  REQUIRE(seconds_from_picoseconds(slowed.ops[0][1].end) == Approx(c).epsilon(1e-9));
  for (std::size_t kernel : {0, 2}) {
    REQUIRE(seconds_from_picoseconds(slowed.ops[0][kernel].end) == Approx(2e-3 + c / 2).epsilon(1e-9));
  }
  REQUIRE(seconds_from_picoseconds(slowed.ops[1][0].end) == Approx(c + (1e-3 - c / 2)).epsilon(1e-9));
}

namespace {

// Kernels k0 -> k1 -> k2 like `kernel` at the end of `p`, which is empty.
void append_kernel_chain(RankProgram& p, const Op& kernel) {
  p.append(kernel, "k0");
  p.append(kernel, "k1", {0});
  p.append(kernel, "k2", {1});
}

// An element-wise kernel of `ms` milliseconds on `stream` (1 GB a
// millisecond at the uniform profile's 1 TB/s).
Op kernel_of_ms(double ms, int stream = 0) {
  Op kernel;
  kernel.kind = OpKind::compute;
  kernel.kernel = KernelClass::elementwise;
  kernel.hbm_bytes = ms * 1e9;
  kernel.stream = stream;
  return kernel;
}

// `p` as the one rank of a program on streams "compute" and "side".
Program one_rank_program(const RankProgram& p) {
  Program program;
  program.ranks = 1;
  program.streams = {"compute", "side"};
  program.programs.push_back(p);
  program.program_of_rank.push_back(0);
  validate_program(program);
  return program;
}

// One rank: kernels k0 -> k1 -> k2 of 1 ms each on the compute stream, and on
// a side stream either a 1 ms kernel waiting for k1 or, at 1.5 ms, an
// allocation larger than the GPU.
Program kernel_run_program(bool side_allocation) {
  RankProgram p;
  append_kernel_chain(p, kernel_of_ms(1));
  if (side_allocation) {
    Op allocation;
    allocation.kind = OpKind::memory;
    allocation.stream = 1;
    allocation.bytes = 1e15;
    p.append(kernel_of_ms(1.5, 1), "side");
    p.append(allocation, "too_much.alloc", {3});
  } else {
    p.append(kernel_of_ms(1, 1), "side", {1});
  }
  return one_rank_program(p);
}

}  // namespace

TEST_CASE("a run of kernels that nothing else waits for costs one event, with each kernel's own times",
          "[step][kernel]") {
  const TimePs ms = picoseconds_from_seconds(1e-3);
  const workloads::Timeline timeline = simulate_pair(kernel_run_program(false));
  const auto& t = timeline.ops[0];
  for (int k = 0; k < 2; ++k) {
    CHECK(t[static_cast<std::size_t>(k)].start == k * ms);
    CHECK(t[static_cast<std::size_t>(k)].end == (k + 1) * ms);
  }
  // The side kernel waits for k1, then shares the GPU with k2: each does its
  // 1 ms of work at half speed, and both end at 4 ms.
  CHECK(t[2].start == 2 * ms);
  CHECK(t[3].start == 2 * ms);
  CHECK(t[3].end == 4 * ms);
  CHECK(t[2].end == 4 * ms);
  // k0 folds into k1's event; k1 has a waiter besides k2, so k2 and the side
  // kernel have events of their own: 3, not 4.
  CHECK(timeline.events == 3);

  // The 1.5 ms side kernel shares the GPU with the run k0 -> k1 -> k2 from 0
  // and ends at 3 ms, when the allocation after it fails: by then the run has
  // done 1.5 ms of work, k0 (ended at 2 ms) and half of k1. The timeline
  // holds what had happened by then, as if every kernel had had its own event.
  const workloads::Timeline failed = simulate_pair(kernel_run_program(true));
  REQUIRE(failed.out_of_memory.has_value());
  CHECK(failed.out_of_memory->when == 3 * ms);
  const auto& f = failed.ops[0];
  CHECK(f[0].start == 0);
  CHECK(f[0].end == 2 * ms);
  CHECK(f[1].start == 2 * ms);
  CHECK(f[1].end == -1);
  CHECK(f[2].start == -1);
  CHECK(f[2].end == -1);
  CHECK(failed.step_time == 3 * ms);  // the simulation stops where the allocation failed
}

TEST_CASE("kernels on two streams of one rank share its GPU, each at half speed while both run", "[step][kernel]") {
  // Stream 0: kernels of 1 ms and then 2 ms of work; stream 1: one of 3 ms,
  // all ready at 0. Over [0, 2 ms] the 1 ms kernel and the 3 ms one each get
  // half the GPU: the first ends at 2 ms, the other has done 1 ms. Then the
  // 2 ms kernel and the 3 ms one each have 2 ms left at half speed: both end
  // at 6 ms, the 6 ms of work one GPU does without a pause.
  RankProgram p;
  p.append(kernel_of_ms(1), "short");
  p.append(kernel_of_ms(2), "middle");
  p.append(kernel_of_ms(3, 1), "long");
  const workloads::Timeline timeline = simulate_pair(one_rank_program(p));
  const auto& t = timeline.ops[0];
  const TimePs ms = picoseconds_from_seconds(1e-3);
  CHECK(t[0].end == 2 * ms);
  CHECK(t[1].start == 2 * ms);
  CHECK(t[1].end == 6 * ms);
  CHECK(t[2].end == 6 * ms);
  CHECK(timeline.step_time == 6 * ms);  // 6 ms of work, one GPU, never idle
}

namespace {

// Rank 0: kernels k0 -> k1 -> k2 of 1 ms each, nothing else waiting for
// them (one run), and a 64 MiB all-reduce on its communication stream. Rank
// 1: a 1.5 ms kernel, then its side of the all-reduce, so the all-reduce
// moves data from 1.5 ms on, in the middle of rank 0's k1.
Program run_beside_late_collective() {
  Program program = two_rank_program(true, false);
  RankProgram& rank0 = program.programs[0];
  const Op all_reduce = rank0.ops.at(0);
  Op kernel = program.programs[1].ops.at(0);
  rank0.ops.clear();
  append_kernel_chain(rank0, kernel);
  rank0.append(all_reduce, all_reduce.name);
  program.programs[1].ops.at(0).hbm_bytes = 1.5e9;
  validate_program(program);
  return program;
}

}  // namespace

TEST_CASE("interference slows a run of kernels from the instant a collective starts moving, kernel by kernel",
          "[step][interference]") {
  const Program program = run_beside_late_collective();
  const double ms = 1e-3;
  const workloads::Timeline quiet = simulate_pair(program, 0);
  const double issued = seconds_from_picoseconds(quiet.ops[1][0].end);
  REQUIRE(issued == Approx(1.5 * ms).epsilon(1e-12));
  const double moving = seconds_from_picoseconds(quiet.ops[0][3].end) - issued;  // the all-reduce alone
  REQUIRE(moving > 0);
  for (int k = 0; k < 3; ++k) CHECK(quiet.ops[0][static_cast<std::size_t>(k)].end == picoseconds_from_seconds((k + 1) * ms));

  // Slowdown 1: half speed while the all-reduce moves data. Work done by time
  // t is t up to 1.5 ms, then half of the time inside the all-reduce, then
  // full speed again; kernel k ends when (k + 1) ms of work is done.
  const double slowed_until = issued + moving;
  const auto end_of_work = [&](double work) {
    if (work <= issued) return work;
    if (work <= issued + moving / 2) return issued + 2 * (work - issued);
    return slowed_until + (work - issued - moving / 2);
  };
  const workloads::Timeline slowed = simulate_pair(program, 1.0);
  CHECK(seconds_from_picoseconds(slowed.ops[0][3].end) == Approx(slowed_until).epsilon(1e-9));
  for (int k = 0; k < 3; ++k) {
    INFO("k" << k);
    const auto& t = slowed.ops[0][static_cast<std::size_t>(k)];
    CHECK(seconds_from_picoseconds(t.end) == Approx(end_of_work((k + 1) * ms)).epsilon(1e-9));
    if (k > 0) CHECK(t.start == slowed.ops[0][static_cast<std::size_t>(k - 1)].end);
  }
  CHECK(slowed.step_time == slowed.ops[0][2].end);
}

TEST_CASE("compute stays slowed across a collective that lands as the next one starts", "[step][interference]") {
  // Both ranks issue a second all-reduce right behind the first on their
  // communication stream: data moves without a gap from 1.5 ms for twice
  // the time one takes alone, and rank 0's kernels run at half speed
  // (slowdown 1) through the whole stretch, not full speed at the instant
  // between the two.
  Program program = run_beside_late_collective();
  for (RankProgram& rank : program.programs) {
    rank.append(rank.ops.back(), "all_reduce.second");
  }
  validate_program(program);
  const double ms = 1e-3;
  const workloads::Timeline quiet = simulate_pair(program, 0);
  const double issued = seconds_from_picoseconds(quiet.ops[1][0].end);
  const double first = seconds_from_picoseconds(quiet.ops[0][3].end) - issued;
  REQUIRE(seconds_from_picoseconds(quiet.ops[0][4].end) - issued == Approx(2 * first).epsilon(1e-9));

  const workloads::Timeline slowed = simulate_pair(program, 1.0);
  REQUIRE(slowed.ops[0][4].start == slowed.ops[0][3].end);
  REQUIRE(slowed.ops[0][4].moving == slowed.ops[0][3].end);
  const double moving = 2 * first;
  const auto end_of_work = [&](double work) {
    if (work <= issued) return work;
    if (work <= issued + moving / 2) return issued + 2 * (work - issued);
    return issued + moving + (work - issued - moving / 2);
  };
  for (int k = 0; k < 3; ++k) {
    INFO("k" << k);
    CHECK(seconds_from_picoseconds(slowed.ops[0][static_cast<std::size_t>(k)].end) ==
          Approx(end_of_work((k + 1) * ms)).epsilon(1e-9));
  }
}

TEST_CASE("the same inputs give the same timeline, flow and analytical agree without contention", "[step][determinism]") {
  const Program program = compile(step_config("zero3", 16, 2));
  const workloads::Timeline a = simulate(program), b = simulate(program);
  REQUIRE(a.step_time == b.step_time);
  for (std::size_t r = 0; r < a.ops.size(); ++r) {
    for (std::size_t i = 0; i < a.ops[r].size(); ++i) {
      REQUIRE(a.ops[r][i].start == b.ops[r][i].start);
      REQUIRE(a.ops[r][i].end == b.ops[r][i].end);
    }
  }
  // ZeRO-3 runs one collective at a time per communicator stream, but the
  // gather and reduce streams can overlap and then share links, which only
  // the flow mode sees: the flow step is never shorter.
  const workloads::Timeline analytical = simulate(program, sim::NetworkMode::analytical);
  REQUIRE(a.step_time >= analytical.step_time - picoseconds_from_seconds(1e-9));
  REQUIRE(seconds_from_picoseconds(a.step_time) == Approx(seconds_from_picoseconds(analytical.step_time)).epsilon(0.05));
}

TEST_CASE("flow and analytical modes count the same payload across the spine", "[step][conservation]") {
  // 64 ranks on 8 nodes, two leaves a rail: the gathers and reduce-scatters
  // cross the spine, on protocols and sizes that the flow mode times with
  // link weights above one byte per byte.
  const Program program = compile(step_config("zero3", 64));
  const workloads::Timeline flow = simulate(program), analytical = simulate(program, sim::NetworkMode::analytical);
  REQUIRE(flow.spine_bytes > 0);
  REQUIRE(flow.spine_bytes == Approx(analytical.spine_bytes).epsilon(1e-9));
}

TEST_CASE("a ZeRO-3 step's bytes across the spine are its rings' leaf crossings, call by call",
          "[step][conservation]") {
  // dgx-a100-8node: 8 nodes, 4 to a leaf on every rail. A ring over the 64
  // ranks in node order leaves each leaf once (node 3 to 4, node 7 to 0) on
  // every channel, and each hop of a ring all-gather or reduce-scatter of S
  // bytes carries (n - 1)/n of the channel's share: 2 (n - 1)/n S up to the
  // spine per call, however many channels and whatever the protocol.
  const Program program = compile(step_config("zero3", 64));
  double expected = 0;
  int gathers = 0, scatters = 0;
  for (const Op& op : program.program_of(0).ops) {
    if (op.kind != OpKind::collective) continue;
    INFO(op.name);
    REQUIRE((op.collective == CollectiveOp::all_gather || op.collective == CollectiveOp::reduce_scatter));
    REQUIRE(program.communicators[static_cast<std::size_t>(op.communicator)].groups.size() == 1);
    expected += 2.0 * 63 / 64 * op.bytes;
    (op.collective == CollectiveOp::all_gather ? gathers : scatters) += 1;
  }
  REQUIRE(gathers > 0);
  REQUIRE(scatters > 0);
  REQUIRE(simulate(program).spine_bytes == Approx(expected).epsilon(1e-9));
}

TEST_CASE("timing only some ranks keeps theirs and changes nothing else", "[step][determinism]") {
  const Program program = compile(step_config("zero3", 16, 2));
  const workloads::Timeline all = simulate(program);
  sim::StepSimulationOptions options;
  options.timed_ranks = std::vector<int>{3, 9};
  const workloads::Timeline some =
      sim::simulate(program, world().cluster(), world().router(), world().profile(), options);
  REQUIRE(some.ops.size() == all.ops.size());
  for (std::size_t rank = 0; rank < all.ops.size(); ++rank) {
    INFO("rank " << rank);
    if (rank == 3 || rank == 9) {
      CHECK(some.ops[rank] == all.ops[rank]);
    } else {
      CHECK(some.ops[rank].empty());
    }
  }
  CHECK(some.step_time == all.step_time);
  CHECK(some.events == all.events);
  CHECK(some.link_bytes == all.link_bytes);
  for (std::size_t rank = 0; rank < all.peak_memory.size(); ++rank) {
    CHECK(some.peak_memory[rank].total_bytes == all.peak_memory[rank].total_bytes);
  }
  options.timed_ranks = std::vector<int>{16};
  REQUIRE_THROWS_AS(sim::simulate(program, world().cluster(), world().router(), world().profile(), options),
                    std::invalid_argument);
}

TEST_CASE("collectives issued in crossed orders deadlock, and the error names the op that cannot end",
          "[step][collective]") {
  // Rank 0 calls on communicator a then b, rank 1 on b then a, one stream
  // each: each waits in its first call for the other.
  Program program;
  program.ranks = 2;
  program.streams = {"communication"};
  program.communicators.push_back(make_communicator("a", 2, [](int) { return 0; }));
  program.communicators.push_back(make_communicator("b", 2, [](int) { return 0; }));
  for (int rank = 0; rank < 2; ++rank) {
    RankProgram p;
    for (int communicator : rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}) {
      Op all_reduce;
      all_reduce.kind = OpKind::collective;
      all_reduce.collective = CollectiveOp::all_reduce;
      all_reduce.communicator = communicator;
      all_reduce.bytes = 1 << 20;
      p.append(all_reduce, std::string("all_reduce_") + (communicator == 0 ? "a" : "b"));
    }
    program.programs.push_back(p);
    program.program_of_rank.push_back(rank);
  }
  validate_program(program);
  REQUIRE_THROWS_WITH(simulate_pair(program),
                      Catch::Contains("deadlocks") && Catch::Contains("all_reduce_a of rank 0 never ends"));
}

TEST_CASE("a Program survives JSON and a broken one is refused", "[step][program]") {
  const Program program = compile(step_config("mics-8", 16, 2));
  const nlohmann::json document = program_to_json(program);
  const Program back = program_from_json(document, "program.json");
  REQUIRE(program_to_json(back) == document);
  nlohmann::json broken = document;
  broken["programs"][0]["ops"][3]["deps"] = {5};
  REQUIRE_THROWS_WITH(program_from_json(broken, "program.json"), Catch::Contains("depends on a later op"));
  nlohmann::json mismatched = document;
  mismatched["program_of_rank"][1] = 1;
  mismatched["programs"].push_back(document["programs"][0]);
  for (auto& op : mismatched["programs"][1]["ops"]) {
    if (op["kind"] == "collective") {
      op["bytes"] = op["bytes"].get<double>() + 2;
      break;
    }
  }
  REQUIRE_THROWS_WITH(program_from_json(mismatched, "program.json"), Catch::Contains("disagrees with its group"));
}
