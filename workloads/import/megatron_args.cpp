#include "workloads/import/megatron_args.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/inputs/pipeline_split.h"
#include "workloads/kernels/transformer_kernels.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace shardsim::workloads {

namespace {

// The model the flags describe must be the one simulated.
void check_model(const FlagReader& flags, const ModelSpec& model) {
  const auto expect = [&](const std::string& field, std::int64_t megatron, std::int64_t ours, const std::string& what) {
    if (megatron != ours) {
      flags.fail(field, std::to_string(megatron) + ", but model " + model.name + " has " + what + " " +
                            std::to_string(ours) + " (pass the model these flags train with --model)");
    }
  };
  const auto given = [&](const std::string& field, std::int64_t ours, const std::string& what) {
    if (const auto value = flags.integer(field)) expect(field, *value, ours, what);
  };
  given("num_layers", model.layers, "layers");
  given("hidden_size", model.hidden, "hidden");
  given("num_attention_heads", model.heads, "heads");
  given("ffn_hidden_size", model.ffn_hidden, "ffn_hidden");
  // Multi-latent attention sets its own head sizes; kv_channels does not
  // shape it.
  const bool latent = flags.on("multi_latent_attention");
  if (latent && !model.has_mla) {
    flags.fail("multi_latent_attention", "is given, but model " + model.name + " has no MLA layers (pass the model "
                                         "these flags train with --model)");
  }
  if (model.has_mla) {
    given("q_lora_rank", model.mla.q_lora_rank, "mla.q_lora_rank");
    given("kv_lora_rank", model.mla.kv_lora_rank, "mla.kv_lora_rank");
    given("qk_head_dim", model.mla.qk_nope_head_dim, "mla.qk_nope_head_dim");
    given("qk_pos_emb_head_dim", model.mla.qk_rope_head_dim, "mla.qk_rope_head_dim");
    given("v_head_dim", model.mla.v_head_dim, "mla.v_head_dim");
  } else {
    given("kv_channels", model.head_dim, "head_dim");
  }
  if (flags.on("group_query_attention")) given("num_query_groups", model.kv_heads, "kv_heads");
  if (const auto experts = flags.integer("num_experts")) expect("num_experts", *experts, model.moe.experts, "experts");
  if (model.has_moe) {
    given("moe_router_topk", model.moe.experts_per_token, "experts_per_token");
    given("moe_ffn_hidden_size", model.moe.expert_ffn_hidden, "expert_ffn_hidden");
  }

  // Megatron requires these three; with them the file is a whole launch and
  // Megatron's defaults stand for what it leaves out.
  if (!flags.has("num_layers") || !flags.has("hidden_size") || !flags.has("num_attention_heads")) return;
  const auto mismatch = [&](const std::string& field, const std::string& megatron, const std::string& ours) {
    flags.fail(field, "Megatron builds " + megatron + " from these flags, but model " + model.name + " has " + ours +
                          " (pass the model these flags train with --model)");
  };
  const bool swiglu = flags.on("swiglu");
  if (swiglu != (model.mlp == MlpKind::swiglu)) {
    mismatch("swiglu", swiglu ? "a SwiGLU MLP" : "a GeLU MLP (no --swiglu)", model.mlp == MlpKind::swiglu ? "SwiGLU" : "GeLU");
  }
  if (!flags.has("ffn_hidden_size")) {
    const std::int64_t h = model.hidden;
    const std::int64_t ffn = swiglu ? static_cast<std::int64_t>(4.0 * static_cast<double>(h) * 2 / 3 / 64) * 64 : 4 * h;
    if (ffn != model.ffn_hidden) {
      mismatch("hidden_size", "an MLP of width " + std::to_string(ffn) + " (the default; no --ffn-hidden-size)",
               "ffn_hidden " + std::to_string(model.ffn_hidden));
    }
  }
  if (model.has_mla != latent) {
    mismatch("multi_latent_attention", "standard attention (no --multi-latent-attention)", "MLA layers");
  }
  if (!model.has_mla && !flags.has("kv_channels") && model.head_dim * model.heads != model.hidden) {
    mismatch("num_attention_heads", "heads of hidden_size / num_attention_heads", "head_dim " + std::to_string(model.head_dim));
  }
  if (!flags.on("group_query_attention") && model.kv_heads != model.heads) {
    mismatch("num_attention_heads", "multi-head attention (no --group-query-attention)",
             std::to_string(model.kv_heads) + " key/value heads");
  }
  const bool untied = flags.on("untie_embeddings_and_output_weights");
  if (untied == model.tied_embeddings) {
    mismatch("untie_embeddings_and_output_weights", untied ? "an untied LM head" : "an LM head tied to the embedding",
             model.tied_embeddings ? "tied embeddings" : "untied embeddings");
  }
  const std::string positions =
      flags.choice("position_embedding_type", {"learned_absolute", "rope", "mrope", "relative", "none"})
          .value_or("learned_absolute");
  if (positions == "relative" || positions == "none") flags.fail("position_embedding_type", positions + " positions are not modelled");
  if ((positions == "learned_absolute") != (model.positions == PositionKind::learned)) {
    mismatch("position_embedding_type", positions + " positions",
             model.positions == PositionKind::learned ? "learned positions" : "rotary positions");
  }
  const std::string norm = flags.choice("normalization", {"LayerNorm", "RMSNorm"}).value_or("LayerNorm");
  if ((norm == "RMSNorm") != (model.norm == NormKind::rmsnorm)) {
    mismatch("normalization", norm, model.norm == NormKind::rmsnorm ? "RMSNorm" : "LayerNorm");
  }
  const bool biases = !flags.on("disable_bias_linear");
  if (biases != model.linear_biases) {
    mismatch("disable_bias_linear", biases ? "linear biases (no --disable-bias-linear)" : "no linear biases",
             model.linear_biases ? "linear biases" : "none");
  }
}

// Megatron-Core's MoE flags: experts over --expert-model-parallel-size of a
// stage's GPUs (its order tp-cp-ep-dp-pp, shardsim's "E+D"), each expert
// whole (--expert-tensor-parallel-size 1); tokens dispatched as
// --moe-token-dispatcher-type says (allgather by default); a capacity factor
// that pads or drops only where Megatron's would at balanced routing.
template <typename Note>
ExpertParallelism read_expert_parallelism(const FlagReader& flags, const ModelSpec& model, const ModelParallelism& mp,
                                          int stage_gpus, const Note& note) {
  ExpertParallelism experts;
  flags.refuse_above_one("expert_tensor_parallel_size", "tensor parallelism inside the experts is not modelled");
  if (model.has_moe && mp.tensor > 1) {
    if (!flags.has("expert_tensor_parallel_size")) {
      flags.fail("tensor_model_parallel_size",
                 "MoE layers under tensor parallelism are modelled with their experts whole on each GPU; Megatron's "
                 "expert tensor parallelism defaults to the tensor-parallel size (" + std::to_string(mp.tensor) +
                     "): give --expert-tensor-parallel-size 1");
    }
    if (!mp.sequence_parallel) {
      flags.fail("tensor_model_parallel_size", "MoE layers under tensor parallelism need --sequence-parallel "
                                               "(Megatron asserts it)");
    }
  }
  const int ep = static_cast<int>(flags.integer("expert_model_parallel_size").value_or(1));
  if (ep > 1 && !model.has_moe) flags.fail("expert_model_parallel_size", "model " + model.name + " has no MoE layers");
  if (ep > 1 && model.moe.experts % ep != 0) {
    flags.fail("expert_model_parallel_size", std::to_string(ep) + " does not divide model " + model.name + "'s " +
                                                 std::to_string(model.moe.experts) + " experts");
  }
  if (stage_gpus % ep != 0) {
    flags.fail("expert_model_parallel_size",
               std::to_string(ep) + " does not divide the " + std::to_string(stage_gpus) + " GPUs of a pipeline stage");
  }
  experts.parallel = ep;
  const std::string dispatcher =
      flags.choice("moe_token_dispatcher_type", {"allgather", "alltoall", "flex", "alltoall_seq"}).value_or("allgather");
  if (dispatcher == "flex" || dispatcher == "alltoall_seq") {
    flags.fail("moe_token_dispatcher_type", dispatcher + " is not modelled: use alltoall or allgather");
  }
  experts.dispatcher = dispatcher == "alltoall" ? TokenDispatcher::all_to_all : TokenDispatcher::all_gather;
  if (flags.on("moe_shared_expert_overlap")) {
    if (experts.dispatcher != TokenDispatcher::all_to_all) {
      flags.fail("moe_shared_expert_overlap", "works with --moe-token-dispatcher-type alltoall only (Megatron-Core "
                                              "raises it with " + dispatcher + ")");
    }
    if (model.moe.shared_experts > 0) {
      experts.shared_expert_overlap = true;
    } else {
      note("--moe-shared-expert-overlap: model " + model.name + " has no shared experts, nothing to overlap");
    }
  }
  if (const auto capacity = flags.positive_number("moe_expert_capacity_factor")) {
    // Routing is taken as balanced: a capacity above 1 changes nothing unless
    // Megatron pads every expert's input to it.
    const bool pad = flags.on("moe_pad_expert_input_to_capacity");
    experts.capacity_factor = pad || *capacity < 1 ? *capacity : 1.0;
    if (!pad && *capacity > 1) {
      note("--moe-expert-capacity-factor above 1 drops no tokens at balanced routing and pads none without "
           "--moe-pad-expert-input-to-capacity: simulated as 1");
    }
  }
  return experts;
}

// Tensor, pipeline and context parallelism, the layers' split over the
// stages, and what goes with them: the job's plan.model_parallel and
// data-parallel size, and the stages' layers.
template <typename Note>
PipelineSplit read_model_parallelism(const FlagReader& flags, const ModelSpec& model, MegatronJob& job, int gpus,
                                     int gpus_per_node, const Note& note) {
  ModelParallelism& mp = job.plan.model_parallel;
  mp.tensor = static_cast<int>(flags.integer("tensor_model_parallel_size").value_or(1));
  mp.pipeline = static_cast<int>(flags.integer("pipeline_model_parallel_size").value_or(1));
  mp.context = static_cast<int>(flags.integer("context_parallel_size").value_or(1));
  if (gpus % mp.gpus_per_replica() != 0) {
    flags.fail(flags.has("context_parallel_size")         ? "context_parallel_size"
               : flags.has("pipeline_model_parallel_size") ? "pipeline_model_parallel_size"
                                                           : "tensor_model_parallel_size",
               "tensor x pipeline x context = " + std::to_string(mp.gpus_per_replica()) + " does not divide the " +
                   std::to_string(gpus) + " GPUs");
  }
  if (gpus_per_node % mp.tensor != 0) {
    flags.fail("tensor_model_parallel_size", "tensor-parallel groups stay inside a node: must divide its " +
                                                 std::to_string(gpus_per_node) + " GPUs, got " + std::to_string(mp.tensor));
  }
  job.data_parallel = gpus / mp.gpus_per_replica();

  const std::int64_t layers = flags.integer("num_layers").value_or(model.layers);
  if (const auto mtp = flags.integer("mtp_num_layers", 0)) {
    if (*mtp > layers) flags.fail("mtp_num_layers", "must be at most the model's " + std::to_string(layers) + " layers");
    job.mtp_layers = static_cast<int>(*mtp);
  }
  if (model.mtp_layers > 0 && job.mtp_layers != model.mtp_layers) {
    note("model " + model.name + " has " + std::to_string(model.mtp_layers) +
         (model.mtp_layers == 1 ? " MTP layer" : " MTP layers") + "; Megatron builds " +
         std::to_string(job.mtp_layers) + " (--mtp-num-layers), as simulated");
  }
  if (const auto layout = flags.text("pipeline_model_parallel_layout")) {
    for (const char* other : {"num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
                              "virtual_pipeline_model_parallel_size"}) {
      if (flags.has(other)) {
        flags.fail(other, "does not combine with --pipeline-model-parallel-layout, which sets the virtual stages "
                          "(Megatron asserts it)");
      }
    }
    const PipelineLayoutStages parsed = layout_over_pipeline(*layout, mp.pipeline);
    if (!parsed.ok()) flags.fail("pipeline_model_parallel_layout", parsed.problem);
    mp.layout = *layout;
    mp.virtual_stages = parsed.virtual_stages;
  }
  if (const auto v = flags.integer("virtual_pipeline_model_parallel_size")) mp.virtual_stages = static_cast<int>(*v);
  if (const auto v = flags.integer("num_virtual_stages_per_pipeline_rank")) mp.virtual_stages = static_cast<int>(*v);
  if (const auto per_stage = flags.integer("num_layers_per_virtual_pipeline_stage")) {
    if (layers % (mp.pipeline * *per_stage) != 0) {
      flags.fail("num_layers_per_virtual_pipeline_stage",
                 std::to_string(*per_stage) + " layers per virtual stage do not split " + std::to_string(layers) +
                     " layers over " + std::to_string(mp.pipeline) + " pipeline stages evenly");
    }
    mp.virtual_stages = static_cast<int>(layers / (mp.pipeline * *per_stage));
  }
  if (mp.virtual_stages > 1 && mp.pipeline < 2) {
    flags.fail("pipeline_model_parallel_size", "the interleaved schedule needs at least 2 pipeline stages");
  }
  // Read only with interleaving: Megatron's 1F1B schedule has no groups.
  if (const auto group = flags.integer("microbatch_group_size_per_virtual_pipeline_stage");
      group && mp.virtual_stages > 1) {
    mp.microbatch_group_size = static_cast<int>(*group);
  }
  const auto stage_layers = [&](const char* field) -> std::optional<int> {
    const auto value = flags.integer(field, 0);
    if (value && *value > layers) {
      flags.fail(field, "must be at most the model's " + std::to_string(layers) + " layers, got " + std::to_string(*value));
    }
    return value ? std::optional<int>(static_cast<int>(*value)) : std::nullopt;
  };
  mp.first_stage_layers = stage_layers("decoder_first_pipeline_num_layers");
  mp.last_stage_layers = stage_layers("decoder_last_pipeline_num_layers");
  mp.account_for_embedding = flags.on("account_for_embedding_in_pipeline_split");
  mp.account_for_loss = flags.on("account_for_loss_in_pipeline_split");
  const PipelineSplit split = split_pipeline(mp, static_cast<int>(layers), model.name, job.mtp_layers);
  if (!split.ok()) {
    const std::map<std::string, std::string> flag_of_option = {
        {"", "pipeline_model_parallel_size"},
        {"first_stage_layers", "decoder_first_pipeline_num_layers"},
        {"last_stage_layers", "decoder_last_pipeline_num_layers"},
        {"account_for_embedding", "account_for_embedding_in_pipeline_split"},
        {"account_for_loss", "account_for_loss_in_pipeline_split"},
        {"layout", "pipeline_model_parallel_layout"}};
    flags.fail(flag_of_option.at(split.option), split.problem);
  }
  if (flags.on("use_tp_pp_dp_mapping")) mp.rank_order = RankOrder::tp_cp_pp_dp;
  mp.sequence_parallel = flags.on("sequence_parallel");
  if (mp.sequence_parallel && mp.tensor == 1) {
    mp.sequence_parallel = false;
    note("--sequence-parallel has no effect with tensor-parallel size 1 (Megatron turns it off)");
  }
  mp.gradient_accumulation_fusion = !flags.on("no_gradient_accumulation_fusion");
  // Launches are read as Megatron-Core runs them, which sends whole pipeline
  // tensors; --scatter-gather-tensors-in-pipeline (shardsim's) asks for the
  // 2021-2022 Megatron-LM's default, which --no-scatter-gather-tensors-in-pipeline turned off.
  if (flags.on("scatter_gather_tensors_in_pipeline")) {
    if (flags.on("no_scatter_gather_tensors_in_pipeline")) {
      flags.fail("no_scatter_gather_tensors_in_pipeline", "contradicts --scatter-gather-tensors-in-pipeline");
    }
    mp.scatter_gather_pipeline_tensors = true;
  }
  if (flags.on("tp_comm_overlap")) {
    if (!mp.sequence_parallel) flags.fail("tp_comm_overlap", "needs --sequence-parallel (Megatron asserts it)");
    mp.tp_comm_overlap = true;
  }
  return split;
}

// Sequence, batch, precision, attention and dropout: job.training, from
// `base` where the flags are silent.
template <typename Note>
void read_batch_and_precision(const FlagReader& flags, const TrainingConfig& base, MegatronJob& job, const Note& note) {
  const ModelParallelism& mp = job.plan.model_parallel;
  const std::string& file = job.file;
  TrainingConfig& training = job.training;
  training = base;
  if (const auto seq = flags.integer("seq_length")) training.sequence_length = *seq;
  if (const std::string problem = sequence_split_problem(training.sequence_length, mp); !problem.empty()) {
    flags.fail(flags.has("seq_length")     ? "seq_length"
               : mp.context > 1            ? "context_parallel_size"
                                           : "tensor_model_parallel_size",
               problem);
  }
  if (const auto micro = flags.integer("micro_batch_size")) training.micro_batch_size = *micro;
  if (const auto global = flags.integer("global_batch_size")) training.global_batch_sequences = *global;
  if (flags.has("global_batch_size") || flags.has("micro_batch_size")) {
    const std::int64_t per_step = training.micro_batch_size * job.data_parallel;
    if (training.global_batch_sequences % per_step != 0) {
      flags.fail(flags.has("global_batch_size") ? "global_batch_size" : "micro_batch_size",
                 "global batch " + std::to_string(training.global_batch_sequences) + " is not a multiple of micro-batch " +
                     std::to_string(training.micro_batch_size) + " x data-parallel size " +
                     std::to_string(job.data_parallel));
    }
  }
  if (mp.virtual_stages > 1) {
    const std::int64_t micro_batches = gradient_accumulation_steps(training, job.data_parallel, file);
    const std::string problem =
        microbatch_group_problem(mp.pipeline, static_cast<int>(micro_batches), mp.microbatch_group());
    if (!problem.empty() && mp.microbatch_group_size) flags.fail("microbatch_group_size_per_virtual_pipeline_stage", problem);
    if (!problem.empty()) {
      flags.fail(flags.has("global_batch_size")  ? "global_batch_size"
                 : flags.has("micro_batch_size") ? "micro_batch_size"
                                                 : "pipeline_model_parallel_size",
                 "the interleaved schedule takes the micro-batches in groups of the pipeline stages: " + problem +
                     "; --microbatch-group-size-per-virtual-pipeline-stage sets another group");
    }
  }
  const bool bf16 = flags.on("bf16"), fp16 = flags.on("fp16");
  if (bf16 && fp16) flags.fail("fp16", "--bf16 and --fp16 are both given (Megatron asserts one at most)");
  if (bf16 || fp16) {
    training.fp16 = fp16;
  } else {
    note(std::string("neither --bf16 nor --fp16: Megatron would train in fp32, which is not modelled; simulating ") +
         (training.fp16 ? "fp16" : "bf16") + " from the training config");
  }
  if (flags.text("fp8_format")) training.fp8_gemms = true;
  // Megatron's gradient buffer (main_grad) is fp32 for bf16 unless
  // --grad-reduce-in-bf16 (arguments.py: accumulate_allreduce_grads_in_fp32).
  if (flags.on("grad_reduce_in_bf16")) job.plan.reduce_dtype = GradientReduceDtype::training;
  if (flags.on("fp8_param_gather")) {
    note("--fp8-param-gather: parameters held and gathered in fp8 are not modelled; counted and gathered in " +
         std::string(training.fp16 ? "fp16" : "bf16"));
  }
  if (flags.on("use_flash_attn")) training.flash_attention = true;
  if (const auto backend = flags.choice("attention_backend", {"auto", "flash", "fused", "unfused", "local"})) {
    training.flash_attention = *backend != "unfused" && *backend != "local";
  }
  // Which FlashAttention generation runs the launch does not say (Transformer
  // Engine picks what is installed); the training config's choice stands
  // unless the launch turns fused attention off.
  if (!training.flash_attention) training.attention_kernel = AttentionKernel::profile;

  // Megatron-LM drops attention probabilities and hidden states with
  // probability 0.1 unless told otherwise (arguments.py); LLaMA-style
  // launches pass 0.
  constexpr double kMegatronDefaultDropout = 0.1;
  training.attention_dropout = flags.probability("attention_dropout").value_or(kMegatronDefaultDropout);
  training.hidden_dropout = flags.probability("hidden_dropout").value_or(kMegatronDefaultDropout);

}

// Activation recompute as Megatron-Core reads its flags, and what its
// TransformerConfig raises of it.
template <typename Note>
void read_recompute(const FlagReader& flags, const ModelSpec& model, const PipelineSplit& split, MegatronJob& job,
                    const Note& note) {
  TrainingConfig& training = job.training;
  const Plan& plan = job.plan;
  if (flags.on("recompute_activations")) training.recompute = Recompute::selective;
  const auto granularity = flags.choice("recompute_granularity", {"full", "selective"});
  if (granularity == "selective") training.recompute = Recompute::selective;
  if (granularity == "full") {
    const auto method = flags.choice("recompute_method", {"uniform", "block"});
    if (!method) flags.fail("recompute_granularity", "full needs --recompute-method uniform or block");
    const std::int64_t chunk_layers = *std::max_element(split.layers.begin(), split.layers.end());
    const std::int64_t count = flags.integer("recompute_num_layers").value_or(*method == "uniform" ? 1 : 0);
    if (*method == "block" && count < chunk_layers) {
      flags.fail("recompute_num_layers",
                 "block recompute of " + std::to_string(count) + " of each virtual stage's " +
                     std::to_string(chunk_layers) + " layers is not modelled: shardsim recomputes every layer or none");
    }
    if (*method == "uniform" && count > 1) {
      note("--recompute-method uniform over groups of " + std::to_string(count) +
           " layers is simulated as full recompute per layer (each layer's input kept)");
    }
    training.recompute = Recompute::full;
  }
  if (flags.on("moe_layer_recompute")) {
    flags.fail("moe_layer_recompute", "recomputes the whole MoE layer (\"moe\"), which is not modelled");
  }
  if (const auto modules = flags.text("recompute_modules")) {
    if (training.recompute != Recompute::selective) {
      note("--recompute-modules is read under --recompute-granularity selective only, as Megatron reads it");
    } else {
      std::vector<std::string> names;
      std::istringstream words(*modules);
      for (std::string name; words >> name;) names.push_back(name);
      std::string problem;
      training.recompute_modules = parse_recompute_modules(names, problem);
      if (!problem.empty()) flags.fail("recompute_modules", problem);
    }
  }
  // What Megatron-Core's TransformerConfig raises.
  if (training.recomputes(&RecomputeModules::moe_activation) && !flags.on("moe_grouped_gemm")) {
    flags.fail("recompute_modules", "moe_act is recomputed with --moe-grouped-gemm only (Megatron-Core raises it)");
  }
  if (training.recomputes(&RecomputeModules::mla_up_projections) && !model.has_mla) {
    flags.fail("recompute_modules", "mla_up_proj needs --multi-latent-attention (Megatron-Core raises it)");
  }
  if (training.recomputes(&RecomputeModules::shared_experts) && plan.experts.shared_expert_overlap) {
    flags.fail("recompute_modules", "shared_experts cannot be recomputed with --moe-shared-expert-overlap "
                                    "(Megatron-Core raises it)");
  }
  if (training.recomputes(&RecomputeModules::core_attention) && training.flash_attention) {
    note("selective recompute reruns the fused attention's forward in backward, which saves no memory "
         "(Megatron-Core warns so); --recompute-modules without core_attn leaves it out");
  }

}

// The combined 1F1B (--overlap-moe-expert-parallel-comm) and delayed weight
// gradients, where Megatron-Core's TransformerConfig allows them.
void read_combined_1f1b(const FlagReader& flags, MegatronJob& job) {
  Plan& plan = job.plan;
  const ModelParallelism& mp = plan.model_parallel;
  const TrainingConfig& training = job.training;
  if (flags.on("overlap_moe_expert_parallel_comm")) {
    const auto refuse = [&](const std::string& why) { flags.fail("overlap_moe_expert_parallel_comm", why); };
    if (plan.experts.parallel < 2) refuse("needs --expert-model-parallel-size > 1");
    if (plan.experts.dispatcher != TokenDispatcher::all_to_all) refuse("needs --moe-token-dispatcher-type alltoall");
    if (plan.experts.shared_expert_overlap) refuse("cannot run with --moe-shared-expert-overlap");
    if (mp.pipeline > 1 && mp.virtual_stages < 2) {
      refuse("with --pipeline-model-parallel-size > 1 needs the interleaved schedule "
             "(--num-virtual-stages-per-pipeline-rank)");
    }
    if (training.recompute == Recompute::full) refuse("cannot run with --recompute-granularity full");
    plan.experts.overlap_expert_parallel_comm = true;
  }
  if (flags.on("delay_wgrad_compute")) {
    if (!plan.experts.overlap_expert_parallel_comm) {
      flags.fail("delay_wgrad_compute", "needs --overlap-moe-expert-parallel-comm (Megatron-Core asserts it)");
    }
    plan.experts.delay_wgrad_compute = true;
  }

}

// Megatron-Core buckets by parameters; gradients are fp32 for bf16 training
// (model_parallel_step.h), parameters in the training dtype.
BucketSizes megatron_buckets(const FlagReader& flags, const ModelSpec& model, const MegatronJob& job,
                             bool overlap_reduce) {
  BucketSizes buckets = job.plan.buckets;
  const TrainingConfig& training = job.training;
  const double bucket_parameters =
      !overlap_reduce
          ? static_cast<double>(count_parameters(model).total())
          : static_cast<double>(flags.integer("ddp_bucket_size")
                                    .value_or(std::max<std::int64_t>(40'000'000, 1'000'000 * std::int64_t{job.data_parallel})));
  const double gradient_bytes = training.fp16 ? 2.0 : 4.0;
  buckets.reduce_bytes = gradient_bytes * bucket_parameters;
  buckets.all_gather_bytes = training.bytes_per_value * bucket_parameters;

  return buckets;
}

// "megatron-t8-p4-v2+ep8": the layout, as the search names its plans.
std::string plan_name(const Plan& plan) {
  const ModelParallelism& mp = plan.model_parallel;
  return "megatron-t" + std::to_string(mp.tensor) + "-p" + std::to_string(mp.pipeline) +
              (mp.virtual_stages > 1 ? "-v" + std::to_string(mp.virtual_stages) : "") +
              (mp.microbatch_group_size ? "-n" + std::to_string(*mp.microbatch_group_size) : "") +
              (mp.context > 1 ? "-c" + std::to_string(mp.context) : "") +
              (plan.experts.parallel > 1 ? "+ep" + std::to_string(plan.experts.parallel) : "");
}

}  // namespace

