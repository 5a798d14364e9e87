// Multi-token prediction (DeepSeek-V3, arXiv:2412.19437 section 2.2, as
// Megatron-Core's MultiTokenPredictionLayer runs it): each depth's
// parameters, FLOPs, kernels, calls and activations counted by hand on a
// small model; its place on the pipeline's last virtual stage; and steps
// with it that run every op once, after its dependencies.
#include "pipeline_checks.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/model_flops.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/activation_memory.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

// small_pipeline_model's sizes: SwiGLU, RMSNorm, untied, 8 heads of 64.
constexpr double kHidden = 512, kFfn = 1408, kVocab = 1024;

ModelSpec with_mtp(ModelSpec model, int depths) {
  model.mtp_layers = depths;
  return model;
}

TrainingConfig short_sequences() {
  TrainingConfig training;
  training.sequence_length = 512;
  training.micro_batch_size = 1;
  training.global_batch_sequences = 8;
  return training;
}

// Each call of a list as "name op bytes".
std::vector<std::pair<std::string, double>> calls(const std::vector<KernelSpec>& list) {
  std::vector<std::pair<std::string, double>> found;
  for (const KernelSpec& spec : list) {
    if (spec.call) found.emplace_back(spec.name, spec.call->bytes);
  }
  return found;
}

double gemm_flops(const std::vector<KernelSpec>& list) {
  double flops = 0;
  for (const KernelSpec& spec : list) flops += spec.kernel == KernelClass::gemm ? spec.flops : 0.0;
  return flops;
}

}  // namespace

TEST_CASE("an MTP depth: projection, three norms and a layer of the last kind, embedding and head shared",
          "[mtp][model]") {
  const ModelSpec base = test::small_pipeline_model(4);
  const ModelSpec mtp = with_mtp(base, 2);
  const double h = kHidden;
  // enorm, hnorm, the depth's final norm; eh_proj 2h -> h; the layer's two
  // norms, its attention (q, k, v, o: 4 h^2 with 8 x 64 = h) and SwiGLU.
  const double depth = 3 * h + 2 * h * h + 2 * h + 4 * h * h + 3 * h * kFfn;
  REQUIRE(static_cast<double>(count_parameters(mtp).mtp) == 2 * depth);
  REQUIRE(static_cast<double>(count_parameters(mtp).total() - count_parameters(base).total()) == 2 * depth);

  const std::vector<ModuleParameters> modules = model_modules(mtp);
  double held = 0;
  std::vector<std::string> names;
  std::map<std::string, int> layer_of;
  for (const ModuleParameters& m : modules) {
    held += m.parameters;
    names.push_back(m.name);
    layer_of[m.name] = m.layer;
  }
  REQUIRE(held == static_cast<double>(count_parameters(mtp).total()));  // borrowed tensors counted once, by their owner
  const std::vector<std::string> tail(names.end() - 7, names.end());
  REQUIRE(tail == std::vector<std::string>{"mtp0.input", "mtp0.attention", "mtp0.mlp", "mtp1.input", "mtp1.attention",
                                           "mtp1.mlp", "head"});
  REQUIRE(layer_of.at("mtp0.attention") == 4);
  REQUIRE(layer_of.at("mtp1.input") == 5);
  REQUIRE(layer_of.at("head") == mtp.head_layer());
  REQUIRE(mtp.head_layer() == 6);
  const ModuleParameters& input = modules[modules.size() - 7];
  REQUIRE(input.parameter_tensors == std::vector<double>{h, h, 2 * h * h});
  REQUIRE(input.borrowed_tensors == std::vector<double>{kVocab * h});
  REQUIRE(modules.back().parameter_tensors == std::vector<double>{h, kVocab * h, h, h});

  // A MoE model's depth is a MoE layer, routed experts included; a model
  // whose layers are all dense keeps its depth dense.
  ModelSpec moe = with_mtp(test::small_moe_model(4), 1);
  moe.moe.first_dense_layers = 1;
  const double experts_per_layer = 8 * 3 * h * 704;
  REQUIRE(routed_expert_parameters(moe) == (3 + 1) * experts_per_layer);
  REQUIRE(model_modules(moe)[model_modules(moe).size() - 2].name == "mtp0.experts");
  moe.moe.first_dense_layers = 4;
  REQUIRE(routed_expert_parameters(moe) == 0);
  REQUIRE_FALSE(moe.moe_layer(moe.layers));
}

TEST_CASE("DeepSeek-V3 with its MTP module and its copies of embedding and head is the released 685 B",
          "[mtp][model][mla]") {
  // The DeepSeek-V3 repository's README: 685 B on Hugging Face, 671 B of the
  // main model and 14 B of the MTP module, whose checkpoint stores its own
  // embedding and output head (shared in training).
  const ModelSpec v3 = with_mtp(load_model("deepseek-v3"), 1);
  const double copies = 2.0 * 129280 * 7168;
  REQUIRE(static_cast<double>(count_parameters(v3).total()) + copies == Approx(685e9).epsilon(0.005));
  REQUIRE(static_cast<double>(count_parameters(v3).mtp) + copies == Approx(14e9).epsilon(0.05));
}

