// pipeline_split: how many transformer layers each virtual stage of a
// pipeline holds, as Megatron-Core builds them (get_num_layers_to_build and
// get_transformer_layer_offset).
//
// p stages of v chunks make p v virtual stages; chunk c of stage s is virtual
// stage c p + s, and the layers fill the virtual stages in that order, the
// embedding with virtual stage 0 and the output layer and loss with the last.
// By default each holds L / (p v) layers. Megatron-LM's options make the
// split uneven, to unload the stages that also run the embedding (and hold
// the most warm-up activations) and the output layer and loss:
//   first_stage_layers, last_stage_layers (--decoder-first/last-pipeline-num-layers):
//     the first / last stage holds that many layers, split evenly over its v
//     chunks; the stages without a count share the other layers evenly.
//   account_for_embedding, account_for_loss (--account-for-embedding/loss-in-pipeline-split):
//     the embedding / the output layer and loss take one layer's place in an
//     even split of L + 1 (or L + 2) slots, so virtual stage 0 / the last
//     one holds a layer fewer. Llama 3 405B (arXiv:2407.21783, section
//     3.3.2): 126 layers, p = 16, v = 8, one layer per virtual stage, "the
//     first model chunk on the first stage has only the embedding, and the
//     last model chunk on the last stage has only output projection and loss
//     calculation".
//   layout (--pipeline-model-parallel-layout, Megatron-Core's
//     PipelineParallelLayerLayout): every virtual stage's contents by hand,
//     the virtual stages in order, separated by '|': E the embedding, t a
//     transformer layer, L the output layer and loss, m a multi-token-
//     prediction layer (on the last virtual stage, one per MTP depth); "x*n" repeats x, "(...)*n" a group, commas are
//     cosmetic. A virtual stage may be empty (it passes its input on).
//     DeepSeek-V3 on 16 x 2 virtual stages, Megatron-Core's documented
//     example: "Et*3|(tt|)*29,m|L".
// The first kind and the second do not combine (Megatron-Core asserts it),
// nor either with a layout.
#pragma once

#include "workloads/inputs/plan.h"

#include <string>
#include <vector>

namespace shardsim::workloads {

// The split, or why there is none: counts that do not divide, an uneven
// option without a pipeline, or a virtual stage left with nothing to run (no
// layer, embedding or output). `option` names the model_parallel field at
// fault ("first_stage_layers", "last_stage_layers", "account_for_embedding",
// "account_for_loss", "layout"; empty for the pipeline as a whole).
struct PipelineSplit {
  std::vector<int> layers;  // per virtual stage, in virtual-stage order
  std::string option, problem;

  bool ok() const { return problem.empty(); }
};

// `mtp_layers`: the model's MTP depths, which go on the last virtual stage
// beside the output layer (a layout must place them there, as m).
PipelineSplit split_pipeline(const ModelParallelism& parallel, int layers, const std::string& model_name,
                             int mtp_layers = 0);

// Layers per virtual stage; throws InputError naming `plan_file` and
// model_parallel.<option> when there is no split.
std::vector<int> virtual_stage_layers(const ModelParallelism& parallel, int layers, const std::string& model_name,
                                      const std::string& plan_file, int mtp_layers = 0);

// True when `parallel` asks for anything but the even split.
bool uneven_pipeline(const ModelParallelism& parallel);

// A layout unrolled: one string of E, t, L, m per virtual stage, or why it
// does not read (problem names what is wrong).
struct PipelineLayout {
  std::vector<std::string> stages;
  std::string problem;

  bool ok() const { return problem.empty(); }
};

PipelineLayout parse_pipeline_layout(const std::string& text);

// The layout read for `pipeline` stages: its virtual stages per pipeline
// stage (virtual_stages), or a problem when it does not read, there is no
// pipeline, or its virtual stages are not a multiple of `pipeline`.
struct PipelineLayoutStages : PipelineLayout {
  int virtual_stages = 0;
};

PipelineLayoutStages layout_over_pipeline(const std::string& text, int pipeline);

}  // namespace shardsim::workloads
