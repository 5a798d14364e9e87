#include "sim/search/interruptions.h"

#include "sim/search/training_time.h"
#include "topology/base/text_format.h"
#include "workloads/memory/memory_model.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

namespace {

// NaN fails both comparisons, so it is refused too.
void require_at_least(const char* what, double value, double least, bool strict = false) {
  if (!std::isfinite(value) || value < least || (strict && value == least)) {
    throw std::invalid_argument(std::string(what) + ": must be a finite number " + (strict ? "> " : ">= ") +
                                printf_string("%g", least) + ", got " + printf_string("%g", value));
  }
}

}  // namespace

double checkpoint_bytes_per_parameter(int bytes_per_value) {
  return bytes_per_value + workloads::kOptimizerStateBytesPerParameter;
}

double training_state_bytes(const workloads::ModelSpec& model, const workloads::TrainingConfig& training) {
  return static_cast<double>(workloads::count_parameters(model).total()) *
         checkpoint_bytes_per_parameter(training.bytes_per_value);
}

void check_reliability_inputs(const ReliabilityInputs& inputs) {
  require_at_least("failures per GPU-day", inputs.failures_per_gpu_day, 0);
  require_at_least("restart seconds", inputs.restart_seconds, 0);
  require_at_least("checkpoint bytes per second per GPU", inputs.checkpoint_bytes_per_second_per_gpu, 0, true);
  if (inputs.checkpoint_seconds) require_at_least("checkpoint seconds", *inputs.checkpoint_seconds, 0);
}

double expected_segment_seconds(double interval_seconds, double checkpoint_seconds, double restart_seconds,
                                double mean_seconds_between_failures) {
  const double m = mean_seconds_between_failures;
  // expm1 keeps the digits when the segment is a small fraction of M.
  return m * std::exp(restart_seconds / m) * std::expm1((interval_seconds + checkpoint_seconds) / m);
}

double optimal_checkpoint_interval(double checkpoint_seconds, double mean_seconds_between_failures) {
  const double m = mean_seconds_between_failures;
  // h(tau) = e^((tau + delta)/M) (1 - tau/M) - 1 falls from e^(delta/M) - 1 >= 0
  // at tau = 0 to -1 at tau = M, so its one root is bracketed there.
  const auto h = [&](double tau) { return std::exp((tau + checkpoint_seconds) / m) * (1 - tau / m) - 1; };
  double low = 0;
  double high = m;
  for (int i = 0; i < 200 && high - low > 1e-12 * m; ++i) {
    const double mid = 0.5 * (low + high);
    (h(mid) > 0 ? low : high) = mid;
  }
  return 0.5 * (low + high);
}

Goodput expected_goodput(const ReliabilityInputs& inputs, int gpus, double checkpoint_bytes, double useful_seconds) {
  check_reliability_inputs(inputs);
  require_at_least("checkpoint bytes", checkpoint_bytes, 0);
  require_at_least("useful seconds", useful_seconds, 0);
  if (gpus < 1) throw std::invalid_argument("a job needs at least one GPU, got " + std::to_string(gpus));

  Goodput goodput;
  goodput.checkpoint_bytes_per_gpu = checkpoint_bytes / gpus;
  const double transfer_seconds = goodput.checkpoint_bytes_per_gpu / inputs.checkpoint_bytes_per_second_per_gpu;
  goodput.checkpoint_seconds = inputs.checkpoint_seconds.value_or(transfer_seconds);
  goodput.restart_seconds = inputs.restart_seconds + transfer_seconds;  // the reload reads what was written
  goodput.job_failures_per_second = gpus * inputs.failures_per_gpu_day / kSecondsPerDay;
  goodput.wall_seconds = useful_seconds;
  if (goodput.job_failures_per_second == 0) return goodput;

  const double m = 1 / goodput.job_failures_per_second;
  if (goodput.checkpoint_seconds == 0) {
    // Free checkpoints are taken continuously: only the restarts cost.
    goodput.ettr = std::exp(-goodput.restart_seconds / m);
  } else {
    goodput.checkpoint_interval_seconds = optimal_checkpoint_interval(goodput.checkpoint_seconds, m);
    goodput.ettr = goodput.checkpoint_interval_seconds /
                   expected_segment_seconds(goodput.checkpoint_interval_seconds, goodput.checkpoint_seconds,
                                            goodput.restart_seconds, m);
  }
  // A restart that outlasts many failure intervals underflows ETTR: the job
  // does not finish.
  goodput.wall_seconds = goodput.ettr > 0 ? useful_seconds / goodput.ettr : std::numeric_limits<double>::infinity();
  goodput.expected_failures = goodput.wall_seconds * goodput.job_failures_per_second;
  return goodput;
}

nlohmann::json goodput_to_json(const Goodput& g) {
  // JSON has no infinity: a job that never finishes has no wall time.
  const auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"checkpoint_bytes_per_gpu", g.checkpoint_bytes_per_gpu},
          {"checkpoint_seconds", g.checkpoint_seconds},
          {"restart_seconds", g.restart_seconds},
          {"job_failures_per_second", g.job_failures_per_second},
          {"checkpoint_interval_seconds", g.checkpoint_interval_seconds},
          {"ettr", g.ettr},
          {"wall_seconds", finite_or_null(g.wall_seconds)},
          {"expected_failures", finite_or_null(g.expected_failures)}};
}

nlohmann::json reliability_to_json(const ReliabilityInputs& r) {
  return {{"failures_per_gpu_day", r.failures_per_gpu_day},
          {"checkpoint_bytes_per_second_per_gpu", r.checkpoint_bytes_per_second_per_gpu},
          {"restart_seconds", r.restart_seconds},
          {"checkpoint_seconds", r.checkpoint_seconds ? nlohmann::json(*r.checkpoint_seconds) : nlohmann::json(nullptr)}};
}

}  // namespace shardsim::sim
