#include "sim/cli/reliability_options.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdlib>
#include <string>

namespace shardsim::cli {

namespace {

// CLI11's Range lets infinity and NaN through its comparisons' gaps.
CLI::Validator finite_at_least(double least, bool strict) {
  return CLI::Validator(
      [least, strict](std::string& text) -> std::string {
        // CLI11 reads an empty value as 0, which would then fail far from its option.
        if (text.empty()) return "must be a number, got an empty value";
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return {};  // not a number: CLI11's conversion says so
        if (!std::isfinite(value) || value < least || (strict && value == least)) {
          return std::string("must be a finite number ") + (strict ? "> " : ">= ") + CLI::detail::to_string(least) +
                 ", got " + text;
        }
        return {};
      },
      strict ? "NUMBER > 0" : "NUMBER >= 0");
}

}  // namespace

void add_reliability_options(CLI::App& command, sim::ReliabilityInputs& inputs) {
  command
      .add_option("--failures-per-gpu-day", inputs.failures_per_gpu_day,
                  "Unexpected job interruptions per GPU per day; 0 leaves failures out (default: Llama 3 405B's 419 in "
                  "54 days on 16,384 H100)")
      ->check(finite_at_least(0, false))
      ->capture_default_str();
  command
      .add_option("--checkpoint-bytes-per-second", inputs.checkpoint_bytes_per_second_per_gpu,
                  "Storage throughput per GPU for writing and reloading its checkpoint shard (default: Llama 3's "
                  "2 TB/s shared by 16,384 GPUs)")
      ->check(finite_at_least(0, true))
      ->capture_default_str();
  command
      .add_option("--restart-seconds", inputs.restart_seconds,
                  "Failure to training again, without the checkpoint reload (default: MegaScale's detection and "
                  "diagnosis, 600 s, and initialization, 30 s)")
      ->check(finite_at_least(0, false))
      ->capture_default_str();
  command
      .add_option("--checkpoint-seconds", inputs.checkpoint_seconds,
                  "Training paused per checkpoint, e.g. with asynchronous checkpointing (default: the shard's write "
                  "time)")
      ->check(finite_at_least(0, false));
}

}  // namespace shardsim::cli
