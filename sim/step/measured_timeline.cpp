#include "sim/step/measured_timeline.h"

#include "sim/step/chrome_trace.h"
#include "sim/step/step_report.h"

#include <algorithm>

namespace shardsim::sim {

StepTimeline measured_timeline(const workloads::Program& program, const calib::MeasuredRun& run) {
  const auto picoseconds = [](double seconds) { return seconds < 0 ? TimePs{-1} : picoseconds_from_seconds(seconds); };
  StepTimeline timeline;
  for (const auto& ops : run.ops) {
    auto& timings = timeline.ops.emplace_back();
    for (const calib::MeasuredOp& op : ops) {
      timings.push_back({picoseconds(op.start_seconds), picoseconds(op.end_seconds)});
      timeline.step_time = std::max(timeline.step_time, timings.back().end);
    }
  }
  if (timeline.ops.size() == static_cast<std::size_t>(program.ranks)) timeline.peak_memory = memory_peaks(program, timeline);
  // One per call of a group, as the simulator counts them.
  std::int64_t last_call = -1;
  for (const auto& ids : collective_call_ids(program)) {
    for (std::int64_t id : ids) last_call = std::max(last_call, id);
  }
  timeline.collectives = static_cast<std::uint64_t>(last_call + 1);
  return timeline;
}

}  // namespace shardsim::sim
