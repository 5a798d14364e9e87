// Tensor-parallel communication overlap (Megatron-LM's --tp-comm-overlap,
// Transformer Engine's userbuffers): the same bytes and FLOPs as sequence
// parallelism without it, cut into the slices TE's defaults give (ring
// exchange in t steps, pipelined reduce-scatter in 4), and each slice
// starting as soon as the data it needs has arrived.
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/report/step_report.h"
#include "sim/step/step_simulator.h"
#include "topology/base/presets.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

constexpr int kLayers = 4;

StepConfig megatron_sp(int tensor, int pipeline, int data, int micro_batches, bool overlap) {
  StepConfig config = test::pipeline_step("megatron-dp", kLayers, data, micro_batches);
  config.plan.model_parallel = {tensor, pipeline, 1, true};
  config.plan.model_parallel.tp_comm_overlap = overlap;
  return config;
}

bool on_tensor_group(const Program& program, const Op& op) {
  return op.kind == OpKind::collective &&
         program.communicators[static_cast<std::size_t>(op.communicator)].name == "tensor_parallel";
}

// Bytes a rank sends over its tensor-parallel group: a ring all-gather or
// reduce-scatter sends (t - 1) / t of its buffer, a send_recv all of it.
double tensor_bytes_sent(const Program& program, int rank, int t) {
  double sent = 0;
  for (const Op& op : program.program_of(rank).ops) {
    if (!on_tensor_group(program, op)) continue;
    switch (op.collective) {
      case CollectiveOp::send_recv: sent += op.bytes; break;
      case CollectiveOp::all_reduce: sent += 2.0 * (t - 1) / t * op.bytes; break;
      default: sent += (t - 1.0) / t * op.bytes;
    }
  }
  return sent;
}

struct ComputeTotals {
  double flops = 0;
  int gemms = 0;
};

ComputeTotals compute_totals(const Program& program, int rank) {
  ComputeTotals totals;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind != OpKind::compute) continue;
    totals.flops += op.flops;
    if (op.kernel == KernelClass::gemm) ++totals.gemms;
  }
  return totals;
}

int count_calls(const Program& program, int rank, CollectiveOp kind) {
  int n = 0;
  for (const Op& op : program.program_of(rank).ops) n += on_tensor_group(program, op) && op.collective == kind;
  return n;
}

}  // namespace

TEST_CASE("TP comm overlap sends the bytes and runs the FLOPs of sequence parallelism, in TE's slices",
          "[megatron][tp-overlap]") {
  const int m = 2;
  for (int t : {2, 4, 8}) {
    INFO("t " << t);
    const Program plain = compile(megatron_sp(t, 1, 1, m, false));
    const Program overlap = compile(megatron_sp(t, 1, 1, m, true));
    validate_program(overlap);
    for (int rank = 0; rank < t; ++rank) {
      REQUIRE(tensor_bytes_sent(overlap, rank, t) == Approx(tensor_bytes_sent(plain, rank, t)).epsilon(1e-12));
      REQUIRE(compute_totals(overlap, rank).flops == Approx(compute_totals(plain, rank).flops).epsilon(1e-12));
    }
    // Per layer and micro-batch: QKV and gate/up forward in t slices each,
    // the output projection and down forward in 4, and the two row-parallel
    // input gradients in t; one GEMM each before.
    const int extra_gemms = m * kLayers * ((2 * t + 2 * 4 + 2 * t) - 6);
    REQUIRE(compute_totals(overlap, 0).gemms - compute_totals(plain, 0).gemms == extra_gemms);
    // Two gathers forward and two backward become t - 1 ring steps each; the
    // LM head and embedding keep their gathers.
    REQUIRE(count_calls(overlap, 0, CollectiveOp::send_recv) == m * kLayers * 4 * (t - 1));
    REQUIRE(count_calls(plain, 0, CollectiveOp::send_recv) == 0);
    REQUIRE(count_calls(plain, 0, CollectiveOp::all_gather) - count_calls(overlap, 0, CollectiveOp::all_gather) ==
            m * kLayers * 4);
    // Two forward reduce-scatters per layer become four each.
    REQUIRE(count_calls(overlap, 0, CollectiveOp::reduce_scatter) - count_calls(plain, 0, CollectiveOp::reduce_scatter) ==
            m * kLayers * 2 * 3);
  }
}