TEST_CASE("model FLOPs add a layer, the projection and norms, and an LM head per depth, as Megatron-LM counts",
          "[mtp][flops]") {
  const ModelSpec base = test::small_pipeline_model(4);
  const TrainingConfig training = short_sequences();
  const double h = kHidden, s = 512, tokens = 8 * 512;
  const double layer = 2 * (4 * h * h + 3 * h * kFfn) + 4 * s * h;
  const double depth = layer + 2 * (3 * h + 2 * h * h) + 2 * h * kVocab;
  REQUIRE(model_flops_per_step(with_mtp(base, 2), training) - model_flops_per_step(base, training) ==
          Approx(3 * tokens * 2 * depth).epsilon(1e-12));
}

TEST_CASE("an MTP depth's kernels and calls under tensor and sequence parallelism", "[mtp][kernels]") {
  const ModelSpec model = with_mtp(test::small_pipeline_model(2), 1);
  TrainingConfig training = short_sequences();
  ModelParallelism tp;
  tp.tensor = 2;
  tp.sequence_parallel = true;
  const std::vector<ModuleWork> modules = transformer_modules(model, training, tp);
  const double h = kHidden, T = 512, e = 2;

  const ModuleWork& input = test::named(modules, "mtp0.input");
  // eh_proj is column-parallel: h / 2 outputs from 2h inputs on every token.
  REQUIRE(gemm_flops(input.forward) == 2 * T * (h / 2) * (2 * h));
  REQUIRE(gemm_flops(input.backward) == 2 * gemm_flops(input.forward));
  // The looked-up embeddings reduce-scattered (vocabulary-parallel), eh_proj's
  // input gathered along the sequence, its output along the hidden size.
  using Calls = std::vector<std::pair<std::string, double>>;
  REQUIRE(calls(input.forward) == Calls{{"embedding.reduce_scatter", e * T * h},
                                        {"eh_proj.input.all_gather", e * T * 2 * h},
                                        {"eh_proj.output.all_gather", e * T * h}});
  REQUIRE(calls(input.backward) == Calls{{"eh_proj.gradient.all_gather", e * T * h},
                                         {"eh_proj.input.all_gather", e * T * 2 * h},
                                         {"eh_proj.dgrad.reduce_scatter", e * T * 2 * h},
                                         {"embedding.gradient.all_gather", e * T * h}});
  // eh_proj split, enorm and hnorm whole on each GPU (their gradients
  // all-reduced over the group as other norms').
  REQUIRE(input.parameters == h * h + 2 * h);
  REQUIRE(input.sequence_parallel_parameters == 2 * h);
  REQUIRE(input.borrowed_tensors == std::vector<double>{kVocab * h / 2});
  // Kept for backward: enorm's, hnorm's and eh_proj's inputs, half the
  // sequence each.
  REQUIRE(input.activation_bytes == T / 2 * 4 * e * h);

  // The head predicts twice through the shared LM head, with a loss each.
  const ModuleWork& head = modules.back();
  REQUIRE(gemm_flops(head.forward) == 2 * (2 * T * (kVocab / 2) * h));
  REQUIRE(calls(head.forward).size() == 2 + 2 * 3);  // two LM-head gathers, three loss all-reduces each
  // Each keeps its fp32 softmax; one loss at a time holds its bf16 logits
  // (forward) or their gradient's bf16 cast (backward) on top.
  REQUIRE(head.activation_bytes == Approx(2 * T * (2 * e * h / 2 + 4 * kVocab / 2)));
  REQUIRE(head.forward_working == std::vector<double>{T * e * kVocab / 2});
  REQUIRE(head.backward_working == std::vector<double>{T * e * kVocab / 2});
  REQUIRE(head.parameters == 2 * h + kVocab * h / 2);  // both final norms whole, the LM head split

  // Full recompute keeps the depth's two inputs and runs its projection
  // again with its layer, not the embedding lookup.
  training.recompute = Recompute::full;
  const std::vector<ModuleWork> recomputed = transformer_modules(model, training, tp);
  REQUIRE(test::named(recomputed, "mtp0.input").activation_bytes == T / 2 * e * h);
  REQUIRE(test::named(recomputed, "mtp0.attention").activation_bytes == T / 2 * e * h);
  const std::vector<KernelSpec>& again = test::named(recomputed, "mtp0.mlp").recompute;
  REQUIRE(again.front().name == "enorm");
  REQUIRE(gemm_flops(again) == gemm_flops(test::named(modules, "mtp0.input").forward) +
                                   gemm_flops(test::named(modules, "mtp0.attention").forward) +
                                   gemm_flops(test::named(modules, "mtp0.mlp").forward));
  REQUIRE(std::none_of(again.begin(), again.end(), [](const KernelSpec& k) { return k.name == "embedding"; }));

  // Activations of the whole model: the depth's layer and input, and a
  // second prediction in the head.
  training.recompute = Recompute::none;
  const ModelSpec plain = test::small_pipeline_model(2);
  const double added = activation_footprint(model, training, tp).total() - activation_footprint(plain, training, tp).total();
  REQUIRE(added == Approx(T * (layer_activation_bytes_per_token(plain, training, 1, tp) + 4 * e * h / 2 +
                               2 * e * h / 2 + 4 * kVocab / 2)));

  // eh_proj's outputs must split over the group.
  ModelSpec odd = model;
  odd.hidden = 516;  // heads keep their 8 x 64
  ModelParallelism eight = tp;
  eight.tensor = 8;
  REQUIRE_THROWS_WITH(transformer_modules(odd, training, eight),
                      Catch::Contains("hidden (the MTP projection's outputs) (516) must divide over the 8"));
}

