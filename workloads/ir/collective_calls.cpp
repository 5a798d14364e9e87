#include "workloads/ir/collective_calls.h"

#include <map>
#include <tuple>

namespace shardsim::workloads {

std::vector<std::vector<std::int64_t>> collective_call_ids(const Program& program) {
  std::map<std::tuple<int, int, std::uint64_t>, std::int64_t> id_of_call;
  std::vector<std::vector<std::int64_t>> ids(static_cast<std::size_t>(program.ranks));
  for (int rank = 0; rank < program.ranks; ++rank) {
    const auto& ops = program.program_of(rank).ops;
    std::vector<std::uint64_t> calls(program.communicators.size(), 0);
    auto& mine = ids[static_cast<std::size_t>(rank)];
    mine.assign(ops.size(), -1);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != OpKind::collective) continue;
      const auto c = static_cast<std::size_t>(ops[i].communicator);
      const int group = program.communicators[c].group_of_rank[static_cast<std::size_t>(rank)];
      const auto key = std::make_tuple(ops[i].communicator, group, calls[c]++);
      const auto [it, added] = id_of_call.try_emplace(key, static_cast<std::int64_t>(id_of_call.size()));
      mine[i] = it->second;
    }
  }
  return ids;
}

}  // namespace shardsim::workloads
