// One rank's timelines as a PNG (libgd): a panel per timeline, one lane per
// stream, every op a bar from its start to its end coloured by its class
// (collectives from issue to completion, waiting included), on one time
// axis, so a predicted and a measured step can be read against each other.
#pragma once

#include "sim/report/hdf5_timeline.h"

#include <string>
#include <vector>

namespace shardsim::sim {

struct TimelinePanel {
  std::string title;
  const TimelineFile* timeline = nullptr;
};

// The PNG file's bytes.
std::string timeline_png(const std::vector<TimelinePanel>& panels, int rank);

}  // namespace shardsim::sim