TEST_CASE("a Megatron launch's --mtp-num-layers sets the depths simulated", "[mtp][megatron-args][input]") {
  const ModelSpec model = test::small_pipeline_model(4);
  const TrainingConfig training = short_sequences();
  const std::string launch = "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 8 --bf16 ";
  REQUIRE(parse_megatron_args(launch + "--mtp-num-layers 1", "args.sh", model, training, 16, 8).mtp_layers == 1);
  REQUIRE(parse_megatron_args(launch, "args.sh", model, training, 16, 8).mtp_layers == 0);
  // A layout must place them, on the last virtual stage.
  const std::string laid = launch + "--pipeline-model-parallel-layout \"Et*2|t*2mL\" ";
  REQUIRE(parse_megatron_args(laid + "--mtp-num-layers 1", "args.sh", model, training, 16, 8).mtp_layers == 1);
  REQUIRE_THROWS_WITH(parse_megatron_args(laid, "args.sh", model, training, 16, 8),
                      Catch::Contains("--pipeline-model-parallel-layout (line 1): places 1 multi-token-prediction "
                                      "layer (m), but small trains 0 (mtp_layers)"));
  REQUIRE_THROWS_WITH(parse_megatron_args(launch + "--mtp-num-layers 5", "args.sh", model, training, 16, 8),
                      Catch::Contains("--mtp-num-layers (line 1): must be at most the model's 4 layers"));
  // A model file's depths give way to the launch's, with a note.
  const MegatronJob without = parse_megatron_args(launch, "args.sh", with_mtp(model, 1), training, 16, 8);
  REQUIRE(without.mtp_layers == 0);
  REQUIRE(without.notes == std::vector<std::string>{
                               "args.sh: model small has 1 MTP layer; Megatron builds 0 (--mtp-num-layers), as simulated"});
}

TEST_CASE("Megatron pipeline steps with MTP run every op once, the last stage holds the depth and an embedding copy",
          "[mtp][megatron]") {
  StepConfig config = test::pipeline_step("megatron-dp", 4, 2, 4);
  config.model = with_mtp(config.model, 1);
  config.plan.model_parallel.pipeline = 2;
  config.plan.model_parallel.tensor = 2;
  config.plan.model_parallel.sequence_parallel = true;
  const ModelParallelPartition partition = partition_model(config);
  const auto& last = partition.chunks[1][0];
  REQUIRE(std::count_if(last.begin(), last.end(), [&](std::size_t m) {
            return partition.modules[m].name.starts_with("mtp0.");
          }) == 3);
  // The last stage looks the tokens up in its own copy of the embedding,
  // whose gradient it all-reduces with the first stage's.
  REQUIRE(partition.tied_embedding_parameters == kVocab * kHidden / 2);
  const Program program = compile(config);
  validate_program(program);
  REQUIRE(program.description.at("mtp_layers") == 1);
  std::size_t embedding_reductions = 0;
  for (int rank = 0; rank < program.ranks; ++rank) {
    for (const Op& op : program.program_of(rank).ops) embedding_reductions += op.name == "grad.tied_embedding.all_reduce";
  }
  REQUIRE(embedding_reductions == static_cast<std::size_t>(program.ranks));
  // Still one boundary crossed each way per micro-batch: MTP stays on the last stage.
  test::require_boundary_sends(program, config, 2.0 * 512 * 512 / 2);
  test::require_consistent_step(program, test::pipeline_world());
  // Full recompute runs the depth's projection again, its calls included.
  config.training.recompute = Recompute::full;
  const Program recomputed = compile(config);
  validate_program(recomputed);
  test::require_consistent_step(recomputed, test::pipeline_world());

  // MoE layers under Megatron-Core's combined 1F1B, the depth paired with
  // the others' layers.
  StepConfig moe = test::pipeline_step("megatron-dp", 4, 8, 4);
  moe.model = with_mtp(test::small_moe_model(4), 1);
  moe.plan.model_parallel.pipeline = 2;
  moe.plan.model_parallel.layout = "Et|t|t|tmL";
  moe.plan.model_parallel.virtual_stages = 2;
  test::require_consistent_combined_1f1b(moe);
}

TEST_CASE("a ZeRO-3 step with MTP gathers the borrowed embedding again and runs every op once",
          "[mtp][zero]") {
  StepConfig config = test::pipeline_step("zero3", 4, 16, 1);
  config.model = with_mtp(config.model, 1);
  config.training.recompute = Recompute::full;
  const Program program = compile(config);
  validate_program(program);
  test::require_consistent_step(program, test::pipeline_world());
}
