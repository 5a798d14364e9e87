#include "workloads/inputs/training.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"

#include <algorithm>
#include <iterator>

namespace shardsim::workloads {

TrainingConfig parse_training_config(const nlohmann::json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  TrainingConfig training;
  training.sequence_length = reader.positive_integer("sequence_length");
  if (training.sequence_length > kMaxSequenceLength) {
    reader.fail("sequence_length", std::to_string(training.sequence_length) + " tokens is implausibly long (at most 2^24)");
  }
  training.micro_batch_size = reader.positive_integer("micro_batch_size");
  if (training.micro_batch_size > kMaxMicroBatchSize) {
    reader.fail("micro_batch_size", std::to_string(training.micro_batch_size) + " sequences is implausibly many (at most 2^20)");
  }
  auto batch = reader.object("global_batch");
  const bool tokens = batch.has("tokens");
  if (tokens == batch.has("sequences")) {
    batch.fail(tokens ? "sequences" : "tokens", "give the global batch in exactly one of tokens or sequences");
  }
  if (tokens) {
    const std::int64_t count = batch.positive_integer("tokens");
    if (count % training.sequence_length != 0) {
      batch.fail("tokens", std::to_string(count) + " tokens is not a whole number of " +
                               std::to_string(training.sequence_length) + "-token sequences");
    }
    training.global_batch_sequences = count / training.sequence_length;
  } else {
    training.global_batch_sequences = batch.positive_integer("sequences");
  }
  batch.finish();
  training.fp16 = reader.choice("precision", {"bf16", "fp16"}) == "fp16";
  training.fp8_gemms = reader.boolean("fp8_gemms");
  const std::string recompute = reader.choice("recompute", {"none", "selective", "full", "ops"});
  training.recompute = recompute == "full"        ? Recompute::full
                       : recompute == "selective" ? Recompute::selective
                       : recompute == "ops"       ? Recompute::ops
                                                  : Recompute::none;
  if (reader.has("recompute_interval")) {
    if (training.recompute != Recompute::full) {
      reader.fail("recompute_interval", "says which layers full recompute rebuilds, but recompute is \"" + recompute + "\"");
    }
    const std::int64_t interval = reader.positive_integer("recompute_interval");
    if (interval > kMaxRecomputeInterval) {
      reader.fail("recompute_interval", "at most " + std::to_string(kMaxRecomputeInterval) + " (one layer in so many), got " +
                                            std::to_string(interval));
    }
    training.recompute_interval = static_cast<int>(interval);
  }
  if (reader.has("recompute_modules")) {
    if (training.recompute != Recompute::selective) {
      reader.fail("recompute_modules",
                  "names what selective recompute rebuilds, but recompute is \"" + recompute + "\"");
    }
    std::string problem;
    training.recompute_modules = parse_recompute_modules(reader.string_list("recompute_modules"), problem);
    if (!problem.empty()) reader.fail("recompute_modules", problem);
  }
  training.flash_attention = reader.boolean("flash_attention");
  if (training.recompute == Recompute::ops && !training.flash_attention) {
    reader.fail("recompute", "\"ops\" keeps the fused attention's output (torchtitan's policy lists the flash and "
                             "efficient SDPA kernels): it needs flash_attention true");
  }
  if (reader.has("attention_kernel")) {
    const std::string name = reader.string("attention_kernel");
    const std::optional<AttentionKernel> kernel = find_flash_attention(name);
    if (!kernel) {
      reader.fail("attention_kernel", "must be one of " + std::string(kFlashAttentionNames) + ", got \"" + name + "\"");
    }
    if (!training.flash_attention) {
      reader.fail("attention_kernel", "names a FlashAttention kernel, but flash_attention is false");
    }
    training.attention_kernel = *kernel;
  }
  if (reader.has("dropout")) {
    auto dropout = reader.object("dropout");
    const auto probability = [&dropout](const std::string& key) {
      const double p = dropout.has(key) ? dropout.non_negative_number(key) : 0.0;
      if (p >= 1) dropout.fail(key, "must be a probability below 1 (1 drops everything)");
      return p;
    };
    training.attention_dropout = probability("attention");
    training.hidden_dropout = probability("hidden");
    dropout.finish();
  }
  reader.finish();
  return training;
}

TrainingConfig load_training_config(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "workloads/training", "training config");
  return parse_training_config(load_json_file(file), file);
}

