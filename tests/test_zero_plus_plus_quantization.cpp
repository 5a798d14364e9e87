// ZeRO++'s quantized communication (zero_plus_plus_quantization.h) against closed
// forms on 16 GPUs in two nodes of 8: qwZ gathers one byte per parameter
// instead of two; qgZ reduces every gradient element once per micro-batch
// through two int4 all-to-alls, M / 2 bytes inside the node and M / 16
// across nodes, in place of the reduce-scatter, and keeps the reduce-scatter
// within one node; plan and DeepSpeed-config switches are checked.
#include "fixtures.h"
#include "pipeline_checks.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/deepspeed_config.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <map>
#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

constexpr int kGpus = 16, kPerNode = 8;

// ZeRO-3 gathering every parameter for the forward and again for the
// backward, as the traffic test of test_step.cpp sets it up.
StepConfig zero3(bool weights, bool gradients, int gpus = kGpus, int micro_batches = 1) {
  StepConfig config = test::pipeline_step("zero3", 2, gpus, micro_batches);
  config.plan.buckets.persistence_threshold_parameters = 0;
  config.plan.buckets.prefetch_bytes = 0;
  config.plan.buckets.max_reuse_distance_parameters = 0;
  config.plan.quantized_weights = weights;
  config.plan.quantized_gradients = gradients;
  return config;
}

double psi(const StepConfig& config) { return static_cast<double>(count_parameters(config.model).total()); }

struct CallTotals {
  std::map<std::string, double> bytes;  // by communicator name
  std::map<std::string, int> calls;
  std::map<std::string, double> kernel_bytes;  // HBM bytes of the quantization kernels, by kernel
};

CallTotals totals(const Program& program, int rank) {
  CallTotals t;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind == OpKind::collective) {
      const std::string& name = program.communicators[static_cast<std::size_t>(op.communicator)].name;
      const std::string key = name + " " + std::string(to_string(op.collective));
      t.bytes[key] += op.bytes;
      ++t.calls[key];
    }
    for (const char* kernel : {"qwz.quantize", "qwz.dequantize", "qgz.quantize", "qgz.reduce", "qgz.dequantize"}) {
      if (op.kind == OpKind::compute && op.name.ends_with(kernel)) t.kernel_bytes[kernel] += op.hbm_bytes;
    }
  }
  return t;
}

}  // namespace

TEST_CASE("qwZ gathers one byte per parameter, quantizing the shard before and dequantizing after",
          "[step][zeropp][quantized]") {
  const StepConfig config = zero3(true, false);
  const double p = psi(config), ring = (kGpus - 1.0) / kGpus;
  const Program program = compile(config);
  validate_program(program);
  const Program plain = compile(zero3(false, false));
  // Forward and backward gather Psi each: 2 Psi bytes in int8 against 4 Psi
  // in bf16; the reduce-scatter keeps its 2 Psi.
  REQUIRE(bytes_sent_per_rank(plain, 3) == Approx(ring * 6 * p).epsilon(1e-12));
  REQUIRE(bytes_sent_per_rank(program, 3) == Approx(ring * (2 * p + 2 * p)).epsilon(1e-12));
  const CallTotals t = totals(program, 3);
  REQUIRE(t.calls.at("parameters all_gather") == totals(plain, 3).calls.at("parameters all_gather"));
  // Quantize: read 2, write 1 byte per shard element; dequantize: read 1,
  // write 2 per gathered element.
  REQUIRE(t.kernel_bytes.at("qwz.quantize") == Approx(3 * 2 * p / kGpus));
  REQUIRE(t.kernel_bytes.at("qwz.dequantize") == Approx(3 * 2 * p));
  // Each gather waits for its quantize and its dequantize for it, on the gather stream.
  const auto& ops = program.program_of(3).ops;
  int gathers = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::collective || ops[i].collective != CollectiveOp::all_gather) continue;
    ++gathers;
    INFO(ops[i].name);
    REQUIRE(ops[i].deps.size() == 1);
    REQUIRE(ops[ops[i].deps.front()].name.ends_with("qwz.quantize"));
    REQUIRE(ops[i + 1].name.ends_with("qwz.dequantize"));
    REQUIRE(std::vector<std::uint32_t>(ops[i + 1].deps.begin(), ops[i + 1].deps.end()) ==
            std::vector<std::uint32_t>{static_cast<std::uint32_t>(i)});
    REQUIRE(ops[i + 1].stream == ops[i].stream);
  }
  REQUIRE(gathers == t.calls.at("parameters all_gather"));
  test::require_consistent_step(program, test::pipeline_world());
}

