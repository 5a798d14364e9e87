// The table of which algorithm runs which collective
// (workloads/ir/algorithm_support.h) against NCCL's own: ring runs the
// reductions, gathers and broadcasts; tree, NVLS and NVLS tree only
// all-reduce (NCCL 2.18+ src/enqueue.cc: its other collectives on NVLS save
// SMs, not time, and shardsim leaves them out); point-to-point calls go
// directly; the hierarchical all-reduce is a framework's composition of ring
// calls, never NCCL's own choice. The profile reader, the selection and each
// algorithm read this one table.
#include "calib/profile.h"
#include "fixtures.h"
#include "sim/collectives/collective_algorithm.h"
#include "sim/collectives/group.h"
#include "topology/base/json_input.h"
#include "workloads/ir/algorithm_support.h"

#include <catch2/catch.hpp>

#include <set>

using namespace shardsim::workloads;

TEST_CASE("every algorithm has one entry in the support table", "[collectives][support]") {
  std::set<Algorithm> listed;
  for (const auto& entry : algorithm_support()) {
    INFO(to_string(entry.algorithm));
    REQUIRE(listed.insert(entry.algorithm).second);
    REQUIRE_FALSE(entry.ops.empty());
  }
  REQUIRE(listed.size() == all_algorithms().size());
}

TEST_CASE("the support table says what NCCL runs", "[collectives][support]") {
  using Op = CollectiveOp;
  // NCCL's selection tries, for an all-reduce, every algorithm it has.
  CHECK(nccl_algorithms(Op::all_reduce) ==
        std::vector<Algorithm>{Algorithm::ring, Algorithm::tree, Algorithm::nvls, Algorithm::nvls_tree});
  for (Op op : {Op::all_gather, Op::reduce_scatter, Op::broadcast, Op::reduce}) {
    CHECK(nccl_algorithms(op) == std::vector<Algorithm>{Algorithm::ring});
  }
  for (Op op : {Op::all_to_all, Op::send_recv, Op::send}) {
    CHECK(nccl_algorithms(op) == std::vector<Algorithm>{Algorithm::direct});
  }
  // Every op has an algorithm NCCL would choose.
  for (Op op : all_collective_ops()) CHECK_FALSE(nccl_algorithms(op).empty());

  // The hierarchical scheme runs all-reduce when asked for, on ring's parameters.
  CHECK(algorithm_runs(Algorithm::hierarchical, Op::all_reduce));
  CHECK_FALSE(profile_calibrates(Op::all_reduce, Algorithm::hierarchical));
  CHECK(profile_calibrates(Op::all_reduce, Algorithm::nvls_tree));
  CHECK_FALSE(profile_calibrates(Op::all_gather, Algorithm::tree));
  CHECK_FALSE(profile_calibrates(Op::send, Algorithm::ring));
}

TEST_CASE("an algorithm refuses what the table says it does not run, with the table's reason",
          "[collectives][support]") {
  CHECK(op_refusal(Algorithm::ring, CollectiveOp::all_to_all) == "ring does not implement all_to_all (use direct)");
  CHECK(op_refusal(Algorithm::ring, CollectiveOp::send) == "ring does not implement send (use direct)");
  CHECK(op_refusal(Algorithm::tree, CollectiveOp::all_gather) == "tree only implements all_reduce (as in NCCL)");
  CHECK(op_refusal(Algorithm::ring, CollectiveOp::all_reduce).empty());
  // The algorithms themselves give the same answer for every op, whatever
  // the group (a group's shape can only add refusals).
  const shardsim::test::World world("dgx-a100-2node");
  const auto all = world.all();
  for (const auto& entry : algorithm_support()) {
    for (CollectiveOp op : all_collective_ops()) {
      INFO(to_string(entry.algorithm) << " " << to_string(op));
      const std::string reason = shardsim::sim::collective_algorithm(entry.algorithm).unsupported_reason(op, all);
      if (!algorithm_runs(entry.algorithm, op)) CHECK(reason == op_refusal(entry.algorithm, op));
    }
  }
}

TEST_CASE("a profile may hold exactly the entries the table calibrates", "[collectives][support][profile]") {
  // The uniform test profile, with one entry added for an op the algorithm
  // does not run: the reader refuses it, naming the entry.
  nlohmann::json document = shardsim::test::uniform_profile_json(1e-6);
  document["collectives"]["all_gather"]["tree"] = document["collectives"]["all_reduce"]["tree"];
  REQUIRE_THROWS_WITH(shardsim::calib::parse_profile(document, "p.json"),
                      Catch::Contains("collectives.all_gather.tree") && Catch::Contains("is not an algorithm of"));
}
