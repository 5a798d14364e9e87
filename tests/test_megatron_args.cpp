#include "topology/base/json_input.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/pipeline_split.h"

#include <catch2/catch.hpp>

using namespace shardsim;
using namespace shardsim::workloads;

namespace {

const TrainingConfig& base_training() {
  static const TrainingConfig training = load_training_config("seq4096-mbs1-4m-tokens");
  return training;
}

MegatronJob import(const std::string& text, const std::string& model = "llama-7b", int gpus = 16) {
  return parse_megatron_args(text, "args.sh", load_model(model), base_training(), gpus, 8);
}

std::string refusal(const std::string& text, const std::string& model = "llama-7b", int gpus = 16) {
  try {
    import(text, model, gpus);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

std::string example(const std::string& name) {
  return std::string(SHARDSIM_SOURCE_DIR) + "/workloads/megatron/" + name;
}

// The flags that describe llama-7b to Megatron in full.
const std::string kLlama7b =
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 --num-attention-heads 32 --swiglu "
    "--normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
    "--untie-embeddings-and-output-weights ";

}  // namespace

TEST_CASE("flags are read through a launch script's continuations, comments, strings and arrays",
          "[megatron-args]") {
  const MegatronFlags flags = read_megatron_flags(
      "#!/bin/bash\n"
      "# --tensor-model-parallel-size 99 is commented out\n"
      "MODEL_ARGS=(\n"
      "    --num-layers 96 # trailing comment --hidden-size 1\n"
      "    --hidden-size=12288\n"
      ")\n"
      "PARALLEL=\"--tensor-model-parallel-size 8 \\\n"
      "  --pipeline-model-parallel-size 16\"\n"
      "torchrun --nproc_per_node 8 pretrain_gpt.py ${MODEL_ARGS[@]} $PARALLEL \\\n"
      "    --sequence-parallel --micro-batch-size 1 \\\n"
      "    --bf16 pretrain_extra.py --micro-batch-size 2 --global-batch-size \\\n"
      "    64\n");
  REQUIRE(flags.at("num_layers").value == "96");
  REQUIRE(flags.at("num_layers").line == 4);
  REQUIRE(flags.at("hidden_size").value == "12288");
  REQUIRE(flags.at("tensor_model_parallel_size").value == "8");
  REQUIRE(flags.at("tensor_model_parallel_size").line == 7);
  REQUIRE(flags.at("pipeline_model_parallel_size").value == "16");
  REQUIRE(flags.at("pipeline_model_parallel_size").line == 8);
  REQUIRE_FALSE(flags.at("sequence_parallel").value);
  // A switch does not swallow the word after it; argparse keeps the last value.
  REQUIRE_FALSE(flags.at("bf16").value);
  REQUIRE(flags.at("micro_batch_size").value == "2");
  REQUIRE(flags.at("micro_batch_size").line == 11);
  // A flag's line is its own, not its value's.
  REQUIRE(flags.at("global_batch_size").value == "64");
  REQUIRE(flags.at("global_batch_size").line == 11);
  REQUIRE(flags.count("nproc_per_node") == 1);
}

TEST_CASE("a flag's $NAME is what the script assigns NAME, where that is a plain value", "[megatron-args]") {
  // As NVIDIA's examples/llama/train_llama3_8b_h100_fp8.sh writes its launch.
  const MegatronFlags flags = read_megatron_flags(
      "NUM_LAYERS=32  \n"
      "export SEQ_LENGTH=\"8192\" # the context\n"
      "TP_SIZE=${TP_SIZE:-2}\n"
      "WORLD_SIZE=$(($GPUS_PER_NODE*$NUM_NODES))\n"
      "PP=4\nPP=8\n"
      "ARGS=(\n  --num-layers $NUM_LAYERS\n  --seq-length \"${SEQ_LENGTH}\"\n"
      "  --tensor-model-parallel-size $TP_SIZE\n  --world $WORLD_SIZE\n  --pipeline-model-parallel-size $PP\n"
      "  --grad-reduce-in-bf16\n  --fp8-param-gather\n  --micro-batch-size $UNSET\n)\n");
  REQUIRE(flags.at("num_layers").value == "32");
  REQUIRE(flags.at("seq_length").value == "8192");
  REQUIRE(flags.at("tensor_model_parallel_size").value == "2");
  // Arithmetic, a name assigned twice and a name never assigned stay as written.
  REQUIRE(flags.at("world").value == "$WORLD_SIZE");
  REQUIRE(flags.at("pipeline_model_parallel_size").value == "$PP");
  REQUIRE(flags.at("micro_batch_size").value == "$UNSET");
  // Switches: the next flag is not taken as their value.
  REQUIRE_FALSE(flags.at("grad_reduce_in_bf16").value);
  REQUIRE_FALSE(flags.at("fp8_param_gather").value);
}

TEST_CASE("Megatron's gradients under --grad-reduce-in-bf16 take half the fp32 buffer", "[megatron-args]") {
  const std::string launch = kLlama7b + "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --bf16 "
                                        "--use-distributed-optimizer --micro-batch-size 1 --global-batch-size 64";
  const auto gradients = [](const MegatronJob& job) {
    StepConfig config;
    config.model = load_model("llama-7b");
    config.training = job.training;
    config.plan = job.plan;
    config.data_parallel = job.data_parallel;
    config.gpus_per_node = 8;
    return estimate_step_memory(config).memory.gradients;
  };
  const MegatronJob fp32 = import(launch), bf16 = import(launch + " --grad-reduce-in-bf16");
  REQUIRE_FALSE(fp32.plan.reduce_dtype);
  REQUIRE(bf16.plan.reduce_dtype == GradientReduceDtype::training);
  REQUIRE(gradients(bf16) == Approx(gradients(fp32) / 2));
  REQUIRE(gradients(fp32) > 0);
}

TEST_CASE("GPT-3 175B's launch becomes Megatron's interleaved 3D plan", "[megatron-args]") {
  const MegatronJob job =
      load_megatron_args(example("gpt3-175b-1024gpu.sh"), load_model("gpt3-175b"), base_training(), 1024, 8);
  const Plan& plan = job.plan;
  REQUIRE(plan.system == ShardingSystem::megatron);
  REQUIRE(plan.name == "megatron-t8-p16-v2");
  REQUIRE(plan.model_parallel.tensor == 8);
  REQUIRE(plan.model_parallel.pipeline == 16);
  REQUIRE(plan.model_parallel.virtual_stages == 2);  // 96 layers / (16 stages x 3 layers)
  REQUIRE(plan.model_parallel.sequence_parallel);
  REQUIRE(job.data_parallel == 8);  // 1024 / (8 x 16)
  // The distributed optimizer shards only the optimizer states over the data-parallel group.
  REQUIRE(plan.factors.parameters == 1);
  REQUIRE(plan.factors.gradients == 1);
  REQUIRE(plan.factors.optimizer == 0);
  REQUIRE(plan.overlap.optimizer_all_reduce);
  REQUIRE(plan.overlap.parameter_broadcast);
  // max(40M, 1M x 8) = 40M parameters a bucket: fp32 gradients, bf16 parameters.
  REQUIRE(plan.buckets.reduce_bytes == 4 * 40e6);
  REQUIRE(plan.buckets.all_gather_bytes == 2 * 40e6);
  REQUIRE(job.training.sequence_length == 2048);
  REQUIRE(job.training.micro_batch_size == 1);
  REQUIRE(job.training.global_batch_sequences == 1536);
  REQUIRE_FALSE(job.training.fp16);
  REQUIRE(job.training.recompute == Recompute::none);
  REQUIRE(job.notes.empty());
}

TEST_CASE("the micro-batch group of the interleaved schedule is read only with interleaving", "[megatron-args]") {
  const std::string group = "--microbatch-group-size-per-virtual-pipeline-stage 5 --global-batch-size 40 ";
  const MegatronJob interleaved = import(group + "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2");
  REQUIRE(interleaved.plan.model_parallel.microbatch_group() == 5);  // 5 micro-batches per step: one group
  REQUIRE(interleaved.plan.name == "megatron-t1-p2-v2-n5");
  // 1F1B has no groups: Megatron leaves the flag unused.
  const MegatronJob one_f_one_b = import(group + "--pipeline-model-parallel-size 2");
  REQUIRE_FALSE(one_f_one_b.plan.model_parallel.microbatch_group_size.has_value());
}

TEST_CASE("the flag --use-tp-pp-dp-mapping numbers the ranks tp-cp-pp-dp", "[megatron-args]") {
  REQUIRE(import("--pipeline-model-parallel-size 2").plan.model_parallel.rank_order == RankOrder::tp_cp_dp_pp);
  REQUIRE(import("--pipeline-model-parallel-size 2 --use-tp-pp-dp-mapping").plan.model_parallel.rank_order ==
          RankOrder::tp_cp_pp_dp);
}

TEST_CASE("pipeline tensors are scattered and gathered only when the launch asks for 2021-2022 Megatron-LM's way",
          "[megatron-args]") {
  const std::string tp_pp = "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 ";
  REQUIRE_FALSE(import(tp_pp).plan.model_parallel.scatter_gather_pipeline_tensors);
  REQUIRE(import(tp_pp + "--scatter-gather-tensors-in-pipeline").plan.model_parallel.scatter_gather_pipeline_tensors);
  REQUIRE_FALSE(import(tp_pp + "--no-scatter-gather-tensors-in-pipeline").plan.model_parallel.scatter_gather_pipeline_tensors);
  REQUIRE_THROWS_WITH(import(tp_pp + "--scatter-gather-tensors-in-pipeline --no-scatter-gather-tensors-in-pipeline"),
                      Catch::Contains("--no-scatter-gather-tensors-in-pipeline") && Catch::Contains("contradicts"));
}

TEST_CASE("the flags of a bundled plan give that plan", "[megatron-args]") {
  // megatron-tp4-pp4 was written from Megatron-LM's documentation; 64 GPUs
  // leave a data-parallel size of 4 and the 40M-parameter default bucket.
  const Plan preset = load_plan("megatron-tp4-pp4");
  const MegatronJob job = import(kLlama7b +
                                     "--tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 "
                                     "--sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
                                     "--overlap-param-gather --micro-batch-size 1 --bf16",
                                 "llama-7b", 64);
  const Plan& plan = job.plan;
  REQUIRE(plan.model_parallel.tensor == preset.model_parallel.tensor);
  REQUIRE(plan.model_parallel.pipeline == preset.model_parallel.pipeline);
  REQUIRE(plan.model_parallel.virtual_stages == preset.model_parallel.virtual_stages);
  REQUIRE(plan.model_parallel.sequence_parallel == preset.model_parallel.sequence_parallel);
  REQUIRE(plan.factors.parameters == preset.factors.parameters);
  REQUIRE(plan.factors.gradients == preset.factors.gradients);
  REQUIRE(plan.factors.optimizer == preset.factors.optimizer);
  REQUIRE(plan.buckets.reduce_bytes == preset.buckets.reduce_bytes);
  REQUIRE(plan.buckets.all_gather_bytes == preset.buckets.all_gather_bytes);
  REQUIRE(plan.overlap.optimizer_all_reduce == preset.overlap.optimizer_all_reduce);
  REQUIRE(plan.overlap.parameter_broadcast == preset.overlap.parameter_broadcast);
  REQUIRE(plan.as_implemented == preset.as_implemented);

  // And the step compiles to the same Program, apart from the names in its description.
  StepConfig imported{load_model("llama-7b"), job.training, plan, job.data_parallel, 8, "args.sh", "args.sh"};
  StepConfig bundled = imported;
  bundled.plan = preset;
  nlohmann::json a = program_to_json(compile(imported)), b = program_to_json(compile(bundled));
  REQUIRE(a["description"]["plan"] != b["description"]["plan"]);
  a.erase("description");
  b.erase("description");
  REQUIRE(a == b);
}

TEST_CASE("Megatron's defaults: plain DDP, no overlap, one bucket, buckets that grow with DP", "[megatron-args]") {
  const MegatronJob plain = import("--tensor-model-parallel-size 2 --micro-batch-size 2 --bf16");
  REQUIRE(plain.plan.factors.optimizer == 1);
  REQUIRE(plain.plan.model_parallel.pipeline == 1);
  REQUIRE_FALSE(plain.plan.model_parallel.sequence_parallel);
  REQUIRE_FALSE(plain.plan.overlap.optimizer_all_reduce);
  REQUIRE_FALSE(plain.plan.overlap.parameter_broadcast);
  REQUIRE(plain.data_parallel == 8);
  // Without --overlap-grad-reduce Megatron-Core makes one bucket of everything.
  const double parameters = static_cast<double>(count_parameters(load_model("llama-7b")).total());
  REQUIRE(plain.plan.buckets.reduce_bytes == 4 * parameters);
  // What the flags leave out keeps the training config's values.
  REQUIRE(plain.training.sequence_length == base_training().sequence_length);
  REQUIRE(plain.training.global_batch_sequences == base_training().global_batch_sequences);
  REQUIRE(plain.training.micro_batch_size == 2);

  // 1024 GPUs at TP 4: DP 256, so 256M parameters a bucket.
  const MegatronJob wide = import("--tensor-model-parallel-size 4 --overlap-grad-reduce --fp16", "llama-7b", 1024);
  REQUIRE(wide.data_parallel == 256);
  REQUIRE(wide.plan.buckets.reduce_bytes == 2 * 256e6);  // fp16 gradients stay fp16
  REQUIRE(wide.training.fp16);
  REQUIRE(import("--overlap-grad-reduce --ddp-bucket-size 1000000 --bf16").plan.buckets.reduce_bytes == 4e6);
  // Gradient-accumulation fusion is on unless switched off.
  REQUIRE(plain.plan.model_parallel.gradient_accumulation_fusion);
  REQUIRE_FALSE(import("--bf16 --no-gradient-accumulation-fusion").plan.model_parallel.gradient_accumulation_fusion);
}

TEST_CASE("recompute flags map to shardsim's recompute levels", "[megatron-args]") {
  const std::string pp2 = "--pipeline-model-parallel-size 2 --bf16 ";  // 16 layers a stage
  REQUIRE(import(pp2).training.recompute == Recompute::none);
  REQUIRE(import(pp2 + "--recompute-activations").training.recompute == Recompute::selective);
  REQUIRE(import(pp2 + "--recompute-granularity selective").training.recompute == Recompute::selective);
  REQUIRE(import(pp2 + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
              .training.recompute == Recompute::full);
  REQUIRE(import(pp2 + "--recompute-granularity full --recompute-method block --recompute-num-layers 16")
              .training.recompute == Recompute::full);
  const MegatronJob grouped = import(pp2 + "--recompute-granularity full --recompute-method uniform --recompute-num-layers 4");
  REQUIRE(grouped.training.recompute == Recompute::full);
  REQUIRE(grouped.notes.size() == 1);
  REQUIRE_THAT(grouped.notes[0], Catch::Contains("groups of 4 layers"));
  REQUIRE_THAT(refusal(pp2 + "--recompute-granularity full --recompute-method block --recompute-num-layers 8"),
               Catch::Contains("args.sh: --recompute-num-layers (line 1): block recompute of 8 of each virtual stage's 16"));
  REQUIRE_THAT(refusal(pp2 + "--recompute-granularity full"),
               Catch::Contains("--recompute-granularity (line 1): full needs --recompute-method"));
}

TEST_CASE("what the simulation does differently is said in notes", "[megatron-args]") {
  const MegatronJob tp1 = import("--tensor-model-parallel-size 1 --sequence-parallel --micro-batch-size 1");
  REQUIRE_FALSE(tp1.plan.model_parallel.sequence_parallel);
  REQUIRE(tp1.notes.size() == 2);
  REQUIRE_THAT(tp1.notes[0], Catch::Contains("--sequence-parallel has no effect"));
  REQUIRE_THAT(tp1.notes[1], Catch::Contains("neither --bf16 nor --fp16"));
  const MegatronJob overlap =
      import("--tensor-model-parallel-size 8 --sequence-parallel --tp-comm-overlap --bf16", "llama-7b", 8);
  REQUIRE(overlap.notes.empty());
  REQUIRE(overlap.plan.model_parallel.tp_comm_overlap);
  REQUIRE_FALSE(import("--tensor-model-parallel-size 8 --sequence-parallel --bf16", "llama-7b", 8)
                    .plan.model_parallel.tp_comm_overlap);
}

TEST_CASE("the model the flags describe must be the model simulated", "[megatron-args]") {
  REQUIRE(refusal(kLlama7b + "--bf16") == "accepted");
  REQUIRE_THAT(refusal("--num-layers 40"),
               Catch::Contains("args.sh: --num-layers (line 1): 40, but model llama-7b has layers 32"));
  REQUIRE_THAT(refusal("--bf16\n--group-query-attention --num-query-groups 8"),
               Catch::Contains("--num-query-groups (line 2): 8, but model llama-7b has kv_heads 32"));
  // A whole description brings Megatron's defaults: tied, GeLU, 4h...
  std::string untied_dropped = kLlama7b;
  untied_dropped.erase(untied_dropped.find("--untie-embeddings-and-output-weights"));
  REQUIRE_THAT(refusal(untied_dropped + " --bf16"),
               Catch::Contains("--untie-embeddings-and-output-weights: Megatron builds an LM head tied to the embedding"));
  std::string ffn_dropped = kLlama7b;
  ffn_dropped.erase(ffn_dropped.find("--ffn-hidden-size 11008"), std::string("--ffn-hidden-size 11008").size());
  // SwiGLU's default width is int(8 x 4096 / 3 / 64) x 64 = 10880.
  REQUIRE_THAT(refusal(ffn_dropped), Catch::Contains("an MLP of width 10880"));
  REQUIRE_THAT(refusal("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 11008"),
               Catch::Contains("--swiglu: Megatron builds a GeLU MLP"));
  // ... which GPT-3 175B's launch meets without naming them.
  REQUIRE(refusal("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --bf16", "gpt3-175b", 128) ==
          "accepted");
  REQUIRE_THAT(refusal("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --position-embedding-type rope",
                       "gpt3-175b", 128),
               Catch::Contains("--position-embedding-type (line 1): Megatron builds rope positions"));
}

TEST_CASE("a launch with multi-latent attention is checked against the MLA shape, kv_channels left aside",
          "[megatron-args][mla]") {
  // DeepSeek-V3 described in full, tensor parallelism 2 with sequence
  // parallelism, its experts over 8 GPUs.
  const std::string deepseek =
      "--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 --swiglu "
      "--normalization RMSNorm --position-embedding-type rope --disable-bias-linear "
      "--untie-embeddings-and-output-weights --num-experts 256 --moe-ffn-hidden-size 2048 --moe-router-topk 8 "
      "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 8 "
      "--expert-tensor-parallel-size 1 --kv-channels 128 ";
  const std::string latent = "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 "
                             "--qk-pos-emb-head-dim 64 --v-head-dim 128";
  const MegatronJob job = import(deepseek + latent, "deepseek-v3", 16);
  REQUIRE(job.plan.model_parallel.tensor == 2);
  REQUIRE(job.plan.model_parallel.sequence_parallel);
  REQUIRE(job.plan.experts.parallel == 8);
  REQUIRE(job.data_parallel == 8);

  REQUIRE_THAT(refusal(deepseek + "--bf16", "deepseek-v3"),
               Catch::Contains("--multi-latent-attention: Megatron builds standard attention (no "
                               "--multi-latent-attention) from these flags, but model deepseek-v3 has MLA layers"));
  REQUIRE_THAT(refusal(deepseek + latent + " --kv-lora-rank 256", "deepseek-v3"),
               Catch::Contains("--kv-lora-rank (line 1): 256, but model deepseek-v3 has mla.kv_lora_rank 512"));
  REQUIRE_THAT(refusal(deepseek + latent + " --qk-pos-emb-head-dim 32", "deepseek-v3"),
               Catch::Contains("--qk-pos-emb-head-dim (line 1): 32, but model deepseek-v3 has mla.qk_rope_head_dim 64"));
  REQUIRE_THAT(refusal("--multi-latent-attention"),
               Catch::Contains("--multi-latent-attention (line 1): is given, but model llama-7b has no MLA layers"));

  // The bundled launch: 8 stages of 2 chunks of 2 x 64 GPUs, 4 of the 61
  // layers on each virtual stage but the last, which holds one, the MTP
  // layer and the loss.
  const MegatronJob bundled =
      load_megatron_args(example("deepseek-v3-1024gpu.sh"), load_model("deepseek-v3"), base_training(), 1024, 8);
  REQUIRE(bundled.plan.name == "megatron-t2-p8-v2+ep64");
  REQUIRE(bundled.plan.model_parallel.virtual_stages == 2);
  std::vector<int> four_each(16, 4);
  four_each.back() = 1;
  REQUIRE(split_pipeline(bundled.plan.model_parallel, 61, "deepseek-v3", 1).layers == four_each);
  REQUIRE(bundled.mtp_layers == 1);
  REQUIRE(bundled.data_parallel == 64);
  REQUIRE(bundled.training.recompute == Recompute::full);
  REQUIRE(bundled.notes.empty());
}

TEST_CASE("launches shardsim cannot simulate are refused naming the file and the flag", "[megatron-args][input]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"zero_optimization\": {\"stage\": 3}}", "args.sh: (flags): no --flag found"},
      {"--tensor-model-parallel-size $TP", "--tensor-model-parallel-size (line 1): is the shell expression \"$TP\""},
      {"--tensor-model-parallel-size eight", "must be an integer, got \"eight\""},
      {"--tensor-model-parallel-size 0", "must be at least 1, got 0"},
      {"--micro-batch-size\n--bf16", "--micro-batch-size (line 1): needs a value"},
      {"--bf16=true --micro-batch-size 1", "--bf16 (line 1): is a switch and takes no value"},
      {"--tensor-model-parallel-size 16", "tensor-parallel groups stay inside a node: must divide its 8 GPUs, got 16"},
      {"--tensor-model-parallel-size 4 --pipeline-model-parallel-size 3",
       "--pipeline-model-parallel-size (line 1): tensor x pipeline x context = 12 does not divide the 16 GPUs"},
      {"--micro-batch-size 1 --context-parallel-size 3",
       "--context-parallel-size (line 1): tensor x pipeline x context = 3 does not divide the 16 GPUs"},
      {"--micro-batch-size 1 --expert-model-parallel-size 2",
       "--expert-model-parallel-size (line 1): model llama-7b has no MoE layers"},
      {"--micro-batch-size 1 --use-torch-fsdp2", "--use-torch-fsdp2 (line 1): Megatron's FSDP"},
      {"--micro-batch-size 1 --use-distributed-optimizer --overlap-param-gather",
       "--overlap-param-gather (line 1): needs --use-distributed-optimizer and --overlap-grad-reduce"},
      {"--tensor-model-parallel-size 2 --tp-comm-overlap", "--tp-comm-overlap (line 1): needs --sequence-parallel"},
      {"--micro-batch-size 1 --bf16 --fp16", "--fp16 (line 1): --bf16 and --fp16 are both given"},
      {"--micro-batch-size 3 --global-batch-size 100",
       "--global-batch-size (line 1): global batch 100 is not a multiple of micro-batch 3 x data-parallel size 16"},
      {"--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 5",
       "5 layers per virtual stage do not split 32 layers over 2 pipeline stages evenly"},
      {"--num-virtual-stages-per-pipeline-rank 2 --micro-batch-size 1",
       "the interleaved schedule needs at least 2 pipeline stages"},
      {"--attention-backend magic", "--attention-backend (line 1): must be one of auto, flash, fused, unfused, local"},
      // The sequence rules name the launch's flag: its own --seq-length, else
      // the parallel size that does not divide the training config's 4096.
      {"--tensor-model-parallel-size 4 --sequence-parallel --seq-length 4095",
       "args.sh: --seq-length (line 1): sequence_length (4095) must divide over the 4 sequence-parallel GPUs"},
      {"--micro-batch-size 1 --context-parallel-size 2 --seq-length 4094",
       "args.sh: --seq-length (line 1): sequence_length (4094) must divide over the 4 (twice the) context-parallel GPUs"},
      {"--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 16 "
       "--microbatch-group-size-per-virtual-pipeline-stage 3",
       "--microbatch-group-size-per-virtual-pipeline-stage (line 1): the micro-batch group must lie between the 2 "
       "pipeline stages and the 2 micro-batches per step, got 3"},
      {"--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 24",
       "--global-batch-size (line 1): the interleaved schedule takes the micro-batches in groups of the pipeline "
       "stages: 3 micro-batches in groups of 2 leave a last group of 1"},
      {"--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 --global-batch-size 80 "
       "--microbatch-group-size-per-virtual-pipeline-stage 3",
       "--microbatch-group-size-per-virtual-pipeline-stage (line 1): 10 micro-batches in groups of 3 leave a last group "
       "of 1, fewer than the 2 pipeline stages"},
  };
  for (const auto& [text, message] : cases) {
    INFO(text);
    REQUIRE_THAT(refusal(text), Catch::Contains(message));
  }
  REQUIRE_THROWS_WITH(load_megatron_args("missing.sh", load_model("llama-7b"), base_training(), 16, 8),
                      Catch::Contains("missing.sh: no such Megatron-LM launch file or preset"));
}

TEST_CASE("a Megatron-Core MoE launch becomes expert parallelism over a stage's data-parallel GPUs",
          "[megatron-args][moe]") {
  // Mixtral-8x7B on 256 GPUs, 4 stages of 64.
  const std::string launch = "--pipeline-model-parallel-size 4 --num-experts 8 --moe-router-topk 2 "
                             "--moe-ffn-hidden-size 14336 --expert-model-parallel-size 8 --use-distributed-optimizer ";
  const MegatronJob alltoall = import(launch + "--moe-token-dispatcher-type alltoall", "mixtral-8x7b", 256);
  REQUIRE(alltoall.plan.experts.parallel == 8);
  REQUIRE(alltoall.plan.experts.layout == topology::MoeLayout::expert_data);  // Megatron-Core's tp-cp-ep-dp-pp
  REQUIRE(alltoall.plan.experts.dispatcher == TokenDispatcher::all_to_all);
  REQUIRE(alltoall.plan.experts.capacity_factor == 1.0);
  REQUIRE(alltoall.data_parallel == 64);
  REQUIRE(alltoall.plan.name == "megatron-t1-p4+ep8");  // as the search names it
  // Megatron-Core's default dispatcher gathers the tokens.
  REQUIRE(import(launch, "mixtral-8x7b", 256).plan.experts.dispatcher == TokenDispatcher::all_gather);

  // A capacity factor matters at balanced routing when it drops tokens or pads the experts' inputs.
  REQUIRE(import(launch + "--moe-expert-capacity-factor 0.5", "mixtral-8x7b", 256).plan.experts.capacity_factor == 0.5);
  REQUIRE(import(launch + "--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity", "mixtral-8x7b", 256)
              .plan.experts.capacity_factor == 1.25);
  const MegatronJob unpadded = import(launch + "--moe-expert-capacity-factor 1.25", "mixtral-8x7b", 256);
  REQUIRE(unpadded.plan.experts.capacity_factor == 1.0);
  REQUIRE_THAT(unpadded.notes.at(0), Catch::Contains("--moe-expert-capacity-factor above 1 drops no tokens"));
  // Under tensor parallelism the experts split over a stage's tensor x data GPUs, each expert whole.
  const MegatronJob tensor = import("--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 4 "
                                    "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1",
                                    "mixtral-8x7b", 256);
  REQUIRE(tensor.plan.experts.parallel == 8);
  REQUIRE(tensor.data_parallel == 32);
  // The bundled launch says as much in full, Mixtral's shape included.
  const MegatronJob bundled =
      load_megatron_args(example("mixtral-8x7b-256gpu.sh"), load_model("mixtral-8x7b"), base_training(), 256, 8);
  REQUIRE(bundled.plan.name == "megatron-t2-p4+ep8");
  REQUIRE(bundled.plan.experts.dispatcher == TokenDispatcher::all_to_all);
  REQUIRE(bundled.training.global_batch_sequences == 1024);
  REQUIRE(bundled.notes.empty());

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--expert-model-parallel-size 3", "--expert-model-parallel-size (line 1): 3 does not divide model "
                                         "mixtral-8x7b's 8 experts"},
      {"--pipeline-model-parallel-size 4 --expert-model-parallel-size 8",
       "--expert-model-parallel-size (line 1): 8 does not divide the 4 GPUs of a pipeline stage"},
      {"--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2",
       "--tensor-model-parallel-size (line 1): MoE layers under tensor parallelism are modelled with their experts "
       "whole on each GPU; Megatron's expert tensor parallelism defaults to the tensor-parallel size (2): give "
       "--expert-tensor-parallel-size 1"},
      {"--tensor-model-parallel-size 2 --expert-model-parallel-size 2 --expert-tensor-parallel-size 1",
       "--tensor-model-parallel-size (line 1): MoE layers under tensor parallelism need --sequence-parallel"},
      {"--expert-model-parallel-size 2 --expert-tensor-parallel-size 2",
       "--expert-tensor-parallel-size (line 1): tensor parallelism inside the experts is not modelled"},
      {"--expert-model-parallel-size 2 --moe-token-dispatcher-type flex",
       "--moe-token-dispatcher-type (line 1): flex is not modelled"},
      {"--moe-router-topk 4", "--moe-router-topk (line 1): 4, but model mixtral-8x7b has experts_per_token 2"},
      {"--moe-ffn-hidden-size 4096", "--moe-ffn-hidden-size (line 1): 4096, but model mixtral-8x7b has "
                                     "expert_ffn_hidden 14336"},
      {"--moe-expert-capacity-factor -1", "--moe-expert-capacity-factor (line 1): must be a positive number"},
  };
  for (const auto& [text, message] : refused) {
    INFO(text);
    REQUIRE_THAT(refusal("--micro-batch-size 1 " + text, "mixtral-8x7b"), Catch::Contains(message));
  }
}

TEST_CASE("counts beyond an int are refused naming the flag, not divided by", "[megatron-args]") {
  // 2^31 and 2^32 once narrowed to int became INT_MIN and 0; a parallel size of 0 divided the GPU count.
  for (const char* size : {"2147483648", "4294967296"}) {
    INFO(size);
    REQUIRE_THROWS_WITH(import(std::string("--tensor-model-parallel-size ") + size),
                        Catch::Contains("--tensor-model-parallel-size") && Catch::Contains("must be at most 2147483647"));
    REQUIRE_THROWS_WITH(import(std::string("--pipeline-model-parallel-size ") + size),
                        Catch::Contains("--pipeline-model-parallel-size") && Catch::Contains("must be at most 2147483647"));
  }
}
