// Interruptions: what failures cost a synchronous training job, and how often
// it should checkpoint against them.
//
// One failed GPU or host stops the whole job (Llama 3, arXiv:2407.21783,
// section 3.3.4), so a job of n GPUs fails at n times the per-GPU rate. Each
// failure costs a restart (detection, diagnosis, initialization, reloading the
// checkpoint) and the work done since the last checkpoint; each checkpoint
// pauses training while it is written. With failures a Poisson process of mean
// interval M, work cut into segments of tau seconds each followed by a
// checkpoint of delta, and a restart of R that itself starts over when a failure
// hits it, one segment takes on average
//     M e^(R/M) (e^((tau + delta)/M) - 1)
// (Daly 2006, "A higher order estimate of the optimum checkpoint interval for
// restart dumps", FGCS 22(3)). The effective training time ratio (ETTR, useful
// time over wall time) is tau over that. The tau that maximizes it solves
// e^((tau + delta)/M) (1 - tau/M) = 1, which for delta << M is Young's
// sqrt(2 delta M).
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/training.h"

#include <nlohmann/json.hpp>

#include <optional>

namespace shardsim::sim {

// Where the numbers a job's interruptions are priced on come from. The
// defaults are public figures of production runs; every one can be replaced.
struct ReliabilityInputs {
  // Unexpected interruptions per GPU per day. Default: Llama 3 405B saw 419 in
  // a 54-day snapshot on up to 16,384 H100 (Table 5 and section 3.3.4); over
  // all 16,384 that is 4.74e-4, a lower bound if fewer GPUs ran at times.
  double failures_per_gpu_day = 419.0 / (54.0 * 16384.0);
  // Storage throughput one GPU's checkpoint shard is written and read at.
  // Default: Llama 3's Tectonic storage, 2 TB/s sustained, shared by 16,384 GPUs.
  double checkpoint_bytes_per_second_per_gpu = 2e12 / 16384.0;
  // A restart without the checkpoint reload. Default: MegaScale (NSDI '24,
  // arXiv:2402.15627, sections 6.3 and 3.5): detecting the failure and running
  // diagnostics takes under 10 minutes, initialization under 30 s on more than
  // 10,000 GPUs, 630 s in all (stock Megatron-LM took 1047 s to initialize on
  // 2,048 GPUs).
  double restart_seconds = 600.0 + 30.0;
  // Time one checkpoint pauses training, when known (asynchronous
  // checkpointing pauses for less than the write); else the shard's write time.
  std::optional<double> checkpoint_seconds;
};

struct Goodput {
  double checkpoint_bytes_per_gpu = 0;  // the training state's shard
  double checkpoint_seconds = 0;        // delta: training paused per checkpoint
  double restart_seconds = 0;           // R: the restart and the checkpoint reload
  double job_failures_per_second = 0;   // 1/M; 0: failures left out
  double checkpoint_interval_seconds = 0;  // tau*: useful time between checkpoints; 0 without failures
  double ettr = 1;                         // useful time / wall time
  double wall_seconds = 0;                 // of the whole training
  double expected_failures = 0;            // during it
};

// The training state a checkpoint saves, per parameter: the weights in the
// training dtype and the optimizer's fp32 master weights and Adam moments.
double checkpoint_bytes_per_parameter(int bytes_per_value);

// What a checkpoint of `model` trained as `training` saves, all shards together.
double training_state_bytes(const workloads::ModelSpec& model, const workloads::TrainingConfig& training);

// std::invalid_argument naming the input that is negative or not finite (the
// bandwidth: not positive).
void check_reliability_inputs(const ReliabilityInputs& inputs);

// The expected cost of interruptions to `useful_seconds` of training on `gpus`
// GPUs whose training state is `checkpoint_bytes` in all, written in shards of
// equal size, checkpointing at the interval that maximizes ETTR. Without
// failures (a rate of 0) nothing is added. std::invalid_argument names the
// input that is negative or not finite.
Goodput expected_goodput(const ReliabilityInputs& inputs, int gpus, double checkpoint_bytes, double useful_seconds);

// Both as the JSON outputs of `run --tokens` and `capacity` write them.
nlohmann::json goodput_to_json(const Goodput& goodput);
nlohmann::json reliability_to_json(const ReliabilityInputs& inputs);

// Daly's expected wall time of one segment of `interval_seconds` useful work
// followed by a checkpoint, with failures `mean_seconds_between_failures`
// apart on average and a restart of `restart_seconds`.
double expected_segment_seconds(double interval_seconds, double checkpoint_seconds, double restart_seconds,
                                double mean_seconds_between_failures);

// The interval that maximizes interval / expected_segment_seconds.
double optimal_checkpoint_interval(double checkpoint_seconds, double mean_seconds_between_failures);

}  // namespace shardsim::sim
