// What a capacity planner reads off a simulated step: step time, MFU,
// tokens per GPU per second, peak memory with its breakdown, and where one
// rank's time went.
//
// The time breakdown cuts the rank's step into instants: compute while a
// kernel runs; otherwise exposed communication while a collective is in
// flight (issued and not yet done, waiting for peers included), shared
// equally among the kinds in flight; otherwise idle. The three add up to the
// step time exactly. `communication_seconds` is the time any collective is
// in flight, hidden or not, so exposed / communication says how much the
// overlaps hid.
#pragma once

#include "calib/profile.h"
#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

#include <nlohmann/json.hpp>

#include <array>

namespace shardsim::sim {

struct TimeBreakdown {
  int rank = 0;
  double compute_seconds = 0;
  std::array<double, workloads::kCollectiveOpCount> exposed_seconds{};  // by CollectiveOp
  double idle_seconds = 0;
  // Nothing computing or moving, a collective issued and waiting for other
  // ranks to issue it: pipeline bubbles, stragglers.
  double waiting_seconds = 0;
  double communication_seconds = 0;  // some collective moving data
  double exposed_total() const;
  // Share of communication_seconds with compute running beside it, in [0, 1]:
  // the exposed parts are summed kind by kind, so rounding can put their total a
  // hair above the time in flight.
  double hidden_fraction() const;
};

struct StepSummary {
  double step_seconds = 0;
  double model_flops_per_step = 0;
  double tokens_per_step = 0;
  int gpus = 0;
  double peak_flops_per_gpu = 0;  // of the program's dtype, from the profile
  double mfu = 0;                 // model FLOPs / (step time x GPUs x peak)
  double tokens_per_gpu_per_second = 0;
  int peak_memory_rank = 0;       // the rank with the highest peak
  workloads::MemoryPeak peak_memory;
  // What PyTorch's caching allocator reserves on that rank over the step
  // (torch.cuda.max_memory_reserved(); workloads/memory/allocator_replay.h),
  // and whether a request found no room for a new segment; 0 where not replayed.
  double reserved_memory_bytes = 0;
  bool allocator_out_of_memory = false;
  double gpu_memory_bytes = 0;
  TimeBreakdown breakdown;
};

TimeBreakdown time_breakdown(const workloads::Program& program, const workloads::Timeline& timeline, int rank);

// The same cut over bare intervals: `what` is kComputing for a compute
// kernel, else the CollectiveOp of a call in flight, which waits for the
// other ranks from `start` until `moving` (-1: it moved from its start);
// the step runs from 0 to `step_end`. For timelines read back from files
// (shardsim compare).
inline constexpr int kComputing = -1;
struct ActivityInterval {
  TimePs start = 0, end = 0;
  int what = kComputing;
  TimePs moving = -1;
};
TimeBreakdown breakdown_of_intervals(std::vector<ActivityInterval> intervals, TimePs step_end, int rank);

// The program's description must carry model_flops_per_step, tokens_per_step
// and dtype (workloads::compile() writes them).
StepSummary summarize_step(const workloads::Program& program, const workloads::Timeline& timeline,
                           const calib::Profile& profile, double gpu_memory_bytes, int breakdown_rank = 0);

nlohmann::json summary_to_json(const workloads::Program& program, const workloads::Timeline& timeline, const StepSummary& summary);

}  // namespace shardsim::sim
