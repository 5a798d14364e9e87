#include "workloads/ir/timeline.h"

#include <algorithm>

namespace shardsim::workloads {

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
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < rank_program.ops.size(); ++i) {
      if (rank_program.ops[i].kind == OpKind::memory && timings[i].start >= 0) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return timings[a].start < timings[b].start; });
    MemoryPeak peak = now;
    for (std::size_t i : order) {
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
