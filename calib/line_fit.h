// Straight-line fits of measured times, t = alpha + x / rate, where x is
// bytes (a copy, a collective) or FLOPs (a GEMM).
//
// Measurements span decades of x, so the fit minimises relative residuals,
// sum(((alpha + x / rate) - t) / t)^2: an absolute fit would let the largest
// sizes decide everything and leave alpha to chance. Solved by Eigen's
// column-pivoting QR on the row-scaled system.
#pragma once

#include <vector>

namespace shardsim::calib {

struct LinePoint {
  double x = 0;
  double seconds = 0;
};

struct LineFit {
  double alpha_seconds = 0;   // intercept: fixed cost of one call
  double units_per_second = 0;  // 1 / slope: asymptotic rate; 0 when the slope is not positive
  double r_squared = 0;         // of t, unweighted: the share of its variance the line explains
  double worst_relative_error = 0;  // max |fit - t| / t over the points

  double seconds(double x) const { return alpha_seconds + (units_per_second > 0 ? x / units_per_second : 0); }
};

// Needs at least two points with distinct x and positive times; throws
// std::invalid_argument otherwise. A negative intercept (noise on a
// latency-free curve) is refitted through the origin.
LineFit fit_line(const std::vector<LinePoint>& points);

// R^2 and worst relative error of `fit` on `points`.
void assess_fit(LineFit& fit, const std::vector<LinePoint>& points);

// The measured curve itself: log-log interpolation between points (sorted
// by x; equal x averaged), the line outside them.
double interpolate_seconds(const std::vector<LinePoint>& sorted_points, const LineFit& fit, double x);

}  // namespace shardsim::calib
