#include "sim/search/training_time.h"

#include <cmath>
#include <stdexcept>

namespace shardsim::sim {

std::int64_t steps_for_tokens(double tokens, std::int64_t tokens_per_step) {
  if (!(tokens > 0) || !std::isfinite(tokens)) throw std::invalid_argument("the token budget must be positive");
  if (tokens_per_step <= 0) throw std::invalid_argument("a step must train on at least one token");
  const double steps = std::ceil(tokens / static_cast<double>(tokens_per_step));
  if (!(steps < 0x1p62)) throw std::invalid_argument("the token budget needs more steps than shardsim counts (2^62)");
  return static_cast<std::int64_t>(steps);
}

TrainingTime training_time(double tokens, std::int64_t tokens_per_step, double step_seconds, int gpus) {
  TrainingTime time;
  time.steps = steps_for_tokens(tokens, tokens_per_step);
  time.seconds = static_cast<double>(time.steps) * step_seconds;
  time.gpu_hours = gpus * time.seconds / kSecondsPerHour;
  return time;
}

}  // namespace shardsim::sim
