#include "workloads/inputs/pipeline_split.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <utility>

namespace shardsim::workloads {

bool uneven_pipeline(const ModelParallelism& parallel) {
  return parallel.first_stage_layers || parallel.last_stage_layers || parallel.account_for_embedding ||
         parallel.account_for_loss || parallel.layout;
}

namespace {

// Far above any real layout (a stage per GPU of the largest pipelines, a
// few hundred layers): a bound that keeps a stray "*99999999" from filling
// memory.
constexpr std::size_t kMaxLayoutCharacters = 1 << 20;

// The count of a "*n" starting at `star`, and where it ends; no count when
// there is no '*' there, `malformed` when the '*' has no number after it.
struct RepeatCount {
  std::size_t times = 1, end = 0;
  bool malformed = false;
};

RepeatCount repeat_count(const std::string& text, std::size_t star) {
  if (star >= text.size() || text[star] != '*') return {1, star, false};
  std::size_t end = star + 1, times = 0;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) != 0) {
    times = std::min(times * 10 + static_cast<std::size_t>(text[end] - '0'), kMaxLayoutCharacters + 1);
    ++end;
  }
  return {times, end, end == star + 1};
}

// Appends `times` copies of `what`, or says the layout grows too long.
bool append_repeated(std::string& out, const std::string& what, std::size_t times) {
  if (!what.empty() && times > (kMaxLayoutCharacters - out.size()) / what.size()) return false;
  for (std::size_t k = 0; k < times; ++k) out += what;
  return true;
}

const std::string kTooLong = "unrolls to more than " + std::to_string(kMaxLayoutCharacters) + " characters";

}  // namespace

// As Megatron-Core's parse_str_to_list: commas dropped, then groups
// "(...)*n" unrolled, then single characters "x*n", then split at '|'.
// Groups do not nest there, so they do not here.
PipelineLayout parse_pipeline_layout(const std::string& text) {
  PipelineLayout layout;
  const auto fail = [&](std::string problem) {
    layout.problem = std::move(problem);
    return layout;
  };
  std::string plain;
  for (char c : text) {
    if (c != ',') plain += c;
  }
  std::string groups;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    if (plain[i] == ')') return fail("\")\" without a \"(\" before it");
    if (plain[i] != '(') {
      groups += plain[i];
      continue;
    }
    const std::size_t close = plain.find_first_of("()", i + 1);
    if (close == std::string::npos) return fail("\"(\" without a \")\" after it");
    if (plain[close] == '(') return fail("groups do not nest (Megatron-Core unrolls one level of \"(...)*n\")");
    const std::string group = plain.substr(i + 1, close - i - 1);
    const RepeatCount count = repeat_count(plain, close + 1);
    if (group.empty() || count.end == close + 1 || count.malformed) {
      return fail("the group \"(" + group + ")\" must hold something and be followed by *n, a number of copies");
    }
    if (!append_repeated(groups, group, count.times)) return fail(kTooLong);
    i = count.end - 1;
  }
  std::string unrolled;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (groups[i] == '*') return fail("\"*\" must follow a layer or a group, and a number follow it");
    const RepeatCount count = repeat_count(groups, i + 1);
    if (count.malformed) return fail("\"*\" after \"" + std::string(1, groups[i]) + "\" must be followed by a number");
    if (!append_repeated(unrolled, std::string(1, groups[i]), count.times)) return fail(kTooLong);
    i = count.end - 1;
  }
  layout.stages.emplace_back();
  for (char c : unrolled) {
    if (c == '|') {
      layout.stages.emplace_back();
    } else if (c == 'E' || c == 't' || c == 'L' || c == 'm') {
      layout.stages.back() += c;
    } else {
      return fail("\"" + std::string(1, c) + "\" is not a layer: E (the embedding), t (a transformer layer), L (the "
                  "output layer and loss), m (a multi-token-prediction layer), | between virtual stages");
    }
  }
  return layout;
}

