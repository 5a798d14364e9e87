// What training on a token budget costs at a simulated step: whole steps of
// the global batch, their time, and the GPU-hours they hold. At the simulated
// step rate: what failures, restarts and checkpoints add is
// sim/search/interruptions.h's.
#pragma once

#include <cstdint>

namespace shardsim::sim {

// Training times are told in days; a deadline is given in them.
inline constexpr double kSecondsPerDay = 86400;
inline constexpr double kSecondsPerHour = 3600;  // GPU-hours

struct TrainingTime {
  std::int64_t steps = 0;
  double seconds = 0;
  double gpu_hours = 0;
};

// Optimizer steps that see at least `tokens` at `tokens_per_step` each;
// std::invalid_argument unless both are positive and finite.
std::int64_t steps_for_tokens(double tokens, std::int64_t tokens_per_step);

TrainingTime training_time(double tokens, std::int64_t tokens_per_step, double step_seconds, int gpus);

}  // namespace shardsim::sim