TEST_CASE("each GEMM slice starts as soon as its slice of the input has arrived and the slice before it has run",
          "[megatron][tp-overlap]") {
  const int t = 4;
  const Program program = compile(megatron_sp(t, 1, 1, 1, true));
  for (sim::NetworkMode network : {sim::NetworkMode::flow, sim::NetworkMode::analytical}) {
    INFO("network " << static_cast<int>(network));
    const workloads::Timeline timeline = test::simulate_on(program, test::pipeline_world(), network);
    std::map<std::string, workloads::OpTiming> at;
    const auto& ops = program.program_of(0).ops;
    for (std::size_t i = 0; i < ops.size(); ++i) at[std::string(ops[i].name)] = timeline.ops[0][i];
    for (const std::string layer : {"mb0.layer0.attention.", "mb0.layer2.mlp."}) {
      INFO(layer);
      const std::string gemm = layer + (layer.find("attention") != std::string::npos ? "qkv" : "gate_up");
      const std::string norm = layer + (layer.find("attention") != std::string::npos ? "attention_norm" : "mlp_norm");
      // Ring steps back to back on the tensor-parallel stream from the norm's
      // end, the first slice (this GPU's own tokens) beside the first step.
      REQUIRE(at.at(gemm + ".input.ring1").start == at.at(norm).end);
      REQUIRE(at.at(gemm + ".slice0").start == at.at(norm).end);
      for (int i = 1; i < t; ++i) {
        const std::string slice = gemm + ".slice" + std::to_string(i), ring = gemm + ".input.ring" + std::to_string(i);
        if (i > 1) REQUIRE(at.at(ring).start == at.at(gemm + ".input.ring" + std::to_string(i - 1)).end);
        REQUIRE(at.at(slice).start ==
                std::max(at.at(gemm + ".slice" + std::to_string(i - 1)).end, at.at(ring).end));
      }
      // The row-parallel GEMM: each slice reduce-scattered once it and the
      // slice before's reduce-scatter are done; the residual after the last.
      const std::string row = layer + (layer.find("attention") != std::string::npos ? "out_proj" : "down");
      for (int i = 0; i < 4; ++i) {
        const std::string slice = row + ".slice" + std::to_string(i);
        const TimePs previous = i == 0 ? 0 : at.at(row + ".slice" + std::to_string(i - 1) + ".reduce_scatter").end;
        REQUIRE(at.at(slice + ".reduce_scatter").start == std::max(at.at(slice).end, previous));
        if (i > 0) REQUIRE(at.at(slice).start == at.at(row + ".slice" + std::to_string(i - 1)).end);
      }
      REQUIRE(at.at(layer + "residual").start ==
              std::max(at.at(row + ".slice3").end, at.at(row + ".slice3.reduce_scatter").end));
    }
  }
}

TEST_CASE("TP comm overlap hides most of the forward's tensor-parallel communication, steps stay consistent",
          "[megatron][tp-overlap]") {
  // LLaMA-7B's layer widths, so the GEMM slices outlast the ring steps.
  const auto wide = [](bool overlap) {
    StepConfig config = megatron_sp(8, 1, 1, 1, overlap);
    config.model.hidden = 4096;
    config.model.heads = 32;
    config.model.kv_heads = 32;
    config.model.head_dim = 128;
    config.model.ffn_hidden = 11008;
    config.training.sequence_length = 1024;
    config.model.max_positions = 1024;
    return config;
  };
  const test::World& world = test::pipeline_world();
  const auto exposed = [&](bool overlap) {
    const Program program = compile(wide(overlap));
    const workloads::Timeline timeline = test::simulate_on(program, world, sim::NetworkMode::flow);
    return sim::time_breakdown(program, timeline, 0);
  };
  const sim::TimeBreakdown plain = exposed(false), overlap = exposed(true);
  const auto of = [](const sim::TimeBreakdown& b, CollectiveOp op) { return b.exposed_seconds[static_cast<std::size_t>(op)]; };
  INFO("plain exposed " << plain.exposed_total() << " s, overlap " << overlap.exposed_total() << " s");
  // Without the overlap every gather before a forward GEMM is exposed; with
  // it, only the LM head's is, and the ring steps hide behind the slices.
  REQUIRE(of(overlap, CollectiveOp::all_gather) + of(overlap, CollectiveOp::send_recv) <
          0.5 * of(plain, CollectiveOp::all_gather));
  REQUIRE(overlap.exposed_total() < plain.exposed_total());

  StepConfig recompute = megatron_sp(2, 2, 4, 4, true);
  recompute.training.recompute = Recompute::full;
  for (const StepConfig& config : {megatron_sp(2, 2, 4, 4, true), megatron_sp(8, 2, 1, 2, true), recompute}) {
    const Program program = compile(config);
    validate_program(program);
    test::require_consistent_step(program, world);
  }
}

TEST_CASE("tp_comm_overlap needs sequence parallelism, in plans and in Megatron launches", "[megatron][tp-overlap][input]") {
  nlohmann::json document =
      nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-tp8-sp.json"));
  document["model_parallel"]["tp_comm_overlap"] = true;
  REQUIRE(parse_plan(document, "p.json").model_parallel.tp_comm_overlap);
  document["model_parallel"]["sequence_parallel"] = false;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      Catch::Contains("p.json: model_parallel.tp_comm_overlap") && Catch::Contains("sequence_parallel"));
  document["model_parallel"]["tp_comm_overlap"] = "yes";
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel.tp_comm_overlap"));
}
