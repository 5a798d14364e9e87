// A simulated (or measured) step as a Chrome trace for Perfetto
// (FORMATS.md): one process per rank, one thread per stream, a complete
// ("X") event per compute op and collective, a "waiting for other ranks"
// event nested in a collective's while its last member had not issued it, a
// counter track of each rank's memory, and flow arrows linking the members
// of each collective call.
// Times are in microseconds from the start of the step.
#pragma once

#include "sim/step/step_simulator.h"
#include "workloads/program.h"

#include <ostream>
#include <vector>

namespace shardsim::sim {

void write_chrome_trace(std::ostream& out, const workloads::Program& program, const StepTimeline& timeline,
                        const std::vector<int>& ranks);

// For each rank, for each op: the collective call it belongs to, as an index
// into one numbering of all calls of the step (-1 for ops that are not
// collectives). The k-th call a rank makes on a group is that group's k-th
// call, as in NCCL.
std::vector<std::vector<std::int64_t>> collective_call_ids(const workloads::Program& program);

}  // namespace shardsim::sim
