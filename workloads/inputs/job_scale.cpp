#include "workloads/inputs/job_scale.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace shardsim::workloads {

namespace {

// `width` times `ratio`, rounded, at least 1; 0 (a part the model lacks) stays 0.
std::int64_t scaled_width(std::int64_t width, double ratio) {
  return width == 0 ? 0 : std::max<std::int64_t>(1, std::llround(static_cast<double>(width) * ratio));
}

}  // namespace

bool JobScale::empty() const {
  return !layers && !hidden && !ffn_hidden && !vocab && !sequence_length && !micro_batches;
}

std::string JobScale::describe() const {
  std::ostringstream out;
  const auto item = [&](const char* key, const auto& value) {
    if (!value) return;
    if (out.tellp() > 0) out << ", ";
    out << key << " " << *value;
  };
  item("layers", layers);
  item("hidden", hidden);
  item("ffn", ffn_hidden);
  item("vocab", vocab);
  item("seq", sequence_length);
  item("micro_batches", micro_batches);
  return out.str();
}

JobScale parse_job_scale(const std::string& text, const std::string& option) {
  JobScale scale;
  std::istringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto equals = item.find('=');
    const std::string key = item.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : item.substr(equals + 1);
    std::int64_t number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (equals == std::string::npos || error != std::errc() || end != value.data() + value.size() || number < 1) {
      throw std::invalid_argument(option + ": '" + item + "' is not key=positive integer");
    }
    // The model's and the training config's own plausibility bounds
    // (validate_model, parse_training_config), said here with the option.
    const auto bounded = [&](std::int64_t bound, const char* power) {
      if (number > bound) {
        throw std::invalid_argument(option + ": " + key + "=" + value + " is implausibly large (at most " + power + ")");
      }
      return number;
    };
    if (key == "layers") {
      scale.layers = static_cast<int>(bounded(1 << 20, "2^20"));
    } else if (key == "hidden") {
      scale.hidden = bounded(kMaxModelWidth, "2^20");
    } else if (key == "ffn") {
      scale.ffn_hidden = bounded(kMaxModelWidth, "2^20");
    } else if (key == "vocab") {
      scale.vocab = bounded(kMaxVocabulary, "2^24");
    } else if (key == "seq") {
      scale.sequence_length = bounded(kMaxSequenceLength, "2^24");
    } else if (key == "micro_batches") {
      scale.micro_batches = number;
    } else {
      throw std::invalid_argument(option + ": unknown key '" + key +
                                  "' (layers, hidden, ffn, vocab, seq, micro_batches)");
    }
  }
  if (scale.empty()) throw std::invalid_argument(option + ": give at least one key=value");
  return scale;
}

void apply_job_scale(const JobScale& scale, int data_parallel, ModelSpec& model, TrainingConfig& training) {
  if (scale.empty()) return;
  const ModelSpec original = model;
  if (scale.layers) model.layers = *scale.layers;
  if (scale.hidden) {
    model.hidden = *scale.hidden;
    const double ratio = static_cast<double>(*scale.hidden) / static_cast<double>(original.hidden);
    const auto shrink = [ratio](std::int64_t width) { return scaled_width(width, ratio); };
    if (model.has_mla) {
      // No head_dim to keep: the heads' widths are MLA's own.
      model.heads = model.kv_heads = static_cast<int>(shrink(original.heads));
      model.mla.q_lora_rank = shrink(original.mla.q_lora_rank);
      model.mla.kv_lora_rank = shrink(original.mla.kv_lora_rank);
    } else if (model.head_dim > model.hidden) {
      model.head_dim = model.hidden;
      model.heads = model.kv_heads = 1;
    } else {
      model.heads = static_cast<int>(std::max<std::int64_t>(1, model.hidden / model.head_dim));
      // Keep the query heads per key/value head where the new head count allows it.
      const int group = std::max(1, original.heads / std::max(1, original.kv_heads));
      model.kv_heads = model.heads % group == 0 ? model.heads / group : model.heads;
    }
    if (!scale.ffn_hidden) model.ffn_hidden = shrink(original.ffn_hidden);
  }
  if (scale.ffn_hidden) model.ffn_hidden = *scale.ffn_hidden;
  if (model.has_moe) {
    // Experts shrink with the MLP; at least one MoE layer survives fewer layers.
    const double ratio = static_cast<double>(model.ffn_hidden) / static_cast<double>(original.ffn_hidden);
    model.moe.expert_ffn_hidden = scaled_width(original.moe.expert_ffn_hidden, ratio);
    model.moe.shared_expert_ffn_hidden = scaled_width(original.moe.shared_expert_ffn_hidden, ratio);
    model.moe.first_dense_layers = std::min(original.moe.first_dense_layers, model.layers - 1);
  }
  if (scale.vocab) model.vocab = *scale.vocab;
  if (scale.sequence_length) {
    training.sequence_length = *scale.sequence_length;
    model.max_positions = std::max(model.max_positions, *scale.sequence_length);
  }
  if (scale.micro_batches) {
    training.global_batch_sequences = *scale.micro_batches * training.micro_batch_size * data_parallel;
  }
  model.name = original.name + " scaled (" + scale.describe() + ")";
  validate_model(model, model.name);
}

}  // namespace shardsim::workloads