PipelineLayoutStages layout_over_pipeline(const std::string& text, int pipeline) {
  PipelineLayoutStages layout{parse_pipeline_layout(text)};
  const int stages = static_cast<int>(layout.stages.size());
  if (pipeline < 2) {
    layout.problem = "places layers on pipeline stages: needs a pipeline of at least 2 stages";
  } else if (layout.ok() && stages % pipeline != 0) {
    layout.problem = "lists " + std::to_string(stages) + " virtual stages, not a multiple of the " +
                     std::to_string(pipeline) + " pipeline stages";
  }
  if (layout.ok()) layout.virtual_stages = stages / pipeline;
  return layout;
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

// A layout: each virtual stage's transformer layers as it lists them.
PipelineSplit layout_split(const ModelParallelism& mp, int layers, int mtp_layers, const std::string& model_name) {
  const PipelineLayout layout = parse_pipeline_layout(*mp.layout);
  if (!layout.ok()) return refuse("layout", layout.problem);
  const std::size_t chunks = static_cast<std::size_t>(mp.pipeline * mp.virtual_stages);
  if (layout.stages.size() != chunks) {
    return refuse("layout", "lists " + count(static_cast<int>(layout.stages.size()), "virtual stage") +
                                ", but pipeline x virtual_stages = " + std::to_string(chunks));
  }
  const auto total = [&](char kind) {
    std::size_t n = 0;
    for (const std::string& stage : layout.stages) {
      n += static_cast<std::size_t>(std::count(stage.begin(), stage.end(), kind));
    }
    return n;
  };
  if (total('E') != 1 || layout.stages.front().empty() || layout.stages.front().front() != 'E') {
    return refuse("layout", "must name the embedding (E) once, first on virtual stage 0");
  }
  if (total('L') != 1 || layout.stages.back().empty() || layout.stages.back().back() != 'L') {
    return refuse("layout", "must name the output layer and loss (L) once, last on the last virtual stage");
  }
  if (const std::size_t mtp = total('m'); mtp != static_cast<std::size_t>(mtp_layers)) {
    return refuse("layout", "places " + count(static_cast<int>(mtp), "multi-token-prediction layer") + " (m), but " +
                                model_name + " trains " + std::to_string(mtp_layers) + " (mtp_layers)");
  }
  // Megatron-Core builds the MTP layers on a last virtual stage; on another
  // pipeline stage than the loss's they would send their hidden states on
  // beside the model's, which is not modelled.
  if (static_cast<std::size_t>(std::count(layout.stages.back().begin(), layout.stages.back().end(), 'm')) !=
      static_cast<std::size_t>(mtp_layers)) {
    return refuse("layout", "must place the multi-token-prediction layers (m) on the last virtual stage, with the "
                            "output layer and loss (L)");
  }
  if (const std::size_t placed = total('t'); placed != static_cast<std::size_t>(layers)) {
    return refuse("layout", "places " + count(static_cast<int>(placed), "transformer layer") + " (t), but " +
                                model_name + " has " + std::to_string(layers));
  }
  PipelineSplit split;
  for (const std::string& stage : layout.stages) {
    split.layers.push_back(static_cast<int>(std::count(stage.begin(), stage.end(), 't')));
  }
  return split;
}

}  // namespace

PipelineSplit split_pipeline(const ModelParallelism& mp, int layers, const std::string& model_name, int mtp_layers) {
  if (uneven_pipeline(mp) && mp.pipeline < 2) {
    return refuse(mp.layout ? "layout" : "", "uneven pipeline stages (first_stage_layers, last_stage_layers, "
                                             "account_for_embedding, account_for_loss, layout) need at least 2 "
                                             "pipeline stages");
  }
  const bool counts = mp.first_stage_layers || mp.last_stage_layers;
  if (mp.layout) {
    if (counts || mp.account_for_embedding || mp.account_for_loss) {
      return refuse("layout", "places every layer itself: it does not combine with first_stage_layers, "
                              "last_stage_layers, account_for_embedding or account_for_loss");
    }
    // Megatron-Core builds a virtual stage with nothing in it as one that
    // passes its input on.
    return layout_split(mp, layers, mtp_layers, model_name);
  }
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
                                      const std::string& plan_file, int mtp_layers) {
  PipelineSplit split = split_pipeline(mp, layers, model_name, mtp_layers);
  if (!split.ok()) {
    throw_input_error(plan_file, "model_parallel" + (split.option.empty() ? "" : "." + split.option), split.problem);
  }
  return std::move(split.layers);
}

}  // namespace shardsim::workloads
