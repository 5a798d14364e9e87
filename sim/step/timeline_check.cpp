#include "sim/step/timeline_check.h"

#include "sim/step/chrome_trace.h"

#include <algorithm>
#include <limits>
#include <map>

namespace shardsim::sim {

std::vector<std::string> timeline_violations(const workloads::Program& program, const StepTimeline& timeline,
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
  struct CallSpan {
    TimePs latest_start = std::numeric_limits<TimePs>::min();
    TimePs earliest_end = std::numeric_limits<TimePs>::max();
    std::string name;
  };
  std::map<std::int64_t, CallSpan> calls;
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
      const std::string op = where + "op " + std::to_string(i) + " '" + ops[i].name + "'";
      if (t[i].start < 0 || t[i].end < t[i].start) {
        report(op + " did not run (or ended before it started)");
        continue;
      }
      for (std::uint32_t dep : ops[i].deps) {
        if (t[i].start + tolerance < t[dep].end) report(op + " started before its dependency '" + ops[dep].name + "' ended");
      }
      auto& free_at = stream_free[static_cast<std::size_t>(ops[i].stream)];
      if (t[i].start + tolerance < free_at) report(op + " started before the previous op of its stream ended");
      free_at = std::max(free_at, t[i].end);
      const std::int64_t call = call_ids[static_cast<std::size_t>(rank)][i];
      if (call >= 0) {
        CallSpan& span = calls[call];
        span.latest_start = std::max(span.latest_start, t[i].start);
        span.earliest_end = std::min(span.earliest_end, t[i].end);
        span.name = ops[i].name;
      }
    }
  }
  for (const auto& [call, span] : calls) {
    if (span.latest_start > span.earliest_end + tolerance) {
      report("collective call " + std::to_string(call) + " '" + span.name +
             "': a member completed it before another member issued it");
    }
  }
  return found;
}

}  // namespace shardsim::sim
