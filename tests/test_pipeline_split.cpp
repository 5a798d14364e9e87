// Uneven pipeline stages against Megatron-Core's rules worked out by hand:
// --decoder-first/last-pipeline-num-layers give the first / last stage its
// count and share the rest evenly; --account-for-embedding/loss-in-pipeline-split
// count the embedding and the loss as one layer each of an even split (Llama
// 3 405B: 126 layers in 128 one-layer chunks, the first and last holding only
// the embedding and the output layer). Every layer lands in exactly one
// virtual stage, in order, and the step built on the split runs every op once.
#include "pipeline_checks.h"
#include "topology/base/presets.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/pipeline_split.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <numeric>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

ModelParallelism pipeline(int p, int v) {
  ModelParallelism mp;
  mp.pipeline = p;
  mp.virtual_stages = v;
  return mp;
}

std::vector<int> split(const ModelParallelism& mp, int layers) {
  return virtual_stage_layers(mp, layers, "model", "plan.json");
}

std::string refusal(const ModelParallelism& mp, int layers) {
  try {
    split(mp, layers);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST_CASE("even split: L / (p v) layers per virtual stage", "[pipeline-split]") {
  REQUIRE(split(pipeline(4, 2), 32) == std::vector<int>(8, 4));
  REQUIRE(split(pipeline(1, 1), 5) == std::vector<int>{5});
  REQUIRE_FALSE(uneven_pipeline(pipeline(4, 2)));
  REQUIRE(refusal(pipeline(3, 1), 32) == "plan.json: model_parallel: pipeline x virtual_stages = 3 must divide the 32 "
                                         "layers of model");
}

TEST_CASE("first and last stage counts: the other stages share the rest, each stage's layers split over its chunks",
          "[pipeline-split]") {
  ModelParallelism mp = pipeline(4, 1);
  mp.first_stage_layers = 6;
  mp.last_stage_layers = 6;
  REQUIRE(uneven_pipeline(mp));
  REQUIRE(split(mp, 32) == std::vector<int>{6, 10, 10, 6});
  // Two chunks per stage, in virtual-stage order c p + s: half of each stage's layers.
  mp.virtual_stages = 2;
  REQUIRE(split(mp, 32) == std::vector<int>{3, 5, 5, 3, 3, 5, 5, 3});
  // Only the first stage given: the last is one of the middle stages.
  ModelParallelism first = pipeline(4, 1);
  first.first_stage_layers = 5;
  REQUIRE(split(first, 32) == std::vector<int>{5, 9, 9, 9});
  ModelParallelism last = pipeline(4, 1);
  last.last_stage_layers = 2;
  REQUIRE(split(last, 32) == std::vector<int>{10, 10, 10, 2});
  // Two stages, both given: they must add up to the model.
  ModelParallelism two = pipeline(2, 1);
  two.first_stage_layers = 12;
  two.last_stage_layers = 20;
  REQUIRE(split(two, 32) == std::vector<int>{12, 20});
  // The first stage may hold the embedding alone.
  ModelParallelism empty_first = pipeline(4, 1);
  empty_first.first_stage_layers = 0;
  REQUIRE(split(empty_first, 33) == std::vector<int>{0, 11, 11, 11});
}

TEST_CASE("embedding and loss counted as layers: Llama 3 405B's 126 layers in 128 one-layer chunks",
          "[pipeline-split]") {
  ModelParallelism mp = pipeline(16, 8);
  mp.account_for_embedding = true;
  mp.account_for_loss = true;
  std::vector<int> expected(128, 1);
  expected.front() = expected.back() = 0;
  REQUIRE(split(mp, 126) == expected);
  // Per stage: 7 on the first and the last, 8 on the others (the paper's
  // "one Transformer layer fewer" on each end).
  const std::vector<int> layers = split(mp, 126);
  for (int s = 0; s < 16; ++s) {
    int sum = 0;
    for (int c = 0; c < 8; ++c) sum += layers[static_cast<std::size_t>(c * 16 + s)];
    REQUIRE(sum == (s == 0 || s == 15 ? 7 : 8));
  }
  ModelParallelism embedding = pipeline(4, 1);
  embedding.account_for_embedding = true;
  REQUIRE(split(embedding, 31) == std::vector<int>{7, 8, 8, 8});
  ModelParallelism loss = pipeline(4, 1);
  loss.account_for_loss = true;
  REQUIRE(split(loss, 31) == std::vector<int>{8, 8, 8, 7});
}

TEST_CASE("every layer lands in one virtual stage, whatever the valid split", "[pipeline-split]") {
  int checked = 0;
  for (int layers : {8, 30, 32, 61, 126}) {
    for (int p : {2, 3, 4, 8}) {
      for (int v : {1, 2}) {
        for (int first = -1; first <= 8; ++first) {
          for (int last = -1; last <= 8; ++last) {
            ModelParallelism mp = pipeline(p, v);
            if (first >= 0) mp.first_stage_layers = first;
            if (last >= 0) mp.last_stage_layers = last;
            const PipelineSplit result = split_pipeline(mp, layers, "model");
            if (!result.ok()) continue;
            ++checked;
            REQUIRE(result.layers.size() == static_cast<std::size_t>(p * v));
            REQUIRE(std::accumulate(result.layers.begin(), result.layers.end(), 0) == layers);
          }
        }
      }
    }
  }
  REQUIRE(checked > 100);
}

TEST_CASE("splits that do not work are refused naming the field", "[pipeline-split][input]") {
  ModelParallelism mp = pipeline(4, 1);
  mp.first_stage_layers = 5;
  mp.last_stage_layers = 6;
  REQUIRE(refusal(mp, 32) == "plan.json: model_parallel.first_stage_layers: leaves 21 of the 32 layers of model for 2 "
                             "stages of 1 chunk, which does not divide them evenly");
  mp.first_stage_layers = 20;
  mp.last_stage_layers = 20;
  REQUIRE_THAT(refusal(mp, 32), Catch::Contains("the first and last stages' 40 layers exceed the 32 layers"));
  ModelParallelism odd = pipeline(2, 2);
  odd.last_stage_layers = 3;
  REQUIRE_THAT(refusal(odd, 31), Catch::Contains("model_parallel.last_stage_layers: 3 layers do not split evenly over "
                                                 "the stage's 2 chunks"));
  ModelParallelism both = pipeline(4, 1);
  both.first_stage_layers = 8;
  both.account_for_loss = true;
  REQUIRE_THAT(refusal(both, 32), Catch::Contains("model_parallel.account_for_loss: does not combine"));
  ModelParallelism slots = pipeline(4, 1);
  slots.account_for_embedding = true;
  REQUIRE(refusal(slots, 32) == "plan.json: model_parallel.account_for_embedding: pipeline x virtual_stages = 4 must "
                                "divide the 32 layers of model with the embedding counted as layers (33)");
  ModelParallelism single = pipeline(1, 1);
  single.first_stage_layers = 4;
  REQUIRE_THAT(refusal(single, 8), Catch::Contains("model_parallel: uneven pipeline stages") &&
                                       Catch::Contains("need at least 2 pipeline stages"));
  // A middle virtual stage with nothing to run.
  ModelParallelism hollow = pipeline(2, 2);
  hollow.first_stage_layers = 0;
  REQUIRE_THAT(refusal(hollow, 8), Catch::Contains("virtual stage 2 of 4 would hold no layer"));
}

TEST_CASE("the step puts each layer on its virtual stage and runs every op once", "[pipeline-split][megatron]") {
  // 8 layers, 2 stages of 2 chunks, the first stage holding 2: chunks of
  // 1 / 3 / 1 / 3 layers in virtual-stage order.
  StepConfig config = test::pipeline_step("megatron-dp", 8, 2, 4);
  config.plan.model_parallel.tensor = 2;
  config.plan.model_parallel.pipeline = 2;
  config.plan.model_parallel.virtual_stages = 2;
  config.plan.model_parallel.first_stage_layers = 2;
  const ModelParallelPartition partition = partition_model(config);
  REQUIRE(partition.virtual_stage_layers == std::vector<int>{1, 3, 1, 3});
  const std::vector<std::vector<int>> expected_layers = {{0}, {1, 2, 3}, {4}, {5, 6, 7}};  // per virtual stage
  double parameters = 0;
  for (int s = 0; s < 2; ++s) {
    for (int c = 0; c < 2; ++c) {
      std::vector<int> layers;
      for (std::size_t m : partition.chunks[static_cast<std::size_t>(s)][static_cast<std::size_t>(c)]) {
        const int layer = partition.modules[m].layer;
        if (layer < 0) {
          REQUIRE((s == 0 && c == 0));  // the embedding with the first virtual stage
        } else if (layer >= 8) {
          REQUIRE((s == 1 && c == 1));  // the output layer with the last
        } else if (layers.empty() || layers.back() != layer) {
          layers.push_back(layer);
        }
      }
      REQUIRE(layers == expected_layers[static_cast<std::size_t>(c * 2 + s)]);
    }
    parameters += partition.stage_parameters[static_cast<std::size_t>(s)];
  }
  double total = 0;
  for (const ModuleWork& module : partition.modules) total += module.parameters;
  REQUIRE(parameters == Approx(total).epsilon(1e-12));

  const Program program = compile(config);
  validate_program(program);
  REQUIRE(program.description.at("virtual_stage_layers") == nlohmann::json({1, 3, 1, 3}));
  test::require_boundary_sends(program, config, 2.0 * 512 * 512);
  test::require_consistent_step(program, test::pipeline_world());

  // A first stage with no layer runs the embedding alone and still sends
  // every micro-batch on.
  StepConfig embedding_only = test::pipeline_step("megatron-dp", 4, 4, 4);
  embedding_only.plan.model_parallel.pipeline = 2;
  embedding_only.plan.model_parallel.first_stage_layers = 0;
  const ModelParallelPartition lopsided = partition_model(embedding_only);
  REQUIRE(lopsided.virtual_stage_layers == std::vector<int>{0, 4});
  REQUIRE_FALSE(lopsided.chunks[0][0].empty());
  for (std::size_t m : lopsided.chunks[0][0]) REQUIRE(lopsided.modules[m].layer < 0);
  REQUIRE(lopsided.chunks[1][0].size() + lopsided.chunks[0][0].size() == lopsided.modules.size());
  const Program hollow = compile(embedding_only);
  validate_program(hollow);
  test::require_boundary_sends(hollow, embedding_only, 2.0 * 512 * 512);
  test::require_consistent_step(hollow, test::pipeline_world());
}

TEST_CASE("plans carry the split options, ZeroPP's pipeline takes them too", "[pipeline-split][input]") {
  nlohmann::json document = nlohmann::json::parse(std::ifstream(data_directory() + "/workloads/plans/megatron-tp4-pp4.json"));
  document["model_parallel"]["first_stage_layers"] = 6;
  document["model_parallel"]["last_stage_layers"] = 0;
  document["model_parallel"]["account_for_loss"] = false;
  const Plan plan = parse_plan(document, "p.json");
  REQUIRE(plan.model_parallel.first_stage_layers == 6);
  REQUIRE(plan.model_parallel.last_stage_layers == 0);
  REQUIRE_FALSE(plan.model_parallel.account_for_loss);
  document["model_parallel"]["first_stage_layers"] = -1;
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"), Catch::Contains("p.json: model_parallel.first_stage_layers"));
  document["model_parallel"]["first_stage_layers"] = 6;
  document["model_parallel"]["account_for_embedding"] = "yes";
  REQUIRE_THROWS_WITH(parse_plan(document, "p.json"),
                      Catch::Contains("p.json: model_parallel.account_for_embedding: must be true or false"));

  // ZeroPP, 4 stages of 2 chunks, 14 layers with the embedding and the
  // loss in the split: 16 slots, 2 per chunk, 1 layer on the ends.
  StepConfig zero_pipeline = test::pipeline_step("zero-pipeline-pp4", 14, 2, 4);
  zero_pipeline.plan.factors = FactorSpec{2, 2, 2};
  zero_pipeline.plan.model_parallel.account_for_embedding = true;
  zero_pipeline.plan.model_parallel.account_for_loss = true;
  REQUIRE(partition_model(zero_pipeline).virtual_stage_layers == std::vector<int>{1, 2, 2, 2, 2, 2, 2, 1});
  const Program program = compile(zero_pipeline);
  validate_program(program);
  test::require_consistent_step(program, test::pipeline_world());
}

TEST_CASE("Megatron-LM's uneven-pipeline flags become the plan's split", "[pipeline-split][megatron-args]") {
  const TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
  const ModelSpec model = load_model("llama-7b");
  const auto import = [&](const std::string& flags) { return parse_megatron_args(flags, "args.sh", model, training, 16, 8); };
  const MegatronJob counts = import("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 "
                                    "--decoder-last-pipeline-num-layers 6");
  REQUIRE(virtual_stage_layers(counts.plan.model_parallel, 32, "llama-7b", "args.sh") == std::vector<int>{6, 10, 10, 6});
  const MegatronJob slots = import("--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split "
                                   "--account-for-loss-in-pipeline-split");
  REQUIRE(virtual_stage_layers(slots.plan.model_parallel, 32, "llama-7b", "args.sh") == std::vector<int>{16, 16});
  const auto refusal = [&](const std::string& flags) -> std::string {
    try {
      import(flags);
    } catch (const InputError& e) {
      return e.what();
    }
    return "accepted";
  };
  REQUIRE_THAT(refusal("--pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6"),
               Catch::Contains("--decoder-first-pipeline-num-layers (line 1): leaves 26 of the 32 layers of llama-7b "
                               "for 3 stages"));
  REQUIRE_THAT(refusal("--pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split"),
               Catch::Contains("--account-for-embedding-in-pipeline-split (line 1): pipeline x virtual_stages = 2 "
                               "must divide"));
  REQUIRE_THAT(refusal("--pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 40"),
               Catch::Contains("--decoder-last-pipeline-num-layers (line 1): must be at most the model's 32 layers"));
  REQUIRE_THAT(refusal("--decoder-first-pipeline-num-layers 4"),
               Catch::Contains("args.sh: --pipeline-model-parallel-size: uneven pipeline stages"));
}