TEST_CASE("qgZ reduces every gradient once per micro-batch by two int4 all-to-alls, only M / 16 across nodes",
          "[step][zeropp][quantized]") {
  const int micro_batches = 2;
  const StepConfig config = zero3(false, true, kGpus, micro_batches);
  const double p = psi(config);
  const Program program = compile(config);
  validate_program(program);
  const CallTotals t = totals(program, 5);
  REQUIRE(t.bytes.count("parameters reduce_scatter") == 0);
  // Every gradient element once per micro-batch: Psi / 2 bytes of int4 in the
  // node's all-to-all buffers, Psi / 16 in the cross-node ones.
  REQUIRE(t.bytes.at("qgz_intra_node all_to_all") == Approx(micro_batches * p / 2));
  REQUIRE(t.bytes.at("qgz_inter_node all_to_all") == Approx(micro_batches * p / 16));
  REQUIRE(t.calls.at("qgz_intra_node all_to_all") == t.calls.at("qgz_inter_node all_to_all"));
  // The node's 8 GPUs, and the 2 GPUs with the same place in their nodes.
  REQUIRE(test::communicator_named(program, "qgz_intra_node").group_of(5) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(test::communicator_named(program, "qgz_inter_node").group_of(5) == std::vector<int>{5, 13});
  // Against the reduce-scatter's 2 Psi (n - 1) / n per micro-batch, of which
  // 15/16 leave the node in a ring: qgZ sends Psi / 32 across nodes.
  const double ring = (kGpus - 1.0) / kGpus;
  REQUIRE(bytes_sent_per_rank(program, 5) ==
          Approx(micro_batches * (ring * 4 * p + 7.0 / 8 * p / 2 + 1.0 / 2 * p / 16)).epsilon(1e-12));
  // Quantize reads 2 and writes 1/2 byte per element; the reduce reads the
  // node's 1/2 byte per element and writes 1/16; the last step reads that,
  // dequantizes 1/8 of the elements (2 bytes, written and read) and writes
  // this rank's 1/16 of them.
  REQUIRE(t.kernel_bytes.at("qgz.quantize") == Approx(micro_batches * 2.5 * p));
  REQUIRE(t.kernel_bytes.at("qgz.reduce") == Approx(micro_batches * (p / 2 + p / 16)));
  REQUIRE(t.kernel_bytes.at("qgz.dequantize") == Approx(micro_batches * (p / 16 + 4 * p / 8 + 2 * p / 16)));
  test::require_consistent_step(program, test::pipeline_world());

  SECTION("within one node DeepSpeed keeps the reduce-scatter") {
    const Program one_node = compile(zero3(false, true, kPerNode, micro_batches));
    REQUIRE(bytes_sent_per_rank(one_node, 2) ==
            Approx(bytes_sent_per_rank(compile(zero3(false, false, kPerNode, micro_batches)), 2)));
    REQUIRE(totals(one_node, 2).bytes.count("qgz_intra_node all_to_all") == 0);
  }
}

TEST_CASE("quantized communication is refused where ZeRO++ does not run it, naming the field", "[zeropp][plan]") {
  nlohmann::json plan = nlohmann::json::parse(R"({
    "name": "q", "system": "zero", "factors": {"parameters": 1, "gradients": 1, "optimizer": "all"},
    "secondary_parameter_group": 1,
    "buckets": {"reduce_bytes": 1e9, "all_gather_bytes": 1e9, "prefetch_bytes": 0, "persistence_threshold_parameters": 0},
    "overlap": {"gather_scatter": true, "optimizer_all_reduce": true, "parameter_broadcast": true},
    "behaviour": "as_implemented", "multi_rank_bucketing": false, "flat_all_gather": false,
    "quantized_weights": true, "sources": ["test"]})");
  REQUIRE_THROWS_WITH(parse_plan(plan, "q.json"), Catch::Contains("q.json") && Catch::Contains("quantized_weights") &&
                                                       Catch::Contains("ZeRO-3"));
  plan["factors"] = {{"parameters", 8}, {"gradients", 8}, {"optimizer", 8}};
  REQUIRE(parse_plan(plan, "q.json").quantized_weights);
  plan["quantized_gradients"] = true;
  REQUIRE_THROWS_WITH(parse_plan(plan, "q.json"), Catch::Contains("quantized_gradients") && Catch::Contains("\"all\""));
  plan["factors"]["parameters"] = "all";
  plan["factors"]["gradients"] = "all";
  plan["factors"]["optimizer"] = "all";
  const Plan both = parse_plan(plan, "q.json");
  REQUIRE((both.quantized_weights && both.quantized_gradients));

  const ModelSpec model = test::small_pipeline_model(2);
  const auto deepspeed = [&](int stage) {
    return nlohmann::json{{"train_micro_batch_size_per_gpu", 1},
                          {"zero_optimization",
                           {{"stage", stage}, {"zero_quantized_weights", true}, {"zero_quantized_gradients", true}}}};
  };
  const DeepSpeedConfig imported = parse_deepspeed_config(deepspeed(3), "ds.json", model);
  REQUIRE((imported.plan.quantized_weights && imported.plan.quantized_gradients));
  REQUIRE(imported.plan.name == "deepspeed-zero3-qwz-qgz");
  REQUIRE_THROWS_WITH(parse_deepspeed_config(deepspeed(2), "ds.json", model),
                      Catch::Contains("ds.json") && Catch::Contains("zero_optimization.zero_quantized_weights"));
}
