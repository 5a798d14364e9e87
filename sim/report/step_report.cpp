#include "sim/report/step_report.h"

#include <algorithm>
#include <numeric>

namespace shardsim::sim {

using workloads::CollectiveOp;
using workloads::OpKind;

double TimeBreakdown::exposed_total() const {
  return std::accumulate(exposed_seconds.begin(), exposed_seconds.end(), 0.0);
}

double TimeBreakdown::hidden_fraction() const {
  if (communication_seconds <= 0) return 0;
  return std::clamp(1 - exposed_total() / communication_seconds, 0.0, 1.0);
}

TimeBreakdown breakdown_of_intervals(std::vector<ActivityInterval> intervals, TimePs step_end, int rank) {
  constexpr int kWaitingForRanks = -2;
  // Boundary events: +1/-1 on the compute count, the waiting count or one
  // collective kind.
  struct Edge {
    TimePs when;
    int what;  // kComputing, kWaitingForRanks, else CollectiveOp
    int delta;
  };
  std::vector<Edge> edges;
  const auto add = [&](TimePs start, TimePs end, int what) {
    if (start < 0 || end <= start) return;
    edges.push_back({start, what, +1});
    edges.push_back({end, what, -1});
  };
  for (const ActivityInterval& interval : intervals) {
    const bool waited = interval.what != kComputing && interval.moving > interval.start;
    const TimePs moving = waited ? std::min(interval.moving, interval.end) : interval.start;
    add(interval.start, moving, kWaitingForRanks);
    add(moving, interval.end, interval.what);
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.when < b.when; });
  TimeBreakdown breakdown;
  breakdown.rank = rank;
  int computing = 0, waiting = 0;
  std::array<int, workloads::kCollectiveOpCount> in_flight{};
  TimePs previous = 0;
  for (std::size_t i = 0; i <= edges.size(); ++i) {
    const TimePs now = i < edges.size() ? edges[i].when : step_end;
    const double span = seconds_from_picoseconds(now - previous);
    const int kinds = static_cast<int>(std::count_if(in_flight.begin(), in_flight.end(), [](int n) { return n > 0; }));
    if (span > 0) {
      if (kinds > 0) breakdown.communication_seconds += span;
      if (computing > 0) {
        breakdown.compute_seconds += span;
      } else if (kinds > 0) {
        for (std::size_t k = 0; k < in_flight.size(); ++k) {
          if (in_flight[k] > 0) breakdown.exposed_seconds[k] += span / kinds;
        }
      } else if (waiting > 0) {
        breakdown.waiting_seconds += span;
      } else {
        breakdown.idle_seconds += span;
      }
    }
    previous = now;
    if (i == edges.size()) break;
    if (edges[i].what == kComputing) {
      computing += edges[i].delta;
    } else if (edges[i].what == kWaitingForRanks) {
      waiting += edges[i].delta;
    } else {
      in_flight[static_cast<std::size_t>(edges[i].what)] += edges[i].delta;
    }
  }
  return breakdown;
}

TimeBreakdown time_breakdown(const workloads::Program& program, const workloads::Timeline& timeline, int rank) {
  std::vector<ActivityInterval> intervals;
  const auto& ops = program.program_of(rank).ops;
  const auto& timings = timeline.ops[static_cast<std::size_t>(rank)];
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind == OpKind::memory) continue;
    const workloads::OpTiming& t = timings[i];
    if (ops[i].kind == OpKind::compute) {
      intervals.push_back({t.start, t.end, kComputing});
      continue;
    }
    intervals.push_back({t.start, t.end, static_cast<int>(ops[i].collective), t.moving});
  }
  return breakdown_of_intervals(std::move(intervals), timeline.step_time, rank);
}

