#include "calib/executor/measured_timeline.h"

#include "workloads/ir/collective_calls.h"

#include <algorithm>

namespace shardsim::calib {

workloads::Timeline measured_timeline(const workloads::Program& program,
                                      const std::vector<std::vector<MeasuredOp>>& measured) {
  // Only world rank 0 holds the measurements; the others have nothing to convert.
  if (measured.empty()) return {};
  const auto picoseconds = [](double seconds) { return seconds < 0 ? TimePs{-1} : picoseconds_from_seconds(seconds); };
  workloads::Timeline timeline;
  for (const auto& ops : measured) {
    auto& timings = timeline.ops.emplace_back();
    for (const MeasuredOp& op : ops) {
      timings.push_back({picoseconds(op.start_seconds), picoseconds(op.end_seconds)});
      timeline.step_time = std::max(timeline.step_time, timings.back().end);
    }
  }
  const auto call_ids = workloads::collective_call_ids(program);
  // One per call of a group, as the simulator counts them.
  std::int64_t last_call = -1;
  for (const auto& ids : call_ids) {
    for (std::int64_t id : ids) last_call = std::max(last_call, id);
  }
  timeline.collectives = static_cast<std::uint64_t>(last_call + 1);
  if (timeline.ops.size() != static_cast<std::size_t>(program.ranks)) return timeline;
  timeline.peak_memory = workloads::memory_peaks(program, timeline);
  for (std::size_t r = 0; r < call_ids.size(); ++r) {
    if (timeline.ops[r].size() != call_ids[r].size()) return timeline;
  }

  // A call's data moves once its last member has issued it: until then each
  // member waited for the others. A member whose call ended before that (a
  // broadcast root whose eager send completed at once) did not wait.
  std::vector<TimePs> last_issue(static_cast<std::size_t>(last_call + 1), 0);
  for (std::size_t r = 0; r < call_ids.size(); ++r) {
    for (std::size_t i = 0; i < call_ids[r].size(); ++i) {
      const std::int64_t id = call_ids[r][i];
      if (id < 0) continue;
      TimePs& last = last_issue[static_cast<std::size_t>(id)];
      const TimePs start = timeline.ops[r][i].start;
      last = start < 0 || last < 0 ? TimePs{-1} : std::max(last, start);  // -1: a member not measured
    }
  }
  for (std::size_t r = 0; r < call_ids.size(); ++r) {
    for (std::size_t i = 0; i < call_ids[r].size(); ++i) {
      const std::int64_t id = call_ids[r][i];
      workloads::OpTiming& t = timeline.ops[r][i];
      if (id < 0 || t.start < 0) continue;
      const TimePs last = last_issue[static_cast<std::size_t>(id)];
      if (last >= 0) t.moving = last <= t.end ? last : t.start;
    }
  }
  return timeline;
}

MeasuredRun measured_run(const workloads::Program& program, MeasuredSteps steps) {
  MeasuredRun run;
  run.timeline = measured_timeline(program, steps.ops);
  static_cast<MeasuredStepTimes&>(run) = std::move(static_cast<MeasuredStepTimes&>(steps));
  return run;
}

}  // namespace shardsim::calib
