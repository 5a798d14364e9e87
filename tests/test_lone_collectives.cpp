// Lone collectives: which groups never share a link with another group, and
// the shortcut that gives their calls the time they take alone, checked
// against playing their flows on the shared network.
#include "fixtures.h"
#include "pipeline_checks.h"
#include "sim/collective_runner.h"
#include "sim/step/collective_choices.h"
#include "sim/step/lone_collectives.h"
#include "sim/step/step_simulator.h"
#include "workloads/compile/step_compiler.h"

#include <catch2/catch.hpp>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

const test::World& world() { return test::pipeline_world(); }  // 2 nodes of 8 GPUs, rank r on GPU r

struct Call {
  std::string communicator;
  CollectiveOp op;
  int stream;
};

// 16 ranks, each making `calls` of 1 MiB in order on the communicators
// "quads" (GPUs 0-3, 4-7, 8-11, 12-15: NVLink only) and "nodes" (GPUs 0-7,
// 8-15).
Program calls_program(const std::vector<Call>& calls) {
  Program program;
  program.ranks = 16;
  program.streams = {"a", "b"};
  program.communicators.push_back(make_communicator("quads", 16, [](int rank) { return rank / 4; }));
  program.communicators.push_back(make_communicator("nodes", 16, [](int rank) { return rank / 8; }));
  RankProgram ops;
  for (const Call& call : calls) {
    Op op;
    op.kind = OpKind::collective;
    op.stream = call.stream;
    op.collective = call.op;
    op.communicator = call.communicator == "quads" ? 0 : 1;
    op.bytes = 1 << 20;
    ops.append(op, call.communicator + "." + std::string(to_string(call.op)));
  }
  program.programs.push_back(ops);
  program.program_of_rank.assign(16, 0);
  validate_program(program);
  return program;
}

struct Lone {
  sim::CollectiveChoices choices{world().cluster(), world().router(), world().profile()};
  std::unique_ptr<sim::LoneCollectives> lone;

  explicit Lone(const Program& program) {
    lone = std::make_unique<sim::LoneCollectives>(
        program, world().cluster(), world().profile(),
        [&](int communicator, int group, CollectiveOp op, int root, double bytes) {
          const auto& ranks = program.communicators[static_cast<std::size_t>(communicator)].groups[static_cast<std::size_t>(group)];
          auto& chosen = choices.group({ranks.begin(), ranks.end()}, {op, root});
          return chosen.plan(chosen.choose(bytes));
        });
  }
  int lone_groups(int communicator) const {
    int count = 0;
    for (int g = 0; g < (communicator == 0 ? 4 : 2); ++g) count += lone->lone(communicator, g) ? 1 : 0;
    return count;
  }
};

}  // namespace

TEST_CASE("a group is lone when no other group's calls cross its links and its own calls cannot overlap",
          "[step][lone]") {
  using enum CollectiveOp;
  // Four quads on disjoint NVLinks, nothing else: all lone, though a node holds two.
  CHECK(Lone(calls_program({{"quads", all_gather, 0}, {"quads", reduce_scatter, 0}})).lone_groups(0) == 4);
  // A node-wide all-reduce crosses every quad's NVLinks: nobody is lone.
  const Lone shared(calls_program({{"quads", all_gather, 0}, {"nodes", all_reduce, 0}}));
  CHECK(shared.lone_groups(0) == 0);
  CHECK(shared.lone_groups(1) == 0);
  // Each node alone on its NVLinks is lone when the quads are gone.
  CHECK(Lone(calls_program({{"nodes", all_reduce, 0}, {"nodes", all_gather, 0}})).lone_groups(1) == 2);
  // Calls of one communicator on two streams may run at once: not lone.
  CHECK(Lone(calls_program({{"quads", all_gather, 0}, {"quads", reduce_scatter, 1}})).lone_groups(0) == 0);
  // A broadcast's plan is built per root: never lone, and its ring still counts
  // against the others.
  const Lone chains(calls_program({{"quads", broadcast, 0}, {"nodes", all_gather, 1}}));
  CHECK(chains.lone_groups(0) == 0);
  CHECK(chains.lone_groups(1) == 0);
}

TEST_CASE("a lone call takes its time alone on the network, and its bytes count on its links", "[step][lone]") {
  const Program program = calls_program({{"quads", CollectiveOp::all_gather, 0}});
  Lone lone(program);
  REQUIRE(lone.lone->lone(0, 1));
  auto& group = lone.choices.group({4, 5, 6, 7}, {CollectiveOp::all_gather, 0});
  const auto plan = group.plan(group.choose(1 << 20));
  const sim::CollectiveRun alone = sim::simulate_collective(world().cluster(), world().profile(), plan, 1 << 20, true);
  for (int call = 0; call < 3; ++call) CHECK(lone.lone->duration(lone.lone->alone(plan, 1 << 20)) == alone.duration);
  std::vector<double> bytes(alone.link_bytes.size(), 0.0);
  lone.lone->add_link_bytes(bytes);
  for (std::size_t link = 0; link < bytes.size(); ++link) CHECK(bytes[link] == Approx(3 * alone.link_bytes[link]));
}

TEST_CASE("Megatron steps give the same timeline whether lone groups' calls take the shortcut or play their flows",
          "[step][lone]") {
  for (const auto& [tensor, pipeline, data] : {std::tuple{8, 2, 1}, std::tuple{4, 2, 2}, std::tuple{2, 2, 4}}) {
    StepConfig config = test::pipeline_step("megatron-dp", 4, data, 4);
    config.plan.model_parallel = {tensor, pipeline, 1, true};
    const Program program = compile(config);
    INFO("t " << tensor << " p " << pipeline << " d " << data);
    sim::StepSimulationOptions options;
    const workloads::Timeline shortcut =
        sim::simulate(program, world().cluster(), world().router(), world().profile(), options);
    options.lone_shortcut = false;
    const workloads::Timeline flows =
        sim::simulate(program, world().cluster(), world().router(), world().profile(), options);
    CHECK(shortcut.ops == flows.ops);
    CHECK(shortcut.step_time == flows.step_time);
    REQUIRE(shortcut.link_bytes.size() == flows.link_bytes.size());
    for (std::size_t link = 0; link < flows.link_bytes.size(); ++link) {
      CHECK(shortcut.link_bytes[link] == Approx(flows.link_bytes[link]).epsilon(1e-12));
    }
    // Tensor-parallel groups inside a node: the shortcut is taken.
    CHECK(shortcut.events < flows.events);
  }
}