StepSummary summarize_step(const workloads::Program& program, const workloads::Timeline& timeline,
                           const calib::Profile& profile, double gpu_memory_bytes, int breakdown_rank) {
  StepSummary summary;
  summary.gpus = program.ranks;
  summary.step_seconds = seconds_from_picoseconds(timeline.step_time);
  summary.model_flops_per_step = program.description.at("model_flops_per_step").get<double>();
  summary.tokens_per_step = program.description.at("tokens_per_step").get<double>();
  const calib::DtypeCompute* peak = profile.compute.find(program.description.at("dtype").get<std::string>());
  summary.peak_flops_per_gpu = peak ? peak->peak_flops_per_second : 0;
  if (summary.step_seconds > 0 && !timeline.out_of_memory) {
    if (summary.peak_flops_per_gpu > 0) {
      summary.mfu = summary.model_flops_per_step / (summary.step_seconds * summary.gpus * summary.peak_flops_per_gpu);
    }
    summary.tokens_per_gpu_per_second = summary.tokens_per_step / (summary.step_seconds * summary.gpus);
  }
  for (std::size_t rank = 0; rank < timeline.peak_memory.size(); ++rank) {
    if (rank == 0 || timeline.peak_memory[rank].total_bytes > summary.peak_memory.total_bytes) {
      summary.peak_memory = timeline.peak_memory[rank];
      summary.peak_memory_rank = static_cast<int>(rank);
    }
  }
  summary.gpu_memory_bytes = gpu_memory_bytes;
  summary.breakdown = time_breakdown(program, timeline, breakdown_rank);
  return summary;
}

nlohmann::json summary_to_json(const workloads::Program& program, const workloads::Timeline& timeline, const StepSummary& summary) {
  nlohmann::json out = program.description;
  out["gpus"] = summary.gpus;
  out["fits"] = !timeline.out_of_memory.has_value();
  nlohmann::json memory = {{"rank", summary.peak_memory_rank},
                           {"total_bytes", summary.peak_memory.total_bytes},
                           {"at_seconds", seconds_from_picoseconds(summary.peak_memory.when)},
                           {"gpu_memory_bytes", summary.gpu_memory_bytes}};
  if (summary.reserved_memory_bytes > 0) {
    memory["reserved_bytes"] = summary.reserved_memory_bytes;
    memory["reserved_out_of_memory"] = summary.allocator_out_of_memory;
  }
  for (int c = 0; c < workloads::kMemoryCategoryCount; ++c) {
    memory["bytes"][std::string(workloads::to_string(static_cast<workloads::MemoryCategory>(c)))] =
        summary.peak_memory.by_category[static_cast<std::size_t>(c)];
  }
  out["peak_memory"] = memory;
  if (timeline.out_of_memory) {
    const workloads::OutOfMemory& oom = *timeline.out_of_memory;
    nlohmann::json failure = {{"rank", oom.rank},
                              {"op", oom.op},
                              {"at_seconds", seconds_from_picoseconds(oom.when)},
                              {"requested_bytes", oom.requested_bytes},
                              {"capacity_bytes", oom.capacity_bytes}};
    for (int c = 0; c < workloads::kMemoryCategoryCount; ++c) {
      failure["bytes"][std::string(workloads::to_string(static_cast<workloads::MemoryCategory>(c)))] =
          oom.by_category[static_cast<std::size_t>(c)];
    }
    out["out_of_memory"] = failure;
    return out;
  }
  out["step_seconds"] = summary.step_seconds;
  out["spine_bytes"] = timeline.spine_bytes;
  out["mfu"] = summary.mfu;
  out["tokens_per_gpu_per_second"] = summary.tokens_per_gpu_per_second;
  out["peak_flops_per_gpu"] = summary.peak_flops_per_gpu;
  const TimeBreakdown& b = summary.breakdown;
  nlohmann::json time = {{"rank", b.rank},
                         {"compute_seconds", b.compute_seconds},
                         {"idle_seconds", b.idle_seconds},
                         {"waiting_seconds", b.waiting_seconds},
                         {"communication_seconds", b.communication_seconds},
                         {"exposed_communication_seconds", b.exposed_total()}};
  for (CollectiveOp op : workloads::all_collective_ops()) {
    const double seconds = b.exposed_seconds[static_cast<std::size_t>(op)];
    if (seconds > 0) time["exposed_by_collective_seconds"][std::string(workloads::to_string(op))] = seconds;
  }
  out["time"] = time;
  out["collective_calls"] = timeline.collectives;
  return out;
}

}  // namespace shardsim::sim
