// A measured run (calib/executor) as a StepTimeline, the simulator's own
// type, so that reports, checks, the trace and the HDF5 writer serve both.
// Memory peaks are recomputed from the memory ops' times (memory_peaks()).
// A collective's `moving` is when the last member of its call issued it, as
// the simulator sets it: what came before was waiting for the others. Across
// hosts the ranks' times are aligned by a barrier, not a shared clock, so
// there the split is as good as that alignment.
#pragma once

#include "calib/executor/measured_run.h"
#include "sim/step/step_simulator.h"
#include "workloads/program.h"

namespace shardsim::sim {

StepTimeline measured_timeline(const workloads::Program& program, const calib::MeasuredRun& run);

}  // namespace shardsim::sim
