#include "workloads/import/deepspeed_config.h"

#include "topology/base/json_input.h"

#include <limits>

namespace shardsim::workloads {

namespace {

// Reads the keys DeepSpeed defines, with their types and defaults.
class DeepSpeedReader {
 public:
  DeepSpeedReader(const nlohmann::json& object, std::string file, std::string path)
      : object_(object), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json* find(const std::string& key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string where(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  // A number of elements (or "auto", resolved to `automatic`).
  std::optional<double> count(const std::string& key, std::optional<double> automatic = std::nullopt) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_string() && v->get<std::string>() == "auto" && automatic) return automatic;
    if (!v->is_number() || v->get<double>() < 0) {
      throw_input_error(file_, where(key), std::string("must be a non-negative number") + (automatic ? " or \"auto\"" : "") +
                                               ", got " + v->dump());
    }
    return v->get<double>();
  }
  std::optional<std::int64_t> integer(const std::string& key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) throw_input_error(file_, where(key), "must be an integer, got " + v->dump());
    return v->get<std::int64_t>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) throw_input_error(file_, where(key), "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  // A positive integer; absent or "auto" leave it to be derived.
  std::optional<std::int64_t> positive_or_auto(const std::string& key) const {
    const nlohmann::json* v = find(key);
    if (v == nullptr || (v->is_string() && v->get<std::string>() == "auto")) return std::nullopt;
    const auto value = integer(key);
    if (*value < 1) throw_input_error(file_, where(key), "must be positive, got " + std::to_string(*value));
    // Batches and steps are counts of sequences: an int holds them, and products of them stay in range.
    if (*value > std::numeric_limits<int>::max()) {
      throw_input_error(file_, where(key), "must be at most 2147483647, got " + std::to_string(*value));
    }
    return value;
  }
  // A group of GPUs (MiCS shards, hpZ partitions), bounded as plan factors are.
  std::optional<std::int64_t> gpu_count(const std::string& key) const {
    const auto value = integer(key);
    if (value && *value > kMaxGpuCount) {
      throw_input_error(file_, where(key), "must be a GPU count (at most " + std::to_string(kMaxGpuCount) + "), got " +
                                               std::to_string(*value));
    }
    return value;
  }
  DeepSpeedReader object(const std::string& key) const {
    static const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json* v = find(key);
    if (v != nullptr && !v->is_object()) throw_input_error(file_, where(key), "must be an object, got " + v->dump());
    return DeepSpeedReader(v == nullptr ? empty : *v, file_, where(key));
  }

 private:
  const nlohmann::json& object_;
  std::string file_;
  std::string path_;
};

}  // namespace

DeepSpeedConfig parse_deepspeed_config(const nlohmann::json& document, const std::string& file, const ModelSpec& model) {
  if (!document.is_object()) throw_input_error(file, "(root)", "must be a JSON object");
  const DeepSpeedReader root(document, file, "");
  DeepSpeedConfig config;
  config.file = file;
  config.train_batch_size = root.positive_or_auto("train_batch_size");
  config.micro_batch_size = root.positive_or_auto("train_micro_batch_size_per_gpu");
  config.gradient_accumulation_steps = root.positive_or_auto("gradient_accumulation_steps");
  if (root.object("bf16").boolean("enabled").value_or(false)) config.fp16 = false;
  if (root.object("fp16").boolean("enabled").value_or(false)) config.fp16 = true;

  const DeepSpeedReader zero = root.object("zero_optimization");
  const std::int64_t stage = zero.integer("stage").value_or(0);
  if (stage < 0 || stage > 3) throw_input_error(file, "zero_optimization.stage", "must be 0, 1, 2 or 3, got " + std::to_string(stage));

  Plan& plan = config.plan;
  plan.name = "deepspeed-zero" + std::to_string(stage);
  plan.system = ShardingSystem::zero;
  const int all = 0;
  plan.factors = stage == 0 ? FactorSpec{1, 1, 1}
               : stage == 1 ? FactorSpec{1, 1, all}
               : stage == 2 ? FactorSpec{1, all, all}
                            : FactorSpec{all, all, all};
  const std::int64_t mics = zero.gpu_count("mics_shard_size").value_or(-1);
  if (mics > 0) {
    plan.system = ShardingSystem::mics;
    plan.name = "deepspeed-mics" + std::to_string(mics);
    plan.factors = FactorSpec{static_cast<int>(mics), static_cast<int>(mics), static_cast<int>(mics)};
    plan.hierarchical_parameter_gather = zero.boolean("mics_hierarchical_params_gather").value_or(false);
  }
  const std::int64_t hpz = zero.gpu_count("zero_hpz_partition_size").value_or(1);
  if (hpz > 1) {
    if (stage != 3) throw_input_error(file, "zero_optimization.zero_hpz_partition_size", "needs stage 3 (ZeRO++)");
    plan.system = ShardingSystem::zero_plus_plus;
    plan.name = "deepspeed-zeropp-hpz" + std::to_string(hpz);
    plan.secondary_parameter_group = static_cast<int>(hpz);
  }
  for (auto [key, value] : {std::pair{"zero_quantized_weights", &plan.quantized_weights},
                            std::pair{"zero_quantized_gradients", &plan.quantized_gradients}}) {
    *value = zero.boolean(key).value_or(false);
    if (*value && (stage != 3 || mics > 0)) {
      throw_input_error(file, std::string("zero_optimization.") + key, "needs stage 3 without MiCS (ZeRO++)");
    }
  }
  if (plan.quantized_weights || plan.quantized_gradients) {
    plan.name += std::string(plan.quantized_weights ? "-qwz" : "") + (plan.quantized_gradients ? "-qgz" : "");
  }

  // ZeRO-Offload and ZeRO-Infinity (offload_optimizer / offload_param to
  // "cpu" or "nvme") are not modelled: said, not answered as if the states
  // stayed on the GPU without a word.
  for (const std::string key : {"offload_optimizer", "offload_param"}) {
    const nlohmann::json* device = zero.object(key).find("device");
    if (device == nullptr) continue;
    if (!device->is_string()) {
      throw_input_error(file, "zero_optimization." + key + ".device", "must be a string, got " + device->dump());
    }
    if (device->get<std::string>() == "none") continue;
    config.notes.push_back(file + ": zero_optimization." + key + ".device \"" + device->get<std::string>() +
                           "\": offload is not modelled; the " +
                           (key == "offload_optimizer" ? "optimizer states are" : "parameters are") +
                           " counted and updated on the GPU, without the PCIe copies and CPU work offload adds");
  }

  const double h2 = static_cast<double>(model.hidden) * static_cast<double>(model.hidden);
  const double bytes_per_element = 2;  // bf16 / fp16 buckets
  plan.buckets.reduce_bytes = bytes_per_element * zero.count("reduce_bucket_size", h2).value_or(5e8);
  plan.buckets.all_gather_bytes = bytes_per_element * zero.count("allgather_bucket_size").value_or(5e8);
  plan.buckets.prefetch_bytes = bytes_per_element * zero.count("stage3_prefetch_bucket_size", 0.9 * h2).value_or(5e7);
  plan.buckets.persistence_threshold_parameters =
      zero.count("stage3_param_persistence_threshold", 10.0 * static_cast<double>(model.hidden)).value_or(1e5);
  plan.buckets.max_live_parameters = zero.count("stage3_max_live_parameters").value_or(1e9);
  plan.buckets.max_reuse_distance_parameters = zero.count("stage3_max_reuse_distance").value_or(1e9);
  const bool overlap = zero.boolean("overlap_comm").value_or(stage == 3);
  plan.overlap = {overlap, overlap, overlap};
  plan.as_implemented = true;
  // ZeRO-1/2 gradient reduction: reduce_scatter false all-reduces every
  // bucket; otherwise each bucket goes to its owners as one reduce per owner,
  // unless use_multi_rank_bucket_allreduce (DeepSpeed's current default; the
  // releases before it had only the reduces) packs them into one all-reduce.
  const bool reduce_scatter = zero.boolean("reduce_scatter").value_or(true);
  plan.multi_rank_bucketing = !reduce_scatter || zero.boolean("use_multi_rank_bucket_allreduce").value_or(true);
  plan.flat_all_gather = false;
  plan.sources = {"imported from DeepSpeed config " + file};
  return config;
}

DeepSpeedConfig load_deepspeed_config(const std::string& file, const ModelSpec& model) {
  return parse_deepspeed_config(load_json_file(file), file, model);
}

TrainingConfig apply_deepspeed_batch(TrainingConfig training, const DeepSpeedConfig& ds, int gpus) {
  if (ds.fp16) training.fp16 = *ds.fp16;
  auto fail = [&](const std::string& key, const std::string& what) { throw_input_error(ds.file, key, what); };
  std::optional<std::int64_t> train = ds.train_batch_size, micro = ds.micro_batch_size, steps = ds.gradient_accumulation_steps;
  if (!micro && train && steps) {
    if (*train % (*steps * gpus) != 0) fail("train_batch_size", "is not a multiple of gradient_accumulation_steps x GPUs");
    micro = *train / (*steps * gpus);
  }
  if (micro) training.micro_batch_size = *micro;
  if (!train && micro && steps) train = *micro * *steps * gpus;
  if (train) {
    if (micro && steps && *train != *micro * *steps * gpus) {
      fail("train_batch_size", std::to_string(*train) + " != micro-batch " + std::to_string(*micro) + " x accumulation " +
                                   std::to_string(*steps) + " x " + std::to_string(gpus) + " GPUs");
    }
    training.global_batch_sequences = *train;
  }
  return training;
}

}  // namespace shardsim::workloads
