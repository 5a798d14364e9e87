// The ranks' measurements as the Program's Timeline, the type the simulator
// returns, so that reports, checks, the trace and the HDF5 writer serve
// both. Memory peaks are recomputed from the memory ops' times
// (workloads::memory_peaks()). A collective's `moving` is when the last
// member of its call issued it, as the simulator sets it: what came before
// was waiting for the others. Across hosts the ranks' times are aligned by a
// barrier, not a shared clock, so there the split is as good as that
// alignment.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

namespace shardsim::calib {

workloads::Timeline measured_timeline(const workloads::Program& program,
                                      const std::vector<std::vector<MeasuredOp>>& ops);

// `steps` with its reported step as the Program's Timeline.
MeasuredRun measured_run(const workloads::Program& program, MeasuredSteps steps);

}  // namespace shardsim::calib
