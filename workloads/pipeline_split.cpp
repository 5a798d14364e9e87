#include "workloads/pipeline_split.h"

#include "topology/json_input.h"

#include <cstddef>
#include <utility>

namespace shardsim::workloads {

bool uneven_pipeline(const ModelParallelism& parallel) {
  return parallel.first_stage_layers || parallel.last_stage_layers || parallel.account_for_embedding ||
         parallel.account_for_loss;
}

namespace {

PipelineSplit refuse(std::string option, std::string problem) { return {{}, std::move(option), std::move(problem)}; }

std::string layer_count(int layers, const std::string& model_name) {
  return "the " + std::to_string(layers) + " layers of " + model_name;
}

std::string count(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// --decoder-first/last-pipeline-num-layers: per-stage counts, each stage's
// split evenly over its chunks.
PipelineSplit first_last_split(const ModelParallelism& mp, int layers, const std::string& model_name) {
  const int p = mp.pipeline, v = mp.virtual_stages;
  const int first = mp.first_stage_layers.value_or(0), last = mp.last_stage_layers.value_or(0);
  const int middle_stages = p - (mp.first_stage_layers ? 1 : 0) - (mp.last_stage_layers ? 1 : 0);
  const int middle_layers = layers - first - last;
  const std::string option = mp.first_stage_layers ? "first_stage_layers" : "last_stage_layers";
  if (middle_layers < 0) {
    return refuse(option, "the first and last stages' " + std::to_string(first + last) + " layers exceed " +
                              layer_count(layers, model_name));
  }
  if (middle_stages == 0 && middle_layers != 0) {
    return refuse(option, "the first and last stages' " + std::to_string(first + last) + " layers must add up to " +
                              layer_count(layers, model_name) + " with 2 pipeline stages");
  }
  if (middle_stages > 0 && middle_layers % (middle_stages * v) != 0) {
    return refuse(option, "leaves " + std::to_string(middle_layers) + " of " + layer_count(layers, model_name) +
                              " for " + count(middle_stages, "stage") + " of " + count(v, "chunk") +
                              ", which does not divide them evenly");
  }
  for (const auto& [key, count] : {std::pair{"first_stage_layers", mp.first_stage_layers},
                                   std::pair{"last_stage_layers", mp.last_stage_layers}}) {
    if (count && *count % v != 0) {
      return refuse(key, std::to_string(*count) + " layers do not split evenly over the stage's " + std::to_string(v) +
                             " chunks (virtual_stages)");
    }
  }
  std::vector<int> per_stage(static_cast<std::size_t>(p), middle_stages > 0 ? middle_layers / middle_stages : 0);
  if (mp.first_stage_layers) per_stage.front() = first;
  if (mp.last_stage_layers) per_stage.back() = last;
  PipelineSplit split;
  split.layers.resize(static_cast<std::size_t>(p * v));
  for (int c = 0; c < v; ++c) {
    for (int s = 0; s < p; ++s) split.layers[static_cast<std::size_t>(c * p + s)] = per_stage[static_cast<std::size_t>(s)] / v;
  }
  return split;
}

// --account-for-embedding/loss-in-pipeline-split: an even split of the
// layers plus one slot for each of the embedding and the loss.
PipelineSplit slot_split(const ModelParallelism& mp, int layers, const std::string& model_name) {
  const int chunks = mp.pipeline * mp.virtual_stages;
  const int slots = layers + (mp.account_for_embedding ? 1 : 0) + (mp.account_for_loss ? 1 : 0);
  if (slots % chunks != 0) {
    const std::string counted = mp.account_for_embedding && mp.account_for_loss ? "the embedding and the loss"
                                : mp.account_for_embedding                    ? "the embedding"
                                : mp.account_for_loss                         ? "the loss"
                                                                              : "";
    return refuse(mp.account_for_embedding ? "account_for_embedding" : mp.account_for_loss ? "account_for_loss" : "",
                  "pipeline x virtual_stages = " + std::to_string(chunks) + " must divide " +
                      layer_count(layers, model_name) +
                      (counted.empty() ? "" : " with " + counted + " counted as layers (" + std::to_string(slots) + ")"));
  }
  PipelineSplit split;
  split.layers.assign(static_cast<std::size_t>(chunks), slots / chunks);
  if (mp.account_for_embedding) --split.layers.front();
  if (mp.account_for_loss) --split.layers.back();
  return split;
}

}  // namespace

PipelineSplit split_pipeline(const ModelParallelism& mp, int layers, const std::string& model_name) {
  if (uneven_pipeline(mp) && mp.pipeline < 2) {
    return refuse("", "uneven pipeline stages (first_stage_layers, last_stage_layers, account_for_embedding, "
                      "account_for_loss) need at least 2 pipeline stages");
  }
  const bool counts = mp.first_stage_layers || mp.last_stage_layers;
  if (counts && (mp.account_for_embedding || mp.account_for_loss)) {
    return refuse(mp.account_for_embedding ? "account_for_embedding" : "account_for_loss",
                  "does not combine with first_stage_layers or last_stage_layers (Megatron-Core asserts it)");
  }
  PipelineSplit split = counts ? first_last_split(mp, layers, model_name) : slot_split(mp, layers, model_name);
  if (!split.ok()) return split;
  // The first virtual stage runs the embedding and the last the output layer
  // even without a layer; any other needs one.
  for (std::size_t vs = 1; vs + 1 < split.layers.size(); ++vs) {
    if (split.layers[vs] == 0) {
      return refuse("", "virtual stage " + std::to_string(vs) + " of " + std::to_string(split.layers.size()) +
                            " would hold no layer of " + model_name + " (" + std::to_string(layers) +
                            " layers): give the stages fewer chunks or more layers");
    }
  }
  return split;
}

std::vector<int> virtual_stage_layers(const ModelParallelism& mp, int layers, const std::string& model_name,
                                      const std::string& plan_file) {
  PipelineSplit split = split_pipeline(mp, layers, model_name);
  if (!split.ok()) {
    throw_input_error(plan_file, "model_parallel" + (split.option.empty() ? "" : "." + split.option), split.problem);
  }
  return std::move(split.layers);
}

}  // namespace shardsim::workloads
