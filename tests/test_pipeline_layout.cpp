// Megatron-Core's --pipeline-model-parallel-layout against its own
// documented examples, unrolled by hand from parse_str_to_list's rules
// (commas dropped, "(...)*n" then "x*n" repeated, '|' between virtual
// stages); the split it gives against the split the other options give for
// the same placement; and a layout's empty virtual stage, which passes its
// input on, in a step that runs every op once.
#include "pipeline_checks.h"
#include "topology/base/presets.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/pipeline_split.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

std::vector<std::string> stages(const std::string& text) {
  const PipelineLayout layout = parse_pipeline_layout(text);
  INFO(layout.problem);
  REQUIRE(layout.ok());
  return layout.stages;
}

std::string problem(const std::string& text) { return parse_pipeline_layout(text).problem; }

ModelParallelism laid_out(int pipeline, const std::string& layout) {
  ModelParallelism mp;
  mp.pipeline = pipeline;
  mp.virtual_stages = pipeline < 2 ? 1 : layout_over_pipeline(layout, pipeline).virtual_stages;
  mp.layout = layout;
  return mp;
}

std::string refusal(const ModelParallelism& mp, int layers, int mtp_layers = 0) {
  try {
    virtual_stage_layers(mp, layers, "model", "plan.json", mtp_layers);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("a layout unrolls as Megatron-Core's notation says", "[pipeline-layout]") {
  // The documented DeepSeek-V3 example: [E t t t] + [t t] x 29 + [m] + [L].
  const std::vector<std::string> deepseek = stages("Et*3|(tt|)*29,m|L");
  REQUIRE(deepseek.size() == 32);
  REQUIRE(deepseek.front() == "Ettt");
  for (std::size_t vs = 1; vs <= 29; ++vs) REQUIRE(deepseek[vs] == "tt");
  REQUIRE(deepseek[30] == "m");
  REQUIRE(deepseek[31] == "L");
  // TransformerConfig's docstring example, and the cases parse_str_to_list's
  // comments give: a group may open or close with '|', making empty stages.
  REQUIRE(stages("E|(tt|)*2,(t|)*4,mL") == std::vector<std::string>{"E", "tt", "tt", "t", "t", "t", "t", "mL"});
  REQUIRE(stages("(|t)*2,tL") == std::vector<std::string>{"", "t", "ttL"});
  REQUIRE(stages("Et|t,(t|)*2") == std::vector<std::string>{"Et", "tt", "t", ""});
  REQUIRE(stages("E,t,t|t*0|tL") == std::vector<std::string>{"Ett", "", "tL"});
  REQUIRE(stages("Et*12|t*12L") == std::vector<std::string>{"E" + std::string(12, 't'), std::string(12, 't') + "L"});
}

TEST_CASE("a layout that does not read is refused naming what is wrong", "[pipeline-layout][input]") {
  REQUIRE_THAT(problem("Et|tX|L"), Catch::Contains("\"X\" is not a layer"));
  REQUIRE_THAT(problem("Et | tL"), Catch::Contains("\" \" is not a layer"));
  REQUIRE(problem("E(t|t") == "\"(\" without a \")\" after it");
  REQUIRE(problem("Et)|tL") == "\")\" without a \"(\" before it");
  REQUIRE_THAT(problem("E((t|)*2)*2L"), Catch::Contains("groups do not nest"));
  REQUIRE_THAT(problem("E(t|)L"), Catch::Contains("the group \"(t|)\" must hold something and be followed by *n"));
  REQUIRE_THAT(problem("E()*2L"), Catch::Contains("the group \"()\" must hold something"));
  REQUIRE(problem("Et*|L") == "\"*\" after \"t\" must be followed by a number");
  REQUIRE_THAT(problem("*2Et|L"), Catch::Contains("\"*\" must follow a layer or a group"));
  REQUIRE_THAT(problem("E(t)*99999999|L"), Catch::Contains("unrolls to more than 1048576 characters"));
  REQUIRE_THAT(problem("Et*99999999999999999999|L"), Catch::Contains("unrolls to more than"));
}

TEST_CASE("a layout's split: each virtual stage's transformer layers as it lists them", "[pipeline-layout]") {
  // Megatron-Bridge's DeepSeek-V3 layout for 8 stages of 2 chunks, without
  // the MTP layer: [E + 4t] + [4t] x 14 + [t + L]; per stage 8 layers, 5 on
  // the last (4 + 1).
  const std::vector<int> deepseek = virtual_stage_layers(laid_out(8, "Et*4|(t*4|)*14,tL"), 61, "model", "plan.json");
  std::vector<int> expected(16, 4);
  expected.back() = 1;
  REQUIRE(deepseek == expected);
  // The same placements as the other options give.
  ModelParallelism even;
  even.pipeline = 4;
  even.virtual_stages = 2;
  REQUIRE(virtual_stage_layers(laid_out(4, "Et*4|(t*4|)*6,t*4L"), 32, "model", "plan.json") ==
          virtual_stage_layers(even, 32, "model", "plan.json"));
  ModelParallelism counts;
  counts.pipeline = 8;
  counts.first_stage_layers = 5;
  counts.last_stage_layers = 8;
  REQUIRE(virtual_stage_layers(laid_out(8, "Et*5|(t*8|)*6,t*8L"), 61, "model", "plan.json") ==
          virtual_stage_layers(counts, 61, "model", "plan.json"));
  ModelParallelism slots = even;
  slots.account_for_embedding = slots.account_for_loss = true;
  REQUIRE(virtual_stage_layers(laid_out(4, "Et*4|(t*5|)*6,t*4L"), 38, "model", "plan.json") ==
          virtual_stage_layers(slots, 38, "model", "plan.json"));
  // An empty virtual stage is one Megatron-Core builds and runs.
  REQUIRE(virtual_stage_layers(laid_out(2, "Et|tt||tL"), 4, "model", "plan.json") == std::vector<int>{1, 2, 0, 1});
}

TEST_CASE("a layout that does not fit the model or the pipeline is refused naming model_parallel.layout",
          "[pipeline-layout][input]") {
  ModelParallelism short_by_one = laid_out(2, "Et*4|t*4L");
  short_by_one.virtual_stages = 2;
  REQUIRE(refusal(short_by_one, 8) ==
          "plan.json: model_parallel.layout: lists 2 virtual stages, but pipeline x virtual_stages = 4");
  REQUIRE(refusal(laid_out(2, "Et*4|t*3L"), 8) ==
          "plan.json: model_parallel.layout: places 7 transformer layers (t), but model has 8");
  REQUIRE(refusal(laid_out(2, "t*4|t*4L"), 8) ==
          "plan.json: model_parallel.layout: must name the embedding (E) once, first on virtual stage 0");
  REQUIRE(refusal(laid_out(2, "tEt*3|t*4L"), 8) ==
          "plan.json: model_parallel.layout: must name the embedding (E) once, first on virtual stage 0");
  REQUIRE(refusal(laid_out(2, "|Et*4|t*4|L"), 8) ==
          "plan.json: model_parallel.layout: must name the embedding (E) once, first on virtual stage 0");
  REQUIRE(refusal(laid_out(2, "Et*4|t*4Lt"), 8) == "plan.json: model_parallel.layout: must name the output layer and "
                                                   "loss (L) once, last on the last virtual stage");
  REQUIRE(refusal(laid_out(2, "Et*4L|t*4L"), 8) == "plan.json: model_parallel.layout: must name the output layer and "
                                                   "loss (L) once, last on the last virtual stage");
  REQUIRE(refusal(laid_out(2, "Et*4|t*4mL"), 8) ==
          "plan.json: model_parallel.layout: places 1 multi-token-prediction layer (m), but model trains 0 "
          "(mtp_layers)");
  ModelParallelism both = laid_out(2, "Et*4|t*4L");
  both.first_stage_layers = 4;
  REQUIRE_THAT(refusal(both, 8), Catch::Contains("model_parallel.layout: places every layer itself: it does not "
                                                 "combine with first_stage_layers"));
  ModelParallelism single = laid_out(1, "Et*8L");
  REQUIRE_THAT(refusal(single, 8), Catch::Contains("model_parallel.layout: uneven pipeline stages") &&
                                       Catch::Contains("need at least 2 pipeline stages"));
}

TEST_CASE("a layout places the MTP layers (m) on the last virtual stage, as many as the model trains",
          "[mtp][pipeline-layout][input]") {
  REQUIRE(virtual_stage_layers(laid_out(2, "Et*2|t*2mL"), 4, "model", "plan.json", 1) == std::vector<int>{2, 2});
  REQUIRE(refusal(laid_out(2, "Et*2|t*2L"), 4, 1) ==
          "plan.json: model_parallel.layout: places 0 multi-token-prediction layers (m), but model trains 1 "
          "(mtp_layers)");
  REQUIRE(refusal(laid_out(2, "Et*2m|t*2L"), 4, 1) ==
          "plan.json: model_parallel.layout: must place the multi-token-prediction layers (m) on the last virtual "
          "stage, with the output layer and loss (L)");
  REQUIRE(refusal(laid_out(2, "Et*2|t*2mmL"), 4, 1) ==
          "plan.json: model_parallel.layout: places 2 multi-token-prediction layers (m), but model trains 1 "
          "(mtp_layers)");
}

TEST_CASE("an empty virtual stage passes each micro-batch on, the step runs every op once",
          "[pipeline-layout][megatron]") {
  // 4 layers on 2 stages of 2 chunks, virtual stages E t | t t | (empty) | t L:
  // stage 0's second chunk holds nothing.
  StepConfig config = test::pipeline_step("megatron-dp", 4, 2, 4);
  config.plan.model_parallel = laid_out(2, "Et|tt||tL");
  config.plan.model_parallel.tensor = 2;
  const ModelParallelPartition partition = partition_model(config);
  REQUIRE(partition.virtual_stage_layers == std::vector<int>{1, 2, 0, 1});
  REQUIRE(partition.chunks[0][1].empty());

  const Program program = compile(config);
  validate_program(program);
  REQUIRE(program.description.at("pipeline_layout") == "Et|tt||tL");
  // Every one of the three chunk boundaries is still crossed both ways.
  test::require_boundary_sends(program, config, 2.0 * 512 * 512);
  test::require_consistent_step(program, test::pipeline_world());
  // The empty chunk's send of each micro-batch waits for that micro-batch's
  // receive, forward and back.
  const RankProgram& stage0 = program.program_of(0);
  std::map<std::string, std::uint32_t> index_of;
  for (std::uint32_t i = 0; i < stage0.ops.size(); ++i) index_of[std::string(stage0.ops[i].name)] = i;
  for (int mb = 0; mb < 4; ++mb) {
    for (const auto& [send, receive] : {std::pair{"send_activations", "receive_activations"},
                                        std::pair{"send_gradients", "receive_gradients"}}) {
      const std::string chunk = "mb" + std::to_string(mb) + ".chunk1.";
      INFO(chunk + send);
      REQUIRE(index_of.count(chunk + send) == 1);
      REQUIRE(index_of.count(chunk + receive) == 1);
      const auto& deps = stage0.ops[index_of.at(chunk + send)].deps;
      REQUIRE(std::find(deps.begin(), deps.end(), index_of.at(chunk + receive)) != deps.end());
    }
  }

  // The same with MoE layers under Megatron-Core's combined 1F1B, which
  // merges the empty chunk's passes with others.
  StepConfig moe = config;
  moe.model = test::small_moe_model(4);
  moe.plan.model_parallel.tensor = 1;
  moe.data_parallel = 8;
  moe.training.global_batch_sequences = 32;
  test::require_consistent_combined_1f1b(moe);
}

TEST_CASE("plans and Megatron launches carry a layout, which sets the virtual stages", "[pipeline-layout][input]") {
  nlohmann::json document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-tp4-pp4.json"));
  document["model_parallel"].erase("virtual_stages");
  document["model_parallel"]["layout"] = "Et*3|(t*4|)*6,t*5L";
  const Plan plan = parse_plan(document, "p.json");
  REQUIRE(plan.model_parallel.layout == "Et*3|(t*4|)*6,t*5L");
  REQUIRE(plan.model_parallel.virtual_stages == 2);
  const auto refused = [](const nlohmann::json& changed, const std::string& message) {
    REQUIRE_THROWS_WITH(parse_plan(changed, "p.json"), message);
  };
  nlohmann::json changed = document;
  changed["model_parallel"]["virtual_stages"] = 3;
  refused(changed, "p.json: model_parallel.virtual_stages: is 3, but the layout's 8 virtual stages over 4 pipeline "
                   "stages make 2");
  changed["model_parallel"]["virtual_stages"] = 2;
  REQUIRE(parse_plan(changed, "p.json").model_parallel.virtual_stages == 2);
  changed = document;
  changed["model_parallel"]["layout"] = "Et*3|(t*4|)*5,t*5L";
  refused(changed, "p.json: model_parallel.layout: lists 7 virtual stages, not a multiple of the 4 pipeline stages");
  changed["model_parallel"]["layout"] = "Et*3|t[4]L";
  refused(changed, "p.json: model_parallel.layout: \"[\" is not a layer: E (the embedding), t (a transformer layer), "
                   "L (the output layer and loss), m (a multi-token-prediction layer), | between virtual stages");
  changed["model_parallel"]["layout"] = "Et*16|t*16L";
  changed["model_parallel"]["pipeline"] = 1;
  refused(changed, "p.json: model_parallel.layout: places layers on pipeline stages: needs a pipeline of at least 2 "
                   "stages");
  changed["model_parallel"]["pipeline"] = 4;
  changed["model_parallel"]["layout"] = 7;
  REQUIRE_THROWS_WITH(parse_plan(changed, "p.json"), Catch::Contains("p.json: model_parallel.layout"));
  nlohmann::json zero = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/zero-pipeline-pp4.json"));
  zero["model_parallel"].erase("virtual_stages");
  zero["model_parallel"]["layout"] = "Et|(t|)*5,|tL";
  refused(zero, "p.json: model_parallel.layout: leaves virtual stage 6 empty, which ZeroPP's chunks cannot be (system "
                "\"zero_pipeline\")");

  const TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
  const ModelSpec model = load_model("llama-7b");
  const auto import = [&](const std::string& flags) { return parse_megatron_args(flags, "args.sh", model, training, 16, 8); };
  // Quoted, as a launch passes it: the group's brackets are the layout's.
  const MegatronJob job = import("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"E(t*7|)*3,t*11L\"");
  REQUIRE(job.plan.model_parallel.virtual_stages == 2);
  REQUIRE(virtual_stage_layers(job.plan.model_parallel, 32, "llama-7b", "args.sh") == std::vector<int>{7, 7, 7, 11});
  const auto import_refusal = [&](const std::string& flags) -> std::string {
    try {
      import(flags);
    } catch (const InputError& e) {
      return e.what();
    }
    return "accepted";
  };
  REQUIRE(import_refusal("--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                         "--pipeline-model-parallel-layout Et*15|t*17L") ==
          "args.sh: --num-virtual-stages-per-pipeline-rank (line 1): does not combine with "
          "--pipeline-model-parallel-layout, which sets the virtual stages (Megatron asserts it)");
  REQUIRE(import_refusal("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout Et*15|t*16L") ==
          "args.sh: --pipeline-model-parallel-layout (line 1): places 31 transformer layers (t), but llama-7b has 32");
  REQUIRE_THAT(import_refusal("--pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 15 "
                              "--pipeline-model-parallel-layout Et*15|t*17L"),
               Catch::Contains("--pipeline-model-parallel-layout (line 1): places every layer itself"));
  REQUIRE(import_refusal("--pipeline-model-parallel-layout Et*15|t*17L") ==
          "args.sh: --pipeline-model-parallel-layout (line 1): places layers on pipeline stages: needs a pipeline of "
          "at least 2 stages");
  REQUIRE(import_refusal("--pipeline-model-parallel-size 4 --pipeline-model-parallel-layout Et*15|t*17L") ==
          "args.sh: --pipeline-model-parallel-layout (line 1): lists 2 virtual stages, not a multiple of the 4 "
          "pipeline stages");
}
