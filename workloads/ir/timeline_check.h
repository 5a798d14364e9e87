// What any Timeline of a Program must satisfy, simulated or measured: every
// op ran once (a start and an end, end >= start), none started before the
// ops it depends on ended or before the previous op of its stream ended, and
// the members of each collective call were in it at a common instant (the
// call cannot complete on any member before the last one issued it).
// The executor checks its measured Timeline with it before writing it.
#pragma once

#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

#include <string>
#include <vector>

namespace shardsim::workloads {

// Descriptions of the violations found (at most `limit`), empty when the
// timeline is consistent. `tolerance` absorbs clock granularity.
std::vector<std::string> timeline_violations(const Program& program, const Timeline& timeline,
                                             TimePs tolerance = 0, std::size_t limit = 10);

}  // namespace shardsim::workloads