std::int64_t gradient_accumulation_steps(const TrainingConfig& training, int data_parallel, const std::string& file) {
  const std::int64_t per_step = training.micro_batch_size * data_parallel;
  if (training.global_batch_sequences % per_step != 0) {
    throw_input_error(file, "global_batch",
                      std::to_string(training.global_batch_sequences) + " sequences is not a multiple of micro-batch " +
                          std::to_string(training.micro_batch_size) + " x " + std::to_string(data_parallel) +
                          " data-parallel ranks");
  }
  return training.global_batch_sequences / per_step;
}

void check_sequence_length(const TrainingConfig& training, const ModelSpec& model, const std::string& file) {
  if (model.positions != PositionKind::learned || training.sequence_length <= model.max_positions) return;
  throw_input_error(file, "sequence_length",
                    std::to_string(training.sequence_length) + " tokens exceed model " + model.name + "'s max_positions " +
                        std::to_string(model.max_positions) +
                        ": its learned position embeddings stop there (use a training config with a shorter sequence, "
                        "e.g. seq2048-mbs1-4m-tokens)");
}

namespace {

struct RecomputeModuleName {
  const char* name;
  bool RecomputeModules::*part;
};

constexpr RecomputeModuleName kRecomputeModules[] = {
    {"core_attn", &RecomputeModules::core_attention},   {"layernorm", &RecomputeModules::norms},
    {"mla_up_proj", &RecomputeModules::mla_up_projections}, {"moe_act", &RecomputeModules::moe_activation},
    {"mlp", &RecomputeModules::dense_mlp},               {"shared_experts", &RecomputeModules::shared_experts}};

}  // namespace

RecomputeModules parse_recompute_modules(const std::vector<std::string>& names, std::string& problem) {
  RecomputeModules modules;
  modules.core_attention = false;
  for (const std::string& name : names) {
    if (name == "moe") {
      problem = "\"moe\" (recomputing the whole MoE layer) is not modelled; " + std::string(kRecomputeModuleNames) +
                " are";
      return modules;
    }
    const auto* known = std::find_if(std::begin(kRecomputeModules), std::end(kRecomputeModules),
                                     [&](const RecomputeModuleName& m) { return name == m.name; });
    if (known == std::end(kRecomputeModules)) {
      problem = "\"" + name + "\" is not a module selective recompute rebuilds; expected " + kRecomputeModuleNames;
      return modules;
    }
    modules.*(known->part) = true;
  }
  return modules;
}

std::string recompute_module_names(const RecomputeModules& modules) {
  std::string names;
  for (const RecomputeModuleName& m : kRecomputeModules) {
    if (!(modules.*(m.part))) continue;
    if (!names.empty()) names += ' ';
    names += m.name;
  }
  return names;
}

std::string recompute_label(const TrainingConfig& training) {
  std::string label = to_string(training.recompute);
  if (training.recompute == Recompute::full && training.recompute_interval > 1) {
    label += " (every " + std::to_string(training.recompute_interval) + " layers)";
  }
  if (training.recompute == Recompute::selective && !(training.recompute_modules == RecomputeModules{})) {
    const std::string names = recompute_module_names(training.recompute_modules);
    label += " (" + (names.empty() ? std::string("no modules") : names) + ")";
  }
  return label;
}

std::string to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    case Recompute::ops: return "ops";
  }
  return "?";
}

}  // namespace shardsim::workloads
