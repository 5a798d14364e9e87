#include "workloads/ir/timeline_check.h"

#include "workloads/ir/collective_calls.h"

#include <algorithm>
#include <limits>
#include <map>

namespace shardsim::workloads {

std::vector<std::string> timeline_violations(const Program& program, const Timeline& timeline,
                                             TimePs tolerance, std::size_t limit) {
  std::vector<std::string> found;
  const auto report = [&](const std::string& what) {
    if (found.size() < limit) found.push_back(what);
  };
  if (timeline.ops.size() != static_cast<std::size_t>(program.ranks)) {
    report("the timeline has " + std::to_string(timeline.ops.size()) + " ranks, the program " +
           std::to_string(program.ranks));
    return found;
  }
  const auto call_ids = collective_call_ids(program);
  struct Member {
    int position = 0;  // in the group
    TimePs start = 0, end = 0;
  };
  struct Call {
    const Op* op = nullptr;
    std::vector<Member> members;
  };
  std::map<std::int64_t, Call> calls;
  for (int rank = 0; rank < program.ranks; ++rank) {
    const auto& ops = program.program_of(rank).ops;
    const auto& t = timeline.ops[static_cast<std::size_t>(rank)];
    const std::string where = "rank " + std::to_string(rank) + ": ";
    if (t.size() != ops.size()) {
      report(where + std::to_string(t.size()) + " timings for " + std::to_string(ops.size()) + " ops");
      continue;
    }
    std::vector<TimePs> stream_free(program.streams.size(), std::numeric_limits<TimePs>::min());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const std::string op = where + "op " + std::to_string(i) + " '" + std::string(ops[i].name) + "'";
      if (t[i].start < 0 || t[i].end < t[i].start) {
        report(op + " did not run (or ended before it started)");
        continue;
      }
      for (std::uint32_t dep : ops[i].deps) {
        if (t[i].start + tolerance < t[dep].end) {
          report(op + " started before its dependency '" + std::string(ops[dep].name) + "' ended");
        }
      }
      auto& free_at = stream_free[static_cast<std::size_t>(ops[i].stream)];
      if (t[i].start + tolerance < free_at) report(op + " started before the previous op of its stream ended");
      free_at = std::max(free_at, t[i].end);
      const std::int64_t call = call_ids[static_cast<std::size_t>(rank)][i];
      if (call >= 0) {
        const auto& group = program.communicators[static_cast<std::size_t>(ops[i].communicator)].group_of(rank);
        const int position = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
        Call& c = calls[call];
        c.op = &ops[i];
        c.members.push_back({position, t[i].start, t[i].end});
      }
    }
  }
  for (auto& [call, c] : calls) {
    std::sort(c.members.begin(), c.members.end(), [](const Member& a, const Member& b) { return a.position < b.position; });
    const auto n = static_cast<int>(c.members.size());
    // needs(a, b): member a cannot complete before member b issued the call.
    const auto needs = [&](int a, int b) {
      switch (c.op->collective) {
        case CollectiveOp::broadcast: return b == c.op->root;
        case CollectiveOp::reduce: return a == c.op->root;
        case CollectiveOp::send_recv: return b == (a + n - 1) % n;
        case CollectiveOp::send: return b == c.op->root;
        default: return true;
      }
    };
    bool broken = false;
    for (int a = 0; a < n && !broken; ++a) {
      for (int b = 0; b < n && !broken; ++b) {
        broken = a != b && needs(a, b) && c.members[static_cast<std::size_t>(a)].end + tolerance <
                                              c.members[static_cast<std::size_t>(b)].start;
      }
    }
    if (broken) {
      report("collective call " + std::to_string(call) + " '" + std::string(c.op->name) +
             "': a member completed it before a member it needs data from issued it");
    }
  }
  return found;
}

}  // namespace shardsim::workloads
