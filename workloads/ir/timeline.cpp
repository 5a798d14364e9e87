#include "workloads/ir/timeline.h"

#include <algorithm>

namespace shardsim::workloads {

std::vector<std::size_t> memory_ops_in_time_order(const RankProgram& program, const std::vector<OpTiming>& timings) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    if (program.ops[i].kind == OpKind::memory && timings[i].start >= 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return timings[a].start < timings[b].start; });
  return order;
}

std::vector<MemoryPeak> memory_peaks(const Program& program, const Timeline& timeline) {
  std::vector<MemoryPeak> peaks;
  for (int rank = 0; rank < program.ranks; ++rank) {
    const auto& rank_program = program.program_of(rank);
    const auto& timings = timeline.ops[static_cast<std::size_t>(rank)];
    MemoryPeak now;
    for (std::size_t c = 0; c < now.by_category.size(); ++c) {
      now.by_category[c] = rank_program.resident_bytes[c];
      now.total_bytes += rank_program.resident_bytes[c];
    }
    MemoryPeak peak = now;
    for (std::size_t i : memory_ops_in_time_order(rank_program, timings)) {
      const Op& op = rank_program.ops[i];
      now.by_category[static_cast<std::size_t>(op.memory)] += op.bytes;
      now.total_bytes += op.bytes;
      now.when = timings[i].start;
      if (now.total_bytes > peak.total_bytes) peak = now;
    }
    peaks.push_back(peak);
  }
  return peaks;
}

}  // namespace shardsim::workloads
