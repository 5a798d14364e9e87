#include "calib/line_fit.h"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace shardsim::calib {

void assess_fit(LineFit& fit, const std::vector<LinePoint>& points) {
  // Sums of squares in units of the longest time, which R^2 does not depend
  // on: in seconds they overflow for times near the largest double.
  double unit = 0;
  for (const auto& p : points) unit = std::max(unit, p.seconds);
  if (!(unit > 0)) unit = 1;
  double mean = 0;
  for (const auto& p : points) mean += p.seconds / unit;
  mean /= static_cast<double>(points.size());
  double residual = 0;
  double total = 0;
  fit.worst_relative_error = 0;
  for (const auto& p : points) {
    const double predicted = fit.seconds(p.x);
    const double miss = predicted / unit - p.seconds / unit;
    residual += miss * miss;
    total += (p.seconds / unit - mean) * (p.seconds / unit - mean);
    fit.worst_relative_error = std::max(fit.worst_relative_error, std::abs(predicted - p.seconds) / p.seconds);
  }
  fit.r_squared = total > 0 ? 1.0 - residual / total : 1.0;
}

LineFit fit_line(const std::vector<LinePoint>& points) {
  if (points.size() < 2) throw std::invalid_argument("a line fit needs at least two points");
  for (const auto& p : points) {
    if (!(p.seconds > 0) || !(p.x >= 0) || !std::isfinite(p.seconds) || !std::isfinite(p.x)) {
      throw std::invalid_argument("a line fit needs positive, finite times and non-negative sizes");
    }
  }
  const auto [lo, hi] = std::minmax_element(points.begin(), points.end(),
                                            [](const LinePoint& a, const LinePoint& b) { return a.x < b.x; });
  if (lo->x == hi->x) throw std::invalid_argument("a line fit needs at least two distinct sizes");

  // Row i, divided by t_i: [1/t_i, x_i/t_i] (alpha, slope) = 1. Scaling x to
  // O(1) keeps the two columns comparable for the QR, and time in units of
  // the geometric mean of the shortest and longest keeps the entries and
  // their squares within a double whatever the unit of the measurements.
  const double scale = hi->x;
  const auto [fastest, slowest] = std::minmax_element(
      points.begin(), points.end(), [](const LinePoint& a, const LinePoint& b) { return a.seconds < b.seconds; });
  const double unit = std::exp(0.5 * (std::log(fastest->seconds) + std::log(slowest->seconds)));
  const auto n = static_cast<Eigen::Index>(points.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd b = Eigen::VectorXd::Ones(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto& p = points[static_cast<std::size_t>(i)];
    a(i, 0) = unit / p.seconds;
    a(i, 1) = p.x / scale * (unit / p.seconds);
  }
  Eigen::Vector2d solution = a.colPivHouseholderQr().solve(b);
  LineFit fit;
  if (solution(0) < 0) {
    // Through the origin: minimise sum((s x_i / t_i) - 1)^2.
    const Eigen::VectorXd column = a.col(1);
    solution(0) = 0;
    solution(1) = column.dot(b) / column.squaredNorm();
  }
  fit.alpha_seconds = solution(0) * unit;
  const double slope = solution(1) / scale * unit;
  fit.units_per_second = slope > 0 ? 1.0 / slope : 0.0;
  assess_fit(fit, points);
  return fit;
}

double interpolate_seconds(const std::vector<LinePoint>& sorted_points, const LineFit& fit, double x) {
  if (sorted_points.empty() || x < sorted_points.front().x || x > sorted_points.back().x) return fit.seconds(x);
  const auto upper = std::lower_bound(sorted_points.begin(), sorted_points.end(), x,
                                      [](const LinePoint& p, double value) { return p.x < value; });
  if (upper->x == x || upper == sorted_points.begin()) return upper->seconds;
  const auto lower = upper - 1;
  if (lower->x <= 0) {
    const double t = (x - lower->x) / (upper->x - lower->x);
    return lower->seconds + t * (upper->seconds - lower->seconds);
  }
  const double t = std::log(x / lower->x) / std::log(upper->x / lower->x);
  return std::exp(std::log(lower->seconds) + t * (std::log(upper->seconds) - std::log(lower->seconds)));
}

}  // namespace shardsim::calib
