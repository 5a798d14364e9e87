// A simulated (or measured) step as a Chrome trace for Perfetto
// (FORMATS.md): one process per rank, one thread per stream, a complete
// ("X") event per compute op and collective, a "waiting for other ranks"
// event nested in a collective's while its last member had not issued it, a
// counter track of each rank's memory, and flow arrows linking the members
// of each collective call.
// Times are in microseconds from the start of the step.
#pragma once

#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

#include <ostream>
#include <vector>

namespace shardsim::sim {

void write_chrome_trace(std::ostream& out, const workloads::Program& program, const workloads::Timeline& timeline,
                        const std::vector<int>& ranks);

}  // namespace shardsim::sim
