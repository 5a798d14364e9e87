#include "sim/collectives/size_correction.h"

#include <algorithm>
#include <cmath>

namespace shardsim::sim {

double SizeCorrection::bandwidth_factor(double buffer_bytes) const {
  if (bandwidth.empty()) return 1.0;
  const auto after = std::upper_bound(bandwidth.begin(), bandwidth.end(), buffer_bytes,
                                      [](double bytes, const calib::SizeStep& step) { return bytes < step.from_bytes; });
  return after == bandwidth.begin() ? after->factor : (after - 1)->factor;
}

TimePs SizeCorrection::latency(TimePs latency, double buffer_bytes) const {
  const double factor = latency_factor_at(buffer_bytes);
  return factor == 1.0 ? latency : static_cast<TimePs>(std::llround(static_cast<double>(latency) * factor));
}

}  // namespace shardsim::sim
