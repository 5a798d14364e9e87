// The interruption model against a simulation of the process it describes:
// Poisson failures, segments of work closed by checkpoints, restarts that start
// over when a failure hits them.
#include "sim/search/interruptions.h"
#include "sim/search/training_time.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

using namespace shardsim;

namespace {

// Wall time of `useful` seconds of training checkpointed every `interval`
// seconds of work, one random history of failures `mean` seconds apart.
class FailureHistory {
 public:
  FailureHistory(double mean, std::uint64_t seed) : engine_(seed), gap_(1 / mean) {}

  double train(double useful, double interval, double checkpoint, double restart) {
    double wall = 0;
    double done = 0;
    double next_failure = gap_(engine_);
    while (done < useful) {
      const double segment = std::min(interval, useful - done) + checkpoint;
      if (wall + segment <= next_failure) {
        wall += segment;
        done += segment - checkpoint;
        continue;
      }
      // The segment is lost; restart until one restart sees no failure.
      wall = next_failure;
      next_failure = wall + gap_(engine_);
      while (wall + restart > next_failure) {
        wall = next_failure;
        next_failure = wall + gap_(engine_);
      }
      wall += restart;
    }
    return wall;
  }

 private:
  std::mt19937_64 engine_;
  std::exponential_distribution<double> gap_;
};

}  // namespace

TEST_CASE("one checkpointed segment takes Daly's expected time under Poisson failures", "[interruptions]") {
  // Failures 10 s apart on average, a 2 s segment, a 0.5 s checkpoint, a 1 s
  // restart: a quarter of the segments fail at least once.
  const double mean = 10, interval = 2, checkpoint = 0.5, restart = 1;
  FailureHistory history(mean, 7);
  const int segments = 200000;
  double total = 0;
  for (int i = 0; i < segments; ++i) total += history.train(interval, interval, checkpoint, restart);
  const double closed_form = sim::expected_segment_seconds(interval, checkpoint, restart, mean);
  CHECK(closed_form == Approx(10 * std::exp(0.1) * (std::exp(0.25) - 1)).epsilon(1e-12));
  CHECK(total / segments == Approx(closed_form).epsilon(0.01));
}

TEST_CASE("the optimal checkpoint interval maximizes the effective training time ratio", "[interruptions]") {
  const double mean = 3600, checkpoint = 10, restart = 300;
  const double best = sim::optimal_checkpoint_interval(checkpoint, mean);
  const auto ettr = [&](double interval) {
    return interval / sim::expected_segment_seconds(interval, checkpoint, restart, mean);
  };
  CHECK(ettr(best) > ettr(0.95 * best));
  CHECK(ettr(best) > ettr(1.05 * best));
  // Young's first-order interval when the checkpoint is short against M; Daly's
  // first-order correction takes one checkpoint off it.
  CHECK(best == Approx(std::sqrt(2 * checkpoint * mean) - checkpoint).epsilon(0.02));
  // A checkpoint that costs nothing is taken as often as possible.
  CHECK(sim::optimal_checkpoint_interval(0, mean) == Approx(0).margin(1e-6));
}

TEST_CASE("a job's ETTR is what a simulated training with its failures and checkpoints gives", "[interruptions]") {
  // 1000 GPUs failing 0.0864 times a day each: the job fails every 1000 s. A
  // 1 TB training state in 1 GB shards written at 100 MB/s: 10 s checkpoints;
  // restarts of 90 s plus the 10 s reload.
  sim::ReliabilityInputs inputs;
  inputs.failures_per_gpu_day = 0.0864;
  inputs.checkpoint_bytes_per_second_per_gpu = 1e8;
  inputs.restart_seconds = 90;
  const double useful = 20000;
  const sim::Goodput goodput = sim::expected_goodput(inputs, 1000, 1e12, useful);
  CHECK(goodput.checkpoint_bytes_per_gpu == Approx(1e9));
  CHECK(goodput.checkpoint_seconds == Approx(10));
  CHECK(goodput.restart_seconds == Approx(100));
  CHECK(goodput.job_failures_per_second == Approx(1e-3));
  CHECK(goodput.wall_seconds == Approx(useful / goodput.ettr));
  CHECK(goodput.expected_failures == Approx(goodput.wall_seconds * 1e-3));

  FailureHistory history(1000, 11);
  const int runs = 4000;
  double wall = 0;
  for (int i = 0; i < runs; ++i) {
    wall += history.train(useful, goodput.checkpoint_interval_seconds, goodput.checkpoint_seconds, goodput.restart_seconds);
  }
  CHECK(useful / (wall / runs) == Approx(goodput.ettr).epsilon(0.01));
  // About 10 % is lost at this rate: the model is not trivially 1.
  CHECK(goodput.ettr < 0.9);
}

TEST_CASE("without failures, or with free checkpoints, interruptions cost what they must", "[interruptions]") {
  sim::ReliabilityInputs inputs;
  inputs.failures_per_gpu_day = 0;
  const sim::Goodput none = sim::expected_goodput(inputs, 1024, 1e12, 3600);
  CHECK(none.ettr == 1);
  CHECK(none.wall_seconds == 3600);
  CHECK(none.expected_failures == 0);
  CHECK(none.checkpoint_interval_seconds == 0);

  // Checkpoints that pause nothing: only restarts cost, e^(-R/M) of the time kept.
  inputs.failures_per_gpu_day = 0.0864;
  inputs.checkpoint_seconds = 0;
  inputs.restart_seconds = 100;
  inputs.checkpoint_bytes_per_second_per_gpu = 1e9;
  const sim::Goodput free = sim::expected_goodput(inputs, 1000, 0, 3600);
  CHECK(free.ettr == Approx(std::exp(-0.1)));

  // A restart far longer than the time between failures never gets through.
  inputs.restart_seconds = 1e7;
  CHECK(std::isinf(sim::expected_goodput(inputs, 1000, 0, 3600).wall_seconds));
}

TEST_CASE("a checkpoint holds the weights and the mixed-precision Adam state", "[interruptions]") {
  // ZeRO's accounting: 2 bytes of bf16/fp16 weights, 12 of fp32 master weights and moments.
  CHECK(sim::checkpoint_bytes_per_parameter(2) == 14);
}

TEST_CASE("bad reliability inputs are refused by name", "[interruptions]") {
  sim::ReliabilityInputs inputs;
  inputs.failures_per_gpu_day = -1;
  CHECK_THROWS_WITH(sim::expected_goodput(inputs, 8, 1e9, 1), Catch::Contains("failures per GPU-day"));
  inputs = {};
  inputs.checkpoint_bytes_per_second_per_gpu = 0;
  CHECK_THROWS_WITH(sim::expected_goodput(inputs, 8, 1e9, 1), Catch::Contains("checkpoint bytes per second per GPU"));
  inputs = {};
  inputs.restart_seconds = std::nan("");
  CHECK_THROWS_WITH(sim::expected_goodput(inputs, 8, 1e9, 1), Catch::Contains("restart seconds"));
  CHECK_THROWS_WITH(sim::expected_goodput({}, 0, 1e9, 1), Catch::Contains("at least one GPU"));
}
