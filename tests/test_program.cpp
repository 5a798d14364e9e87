// RankProgram's storage: an op's name and dependencies are copies the rank
// program owns, so they outlive the strings and lists they were appended
// from, the program they were read from (copies share the storage), and a
// move of the program.
#include "workloads/ir/program.h"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

using namespace shardsim::workloads;

namespace {

std::vector<std::uint32_t> deps_of(const Op& op) { return {op.deps.begin(), op.deps.end()}; }

// Ops "op0" .. "op<n-1>", each after every op before it, appended from
// strings and lists that are overwritten right after.
RankProgram chain(int n) {
  RankProgram program;
  std::string name;
  std::vector<std::uint32_t> deps;
  for (int i = 0; i < n; ++i) {
    name = "op" + std::to_string(i);
    program.append(make_op(OpKind::compute, 0), name, deps);
    deps.push_back(static_cast<std::uint32_t>(i));
    name.assign(64, 'x');  // longer than any name: a view into `name` would now read x's
  }
  return program;
}

void require_chain(const RankProgram& program, int n) {
  REQUIRE(program.ops.size() == static_cast<std::size_t>(n));
  std::vector<std::uint32_t> before;
  for (int i = 0; i < n; ++i) {
    const Op& op = program.ops[static_cast<std::size_t>(i)];
    REQUIRE(op.name == "op" + std::to_string(i));
    REQUIRE(deps_of(op) == before);
    before.push_back(static_cast<std::uint32_t>(i));
  }
}

}  // namespace

TEST_CASE("a rank program keeps its ops' names and dependencies, not the strings they came from", "[program]") {
  // Enough ops for the storage to take several blocks and the op list to
  // reallocate many times: neither may move what earlier ops point at.
  const int n = 3000;
  const RankProgram program = chain(n);
  require_chain(program, n);

  SECTION("the op passed in keeps nothing of its own name or deps") {
    RankProgram other;
    Op op = make_op(OpKind::memory, 1);
    op.name = "ignored";
    op.deps = program.ops.back().deps;
    const std::uint32_t index = other.append(op, "kept", {});
    REQUIRE(index == 0);
    REQUIRE(other.ops[0].name == "kept");
    REQUIRE(other.ops[0].deps.empty());
    REQUIRE(other.ops[0].kind == OpKind::memory);
    REQUIRE(other.ops[0].stream == 1);
  }
}

TEST_CASE("copies of a rank program share its storage, moving one keeps it", "[program]") {
  RankProgram copy;
  {
    const RankProgram original = chain(50);
    copy = original;
  }  // the original is gone; the copy's views are into the storage it shares
  require_chain(copy, 50);
  std::vector<std::uint32_t> all = deps_of(copy.ops.back());
  all.push_back(49);
  copy.append(make_op(OpKind::compute, 0), "op50", all);
  require_chain(copy, 51);

  RankProgram moved = std::move(copy);
  require_chain(moved, 51);
  // A moved-from program can be written again once cleared.
  copy.ops.clear();
  REQUIRE(copy.append(make_op(OpKind::compute, 0), "again", {}) == 0);
  REQUIRE(copy.ops[0].name == "again");
  REQUIRE(moved.ops[0].name == "op0");
}

TEST_CASE("a program read back from JSON has the names and dependencies it was written with", "[program]") {
  Program program;
  program.ranks = 1;
  program.streams = {"compute"};
  program.programs.push_back(chain(20));
  program.program_of_rank = {0};
  validate_program(program);
  const Program back = program_from_json(program_to_json(program), "program.json");
  require_chain(back.programs.at(0), 20);
}

TEST_CASE("an attention op read back from JSON keeps its kernel", "[program][attention]") {
  Program program;
  program.ranks = 1;
  program.streams = {"compute"};
  program.programs.emplace_back();
  for (AttentionKernel kernel :
       {AttentionKernel::profile, AttentionKernel::flash_attention_2, AttentionKernel::flash_attention_3}) {
    Op op = make_op(OpKind::compute, 0);
    op.kernel = KernelClass::attention;
    op.attention_kernel = kernel;
    program.programs[0].append(op, std::string(to_string(kernel)));
  }
  program.program_of_rank = {0};
  validate_program(program);
  const Program back = program_from_json(program_to_json(program), "program.json");
  for (const Op& op : back.programs.at(0).ops) CHECK(to_string(op.attention_kernel) == op.name);
}
