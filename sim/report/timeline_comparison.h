// A predicted and a measured Timeline of one Program side by side (shardsim
// compare): where the model is right and where it is not, per op class.
//
//   step time     each file's step_seconds;
//   op classes    per rank, the summed durations of its GEMMs, attention
//                 kernels, element-wise kernels and optimizer steps, and the
//                 in-flight time of each collective kind (issue to completion,
//                 waiting for peers included), then, where both files know
//                 when each call's last member issued it (moving_seconds),
//                 its time moving data from then on, which is what the
//                 collective model prices; averaged over the ranks both
//                 files hold;
//   breakdown     one rank's compute, exposed communication, waiting for
//                 other ranks, idle and communication in flight (moving
//                 data; step_report.h), and the share of communication
//                 hidden behind compute: how well the overlaps worked in
//                 each;
//   largest differences  that rank's ops with the largest |predicted -
//                 measured| duration.
// Relative error = (predicted - measured) / measured.
#pragma once

#include "sim/report/hdf5_timeline.h"

#include <optional>
#include <string>
#include <vector>

namespace shardsim::sim {

struct ComparedQuantity {
  std::string name;
  double predicted_seconds = 0;
  double measured_seconds = 0;
  double relative_error() const;  // NaN when nothing was measured
};

struct OpDifference {
  std::uint32_t op = 0;
  std::string name;
  double predicted_seconds = 0;
  double measured_seconds = 0;
};

struct TimelineComparison {
  std::vector<int> ranks;  // held by both files
  int breakdown_rank = 0;
  ComparedQuantity step;
  std::vector<ComparedQuantity> op_classes;
  std::vector<ComparedQuantity> breakdown;
  double predicted_hidden_fraction = 0;
  double measured_hidden_fraction = 0;
  std::vector<OpDifference> largest_differences;  // of breakdown_rank, at most 10
};

// Throws InputError when the files hold different programs (the first op
// that differs is named) or share no rank, or `rank` is not in both.
TimelineComparison compare_timelines(const TimelineFile& predicted, const TimelineFile& measured,
                                     std::optional<int> rank = std::nullopt);

}  // namespace shardsim::sim