MegatronJob parse_megatron_args(const std::string& text, const std::string& file, const ModelSpec& model,
                                const TrainingConfig& base, int gpus, int gpus_per_node) {
  const MegatronFlags all = read_megatron_flags(text);
  const FlagReader flags(all, file);
  if (all.empty()) {
    throw_input_error(file, "(flags)",
                      "no --flag found: expected Megatron-LM's, e.g. --tensor-model-parallel-size 8 --micro-batch-size 1");
  }
  check_model(flags, model);
  for (const char* field : {"use_torch_fsdp2", "use_custom_fsdp", "use_megatron_fsdp"}) {
    if (flags.on(field)) flags.fail(field, "Megatron's FSDP is not read from flags: simulate it with --plan fsdp-full-shard");
  }

  MegatronJob job;
  job.file = file;
  const auto note = [&](const std::string& what) { job.notes.push_back(file + ": " + what); };
  Plan& plan = job.plan;
  plan.system = ShardingSystem::megatron;
  const PipelineSplit split = read_model_parallelism(flags, model, job, gpus, gpus_per_node, note);
  const ModelParallelism& mp = plan.model_parallel;

  const bool distributed = flags.on("use_distributed_optimizer");
  const bool overlap_reduce = flags.on("overlap_grad_reduce");
  const bool overlap_gather = flags.on("overlap_param_gather");
  if (overlap_gather && !(distributed && overlap_reduce)) {
    flags.fail("overlap_param_gather", "needs --use-distributed-optimizer and --overlap-grad-reduce (Megatron asserts it)");
  }
  plan.factors = FactorSpec{1, 1, distributed ? 0 : 1};  // 0 = all
  plan.experts = read_expert_parallelism(flags, model, mp, mp.gpus_per_replica() / mp.pipeline * job.data_parallel, note);
  plan.overlap = {true, overlap_reduce, overlap_gather};
  plan.as_implemented = true;

  read_batch_and_precision(flags, base, job, note);
  read_recompute(flags, model, split, job, note);
  read_combined_1f1b(flags, job);
  plan.buckets = megatron_buckets(flags, model, job, overlap_reduce);
  plan.name = plan_name(plan);
  plan.sources = {"imported from Megatron-LM arguments " + file};
  return job;
}

MegatronJob load_megatron_args(const std::string& file_or_preset, const ModelSpec& model,
                               const TrainingConfig& training, int gpus, int gpus_per_node) {
  const std::string file = resolve_preset(file_or_preset, "workloads/megatron", "Megatron-LM launch", ".sh");
  std::ifstream in(file);
  if (!in) throw InputError(file + ": cannot open the Megatron-LM arguments file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_megatron_args(text.str(), file, model, training, gpus, gpus_per_node);
}

}  // namespace shardsim::workloads
