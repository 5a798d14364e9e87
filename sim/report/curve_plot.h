// A profile's measured curves as a PNG, for `shardsim calib report --png`:
// one panel per curve, the achieved rate x / t (FLOP/s for a GEMM, bytes/s
// for a copy or a collective: nccl-tests' algbw) against the size x on a
// log axis. Measured points are dots; the fitted line t = alpha + x / rate
// is drawn as the rate it implies, x / t(x), so a latency the fit got wrong
// shows at the small sizes and a wrong asymptote at the large ones. Each
// title carries R^2 and the worst relative error of the fit.
#pragma once

#include "calib/measured_curves.h"

#include <string>
#include <vector>

namespace shardsim::sim {

struct CurvePanel {
  std::string title;
  std::string x_unit;     // "B", "FLOP"
  std::string rate_unit;  // "B/s", "FLOP/s"
  const calib::MeasuredCurve* curve = nullptr;
};

// The PNG file's bytes; std::invalid_argument without panels.
std::string curves_png(const std::string& heading, const std::vector<CurvePanel>& panels);

// "1.5 G", "200 k", "3": three significant digits and an SI prefix.
std::string si_text(double value);

}  // namespace shardsim::sim
