// MiCS's hierarchical parameter gather (DeepSpeed's
// mics_hierarchical_params_gather) against closed forms: a MiCS group of 16
// over two nodes of 8 gathers each module by an all-gather of 1/8 of it
// between the two GPUs with the same place in their nodes, then one of the
// whole module inside each node; the bytes each GPU sends follow, and the
// plan switch is MiCS's alone.
#include "fixtures.h"
#include "pipeline_checks.h"
#include "workloads/compile/step_compiler.h"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// MiCS-16 on 32 GPUs, gathering every parameter for the forward and again
// for the backward (no persistent tensors, no reuse across the turn).
StepConfig mics16(bool hierarchical) {
  StepConfig config = test::pipeline_step("mics-16", 2, 32, 1);
  config.plan.buckets.persistence_threshold_parameters = 0;
  config.plan.buckets.prefetch_bytes = 0;
  config.plan.buckets.max_reuse_distance_parameters = 0;
  config.plan.hierarchical_parameter_gather = hierarchical;
  return config;
}

double gathered_bytes_sent(const Program& program, int rank, const std::string& communicator) {
  double sent = 0;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind != OpKind::collective || op.collective != CollectiveOp::all_gather) continue;
    const Communicator& c = program.communicators[static_cast<std::size_t>(op.communicator)];
    if (c.name == communicator) sent += (c.group_size() - 1.0) / c.group_size() * op.bytes;
  }
  return sent;
}

}  // namespace

TEST_CASE("MiCS's hierarchical gather: 1/G of each module across nodes, then the module inside the node",
          "[step][mics]") {
  const StepConfig config = mics16(true);
  const double psi = static_cast<double>(count_parameters(config.model).total()), e = 2;
  const Program flat = compile(mics16(false));
  const Program program = compile(config);
  validate_program(program);
  // Flat: the forward and the backward gather Psi over the 16 GPUs of the group.
  REQUIRE(gathered_bytes_sent(flat, 9, "parameters") == Approx(2 * e * psi * 15 / 16));
  // Two hops: e Psi / 8 between 2 GPUs (half of it sent), then e Psi among 8 (7/8 of it).
  REQUIRE(gathered_bytes_sent(program, 9, "parameters") == 0);
  REQUIRE(gathered_bytes_sent(program, 9, "parameters_inter_node") == Approx(2 * e * psi / 8 / 2));
  REQUIRE(gathered_bytes_sent(program, 9, "parameters_intra_node") == Approx(2 * e * psi * 7 / 8));
  // The same GPU place in the group's two nodes; rank 9's node; nothing outside its MiCS group.
  REQUIRE(test::communicator_named(program, "parameters_inter_node").group_of(9) == std::vector<int>{1, 9});
  REQUIRE(test::communicator_named(program, "parameters_inter_node").group_of(17) == std::vector<int>{17, 25});
  REQUIRE(test::communicator_named(program, "parameters_intra_node").group_of(9) ==
          std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  // Everything else (the gradient reduce-scatter and the replica all-reduce) is unchanged.
  REQUIRE(bytes_sent_per_rank(program, 9) - gathered_bytes_sent(program, 9, "parameters_inter_node") -
              gathered_bytes_sent(program, 9, "parameters_intra_node") ==
          Approx(bytes_sent_per_rank(flat, 9) - gathered_bytes_sent(flat, 9, "parameters")));
  static const test::World world("dgx-a100-8node");
  test::require_consistent_step(program, world);

  SECTION("a group inside one node has nothing to gather across nodes") {
    StepConfig mics8 = test::pipeline_step("mics-8", 2, 32, 1);
    mics8.plan.hierarchical_parameter_gather = true;
    for (const Communicator& c : compile(mics8).communicators) REQUIRE(c.name != "parameters_inter_node");
  }
}

TEST_CASE("the hierarchical gather is a MiCS plan's, and the old gradient field is refused with its successor",
          "[mics][plan]") {
  nlohmann::json plan = nlohmann::json::parse(R"({
    "name": "h", "system": "zero", "factors": {"parameters": "all", "gradients": "all", "optimizer": "all"},
    "secondary_parameter_group": 1, "hierarchical_parameter_gather": true,
    "buckets": {"reduce_bytes": 1e9, "all_gather_bytes": 1e9, "prefetch_bytes": 0, "persistence_threshold_parameters": 0},
    "overlap": {"gather_scatter": true, "optimizer_all_reduce": true, "parameter_broadcast": true},
    "behaviour": "as_implemented", "multi_rank_bucketing": false, "flat_all_gather": false, "sources": ["t"]})");
  REQUIRE_THROWS_WITH(parse_plan(plan, "h.json"),
                      Catch::Contains("h.json") && Catch::Contains("hierarchical_parameter_gather") &&
                          Catch::Contains("MiCS"));
  plan["system"] = "mics";
  REQUIRE(parse_plan(plan, "h.json").hierarchical_parameter_gather);
  plan.erase("hierarchical_parameter_gather");
  REQUIRE_FALSE(parse_plan(plan, "h.json").hierarchical_parameter_gather);
  plan["hierarchical_gradient_reduction"] = true;
  REQUIRE_THROWS_WITH(parse_plan(plan, "h.json"), Catch::Contains("hierarchical_gradient_reduction") &&
                                                      Catch::Contains("hierarchical_parameter_gather"));
}
