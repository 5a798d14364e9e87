// Timeline: what a backend returns for one step of a Program (program.h),
// the simulator's prediction and the executor's measurement alike (DESIGN.md,
// "One IR, two backends"): when each op of each rank ran, each rank's peak
// memory, and where an allocation did not fit. Every writer reads it, and
// `shardsim compare` holds two of them side by side, so a disagreement is a
// modelling error, never a translation error.
#pragma once

#include "topology/base/units.h"
#include "workloads/ir/program.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

using MemoryBytes = std::array<double, kMemoryCategoryCount>;

struct OpTiming {
  TimePs start = -1;  // when it began to occupy its stream (issued, for a collective)
  TimePs end = -1;
  // A collective: when every member had issued it and its data began to
  // move; from start to here the rank waited for the others. -1 where not
  // known (kernels, memory ops, timelines read back from files).
  TimePs moving = -1;

  bool operator==(const OpTiming&) const = default;
};

struct MemoryPeak {
  double total_bytes = 0;
  MemoryBytes by_category{};
  TimePs when = 0;
};

struct OutOfMemory {
  int rank = 0;
  std::string op;            // the allocation that did not fit
  TimePs when = 0;
  double capacity_bytes = 0;
  double requested_bytes = 0;
  MemoryBytes by_category{};  // what was allocated, the failing request included
};

struct Timeline {
  // [rank][op of the rank's program]; empty for a rank whose timings were
  // not kept (the simulator's StepSimulationOptions::timed_ranks).
  std::vector<std::vector<OpTiming>> ops;
  // The last op's end over all ranks; when an allocation does not fit, the
  // time it failed (a simulation stops there).
  TimePs step_time = 0;
  std::vector<MemoryPeak> peak_memory;     // per rank
  std::optional<OutOfMemory> out_of_memory;
  std::uint64_t collectives = 0;   // collective calls (one per group instance)
  // What only the simulator knows; a measured Timeline leaves them empty.
  std::vector<double> link_bytes;  // payload bytes per LinkId (flow mode), whatever the protocol
  std::uint64_t events = 0;
  double spine_bytes = 0;          // payload bytes that crossed from a leaf up to the spines
};

// The indices of a rank's memory ops that ran, in the order they ran
// (program order on ties).
std::vector<std::size_t> memory_ops_in_time_order(const RankProgram& program, const std::vector<OpTiming>& timings);

// Each rank's peak memory from a timeline's memory ops taken in time order
// (program order on ties) on top of the resident bytes: for a measured
// timeline, which the simulator did not produce.
std::vector<MemoryPeak> memory_peaks(const Program& program, const Timeline& timeline);

}  // namespace shardsim::workloads
