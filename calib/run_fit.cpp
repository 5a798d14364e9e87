#include "calib/run_fit.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

namespace shardsim::calib {

namespace {

double squared_log_error(const std::vector<RunResponse>& runs, double factor) {
  double sum = 0;
  for (const auto& run : runs) {
    const double predicted = run.predicted_seconds(factor);
    // A line extrapolated below zero cannot be a step time: as bad as can be.
    if (predicted <= 0) return INFINITY;
    const double log_ratio = std::log(predicted / run.measured_seconds);
    sum += log_ratio * log_ratio;
  }
  return sum;
}

}  // namespace

RunResponse linear_response(std::string name, std::string family, double measured_seconds, double f0,
                            double seconds_at_f0, double f1, double seconds_at_f1) {
  if (f0 == f1) throw std::invalid_argument("linear_response: the two factors must differ");
  RunResponse run;
  run.name = std::move(name);
  run.family = std::move(family);
  run.measured_seconds = measured_seconds;
  run.scaled_seconds = (seconds_at_f1 - seconds_at_f0) / (f1 - f0);
  run.fixed_seconds = seconds_at_f0 - run.scaled_seconds * f0;
  return run;
}

double fit_kernel_time_factor(const std::vector<RunResponse>& runs) {
  if (runs.empty()) throw std::invalid_argument("no runs to fit the kernel time factor to");
  // A grid of steps of 1e-3 finds the basin (a sum of squared logs of
  // lines need not be convex); golden-section search then refines it.
  constexpr double kStep = 1e-3;
  double best = kMinKernelTimeFactor;
  double best_error = INFINITY;
  for (double f = kMinKernelTimeFactor; f <= kMaxKernelTimeFactor + 1e-12; f += kStep) {
    const double error = squared_log_error(runs, f);
    if (error < best_error) {
      best_error = error;
      best = f;
    }
  }
  if (best - kStep < kMinKernelTimeFactor || best + kStep > kMaxKernelTimeFactor) {
    throw std::invalid_argument("the runs want a kernel time factor of " + std::to_string(best) +
                                " or beyond, at the edge of what a step's kernels can plausibly differ from "
                                "their benchmarks: the profile's curves, not the steps, are what is wrong");
  }
  double lo = best - kStep;
  double hi = best + kStep;
  const double golden = (std::sqrt(5.0) - 1) / 2;
  for (int i = 0; i < 60; ++i) {
    const double a = hi - golden * (hi - lo);
    const double b = lo + golden * (hi - lo);
    if (squared_log_error(runs, a) < squared_log_error(runs, b)) {
      hi = b;
    } else {
      lo = a;
    }
  }
  return (lo + hi) / 2;
}

RunFitResult fit_runs(const std::vector<RunResponse>& runs) {
  RunFitResult result;
  result.factor = fit_kernel_time_factor(runs);
  for (const auto& run : runs) result.in_sample_errors.push_back(run.predicted_seconds(result.factor) / run.measured_seconds - 1);

  const auto error_without = [&](std::size_t i, auto&& excluded) {
    std::vector<RunResponse> rest;
    for (std::size_t j = 0; j < runs.size(); ++j) {
      if (!excluded(j)) rest.push_back(runs[j]);
    }
    if (rest.empty()) throw std::invalid_argument("leave-out fit: no runs left");
    return runs[i].predicted_seconds(fit_kernel_time_factor(rest)) / runs[i].measured_seconds - 1;
  };
  if (runs.size() > 1) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      result.leave_one_out_errors.push_back(error_without(i, [i](std::size_t j) { return j == i; }));
    }
  }
  std::set<std::string> families;
  for (const auto& run : runs) families.insert(run.family);
  if (families.size() > 1) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      result.leave_one_family_out_errors.push_back(
          error_without(i, [&](std::size_t j) { return runs[j].family == runs[i].family; }));
    }
  }
  return result;
}

double median_absolute(std::vector<double> errors) {
  if (errors.empty()) return 0;
  for (auto& e : errors) e = std::abs(e);
  std::sort(errors.begin(), errors.end());
  const std::size_t middle = errors.size() / 2;
  return errors.size() % 2 ? errors[middle] : 0.5 * (errors[middle - 1] + errors[middle]);
}

}  // namespace shardsim::calib
