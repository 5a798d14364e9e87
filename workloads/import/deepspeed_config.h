// DeepSpeed config JSON -> Plan (and the batch and precision it fixes).
//
// zero_optimization.stage 0-3 gives the ZeRO factors; mics_shard_size > 0
// makes it MiCS over that many GPUs (mics_hierarchical_params_gather: its
// hierarchical scheme); zero_hpz_partition_size > 1 makes it ZeRO++ with a
// secondary copy over that many GPUs. Bucket sizes are in ELEMENTS, turned
// into bytes at the training precision (2 bytes for bf16/fp16):
// reduce_bucket_size and allgather_bucket_size (default 5e8),
// stage3_prefetch_bucket_size (5e7); kept in parameters:
// stage3_param_persistence_threshold (1e5), stage3_max_live_parameters and
// stage3_max_reuse_distance (1e9). "auto" resolves as transformers'
// DeepSpeed integration does: reduce_bucket_size = hidden^2, stage3_prefetch_bucket_size = 0.9 hidden^2,
// stage3_param_persistence_threshold = 10 hidden. overlap_comm defaults to
// true for stage 3 only, as in DeepSpeed's code. The behaviour is DeepSpeed's
// as implemented. Keys that do not bear on sharding (optimizer, scheduler,
// gradient clipping, ...) are ignored; the ones read must have the right type.
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

struct DeepSpeedConfig {
  Plan plan;
  std::optional<std::int64_t> train_batch_size;  // sequences per step over all GPUs
  std::optional<std::int64_t> micro_batch_size;  // train_micro_batch_size_per_gpu
  std::optional<std::int64_t> gradient_accumulation_steps;
  std::optional<bool> fp16;  // bf16.enabled / fp16.enabled, if either is set
  std::string file;
  // Where the simulation departs from the config (ZeRO-Offload's devices),
  // for the user to see.
  std::vector<std::string> notes;
};

DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& document, const std::string& file, const ModelSpec& model);
DeepSpeedConfig load_deepspeed_config(const std::string& file, const ModelSpec& model);

// The training config with the DeepSpeed batch and precision applied: any two
// of train_batch_size = micro x accumulation x GPUs give the third; all three
// must agree. Throws InputError naming the DeepSpeed file and the key.
TrainingConfig apply_deepspeed_batch(TrainingConfig training, const DeepSpeedConfig& deepspeed, int gpus);

}  // namespace shardsim::workloads
