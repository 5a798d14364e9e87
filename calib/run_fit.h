// RunFit: the one global parameter shardsim fits to published end-to-end
// runs, the profile's kernel_time_factor (calib/profile.h), and how well it
// carries to runs it was not fitted on.
//
// Each run's predicted step time is linear in the factor where its kernels
// are on the critical path: t(f) = fixed + scaled x f, from two simulations
// (shardsim calib fit-runs). The fit minimises the sum of squared log ratios
// of predicted to measured step time, so that a run twice too slow weighs as
// much as one half too fast. Beside the in-sample errors it gives each run's
// error under the factor fitted without it (leave one out) and without its
// whole family (leave one family out: a paper, a framework, a GPU), the
// honest measure of what the factor does for a run nobody measured.
#pragma once

#include <string>
#include <vector>

namespace shardsim::calib {

struct RunResponse {
  std::string name;
  std::string family;
  double measured_seconds = 0;
  double fixed_seconds = 0;   // what does not scale with kernel time (exposed communication, waits)
  double scaled_seconds = 0;  // what does, at factor 1
  double predicted_seconds(double factor) const { return fixed_seconds + scaled_seconds * factor; }
};

// The line through two simulations of a run, at factors f0 != f1.
RunResponse linear_response(std::string name, std::string family, double measured_seconds, double f0,
                            double seconds_at_f0, double f1, double seconds_at_f1);

constexpr double kMinKernelTimeFactor = 0.5;
constexpr double kMaxKernelTimeFactor = 2.0;

// The factor in [kMinKernelTimeFactor, kMaxKernelTimeFactor] that minimises
// the sum of squared log(predicted / measured). Throws std::invalid_argument
// for no runs, or when the best factor lies at a bound (the curves, not the
// steps, are then what is wrong).
double fit_kernel_time_factor(const std::vector<RunResponse>& runs);

struct RunFitResult {
  double factor = 1;
  // predicted / measured - 1, one per run, in the runs' order.
  std::vector<double> in_sample_errors;
  std::vector<double> leave_one_out_errors;
  std::vector<double> leave_one_family_out_errors;  // empty when the runs hold one family
};

RunFitResult fit_runs(const std::vector<RunResponse>& runs);

double median_absolute(std::vector<double> errors);

}  // namespace shardsim::calib
