// SizeCorrection: how a collective's time departs, with the size of its
// buffer, from the per-byte plan and closed form its algorithm makes.
//
// Plans and costs are made per byte (collective_algorithm.h). NCCL's own model,
// where the profiles take their latencies from, also corrects by size
// (ncclTopoGetAlgoTime): trees reach less of their bandwidth at medium sizes
// (treeCorrectionFactor), and rings across nodes take longer latencies once a
// call carries more than a few bytes per rank and channel ("plateau effect").
// The flow network and the closed form apply the same correction, so the two
// still agree where nothing contends.
#pragma once

#include "calib/profile.h"
#include "topology/base/units.h"

#include <vector>

namespace shardsim::sim {

struct SizeCorrection {
  std::vector<calib::SizeStep> bandwidth;  // empty: 1 at every size
  double latency_factor = 1;
  double latency_factor_from_bytes = 0;  // of buffer

  double bandwidth_factor(double buffer_bytes) const;
  double latency_factor_at(double buffer_bytes) const {
    return buffer_bytes >= latency_factor_from_bytes ? latency_factor : 1.0;
  }
  // What to scale a plan's per-byte link weights by. As with a protocol's
  // bandwidth factor (transfer_plan.h), a fraction c of the bandwidth is
  // modelled as each payload byte holding the links 1/c as long.
  double wire_scale(double buffer_bytes) const { return buffer_bytes / bandwidth_factor(buffer_bytes); }
  TimePs latency(TimePs latency, double buffer_bytes) const;
};

}  // namespace shardsim::sim
