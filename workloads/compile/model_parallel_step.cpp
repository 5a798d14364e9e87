#include "workloads/compile/model_parallel_step.h"

#include "topology/base/json_input.h"
#include "workloads/compile/megatron_stage.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/inputs/pipeline_split.h"
#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/memory_model.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace shardsim::workloads {

namespace {

// Each stage's steps: Megatron-LM's 1F1B, one pass a step, or, when the
// plan overlaps the expert-parallel all-to-alls, the combined 1F1B.
std::vector<std::vector<CombinedStep>> stage_steps(const StepConfig& config, const ModelParallelPartition& partition) {
  const ModelParallelism& mp = config.plan.model_parallel;
  const int m = static_cast<int>(partition.micro_batches);
  if (config.plan.experts.overlap_expert_parallel_comm) {
    return combined_1f1b_schedule(mp.pipeline, mp.virtual_stages, m, mp.microbatch_group());
  }
  const auto passes = pipeline_schedule(mp.pipeline, mp.virtual_stages, m, mp.microbatch_group());
  std::vector<std::vector<CombinedStep>> steps(passes.size());
  for (std::size_t stage = 0; stage < passes.size(); ++stage) {
    for (const PipelinePass& pass : passes[stage]) {
      steps[stage].push_back(pass.forward() ? CombinedStep{pass, std::nullopt} : CombinedStep{std::nullopt, pass});
    }
  }
  return steps;
}

}  // namespace

Communicator pipeline_stage_pairs(std::string name, const ModelParallelLayout& layout, int a, int b) {
  Communicator communicator;
  communicator.name = std::move(name);
  communicator.group_of_rank.assign(static_cast<std::size_t>(layout.ranks()), -1);
  for (int dp = 0; dp < layout.data; ++dp) {
    for (int tp = 0; tp < layout.tensor; ++tp) {
      std::vector<int> group{layout.rank(tp, dp, a), layout.rank(tp, dp, b)};
      std::sort(group.begin(), group.end());
      for (int rank : group) {
        communicator.group_of_rank[static_cast<std::size_t>(rank)] = static_cast<int>(communicator.groups.size());
      }
      communicator.groups.push_back(std::move(group));
    }
  }
  return communicator;
}

PipelineCommunicators add_pipeline_communicators(Program& program, const ModelParallelLayout& layout, int virtual_stages,
                                                 bool tied_embedding) {
  const auto add = [&](Communicator communicator) {
    program.communicators.push_back(std::move(communicator));
    return static_cast<int>(program.communicators.size() - 1);
  };
  const int p = layout.pipeline;
  const int boundaries = virtual_stages > 1 ? p : p - 1;
  PipelineCommunicators comms;
  for (int s = 0; s < boundaries; ++s) {
    comms.forward.push_back(add(pipeline_stage_pairs("pipeline_forward" + std::to_string(s), layout, s, (s + 1) % p)));
  }
  for (int s = 0; s < boundaries; ++s) {
    comms.backward.push_back(add(pipeline_stage_pairs("pipeline_backward" + std::to_string(s), layout, s, (s + 1) % p)));
  }
  if (tied_embedding) comms.embedding = add(pipeline_stage_pairs("embedding", layout, 0, p - 1));
  return comms;
}

ExpertShardingFactors megatron_expert_factors(const StepConfig& config, const ShardingFactors& dense) {
  const int group = config.plan.model_parallel.tensor * sharding_group_size(config);  // a stage's GPUs
  const int ep = config.plan.experts.parallel, routed = config.model.routed_experts();
  // resolve_expert_factors names what does not fit the model; what does not
  // fit a stage is said here, in a stage's terms.
  if (routed > 0 && routed % ep == 0 && group % ep != 0) {
    throw_input_error(config.plan_file, "experts.parallel",
                      std::to_string(ep) + " does not divide the " + std::to_string(group) +
                          " GPUs of a pipeline stage (tensor x data x context)");
  }
  ExpertShardingFactors experts = resolve_expert_factors(config.plan, routed, dense, group, config.plan_file);
  // The distributed optimizer shards the experts' states over their whole
  // expert-data-parallel group, which tensor parallelism can make larger
  // than the data-parallel one.
  if (dense.optimizer > 1) experts.factors.optimizer = experts.data_parallel;
  return experts;
}

std::vector<int> stage_of_rank(const ModelParallelLayout& layout) {
  std::vector<int> stages(static_cast<std::size_t>(layout.ranks()));
  for (int rank = 0; rank < layout.ranks(); ++rank) stages[static_cast<std::size_t>(rank)] = layout.pp(rank);
  return stages;
}

ModelParallelPartition partition_model(const StepConfig& config) {
  const ModelParallelism& mp = config.plan.model_parallel;
  const ModelSpec& model = config.model;
  ModelParallelPartition partition;
  partition.virtual_stage_layers =
      virtual_stage_layers(mp, model.layers, model.name, config.plan_file, model.mtp_layers);
  // The distributed optimizer shards over the data x context-parallel GPUs,
  // which all hold the same parameters; the batch splits over data alone.
  partition.factors =
      resolve_factors(config.plan, sharding_group_size(config), config.gpus_per_node / mp.tensor, config.plan_file);
  partition.expert_factors = megatron_expert_factors(config, partition.factors);
  partition.experts_apart = model.has_moe && (config.plan.experts.parallel > 1 || mp.tensor > 1);
  partition.micro_batches = gradient_accumulation_steps(config.training, config.data_parallel, config.training_file);
  const SystemBehaviour& behaviour = behaviour_of(config.plan.system);
  if (behaviour.compiler == StepCompiler::zero_pipeline && partition.micro_batches % mp.scheduling_unit != 0) {
    throw_input_error(config.plan_file, "model_parallel.scheduling_unit",
                      "must divide the micro-batches per step (" + std::to_string(partition.micro_batches) +
                          "), got " + std::to_string(mp.scheduling_unit));
  }
  if (behaviour.compiler == StepCompiler::megatron_pipeline && mp.virtual_stages > 1) {
    const std::string problem =
        microbatch_group_problem(mp.pipeline, static_cast<int>(partition.micro_batches), mp.microbatch_group());
    if (!problem.empty() && mp.microbatch_group_size) {
      throw_input_error(config.plan_file, "model_parallel.microbatch_group_size", problem);
    }
    if (!problem.empty()) {
      throw_input_error(config.training_file, "global_batch",
                        "the interleaved schedule needs the micro-batches per step (" +
                            std::to_string(partition.micro_batches) + ") to be a multiple of the " +
                            std::to_string(mp.pipeline) +
                            " pipeline stages, or the plan's model_parallel.microbatch_group_size N in [p, m] with m "
                            "mod N 0 or at least p");
    }
  }
  if (config.plan.experts.overlap_expert_parallel_comm && config.training.recompute == Recompute::full) {
    throw_input_error(config.training_file, "recompute",
                      "full recompute cannot run with the plan's experts.overlap_expert_parallel_comm (Megatron-Core "
                      "asserts it): use none or selective");
  }
  partition.modules = transformer_modules(model, config.training, mp, config.plan.experts, config.plan.kernels);
  // Megatron-LM keeps bf16 gradients in fp32 (accumulate_allreduce_grads_in_fp32
  // is forced on for bf16) unless --grad-reduce-in-bf16 (the plan's
  // reduce_dtype "training"); fp16 gradients stay fp16. ZeRO keeps them in
  // the training dtype.
  const bool fp32_gradients = config.plan.reduce_dtype
                                  ? *config.plan.reduce_dtype == GradientReduceDtype::fp32
                                  : behaviour.fp32_gradients_for_bf16 && !config.training.fp16;
  partition.gradient_bytes_per_value = fp32_gradients ? 4.0 : config.training.bytes_per_value;
  const double tokens = static_cast<double>(config.training.tokens_per_micro_batch());
  partition.boundary_bytes = config.training.bytes_per_value * tokens * static_cast<double>(model.hidden) /
                             (mp.sequence_shards() * mp.context);
  if (mp.scatter_gather_pipeline_tensors && !mp.sequence_parallel && mp.tensor > 1 && mp.pipeline > 1) {
    partition.boundary_gather_bytes = partition.boundary_bytes;
    partition.boundary_bytes /= mp.tensor;
  }
  // The virtual stage of each layer; the embedding goes with the first
  // virtual stage, the output layer with the last.
  const int chunks_total = mp.pipeline * mp.virtual_stages;
  std::vector<int> stage_of_layer;
  for (int vs = 0; vs < chunks_total; ++vs) {
    const int layers = partition.virtual_stage_layers[static_cast<std::size_t>(vs)];
    stage_of_layer.insert(stage_of_layer.end(), static_cast<std::size_t>(layers), vs);
  }
  partition.chunks.assign(static_cast<std::size_t>(mp.pipeline),
                          std::vector<std::vector<std::size_t>>(static_cast<std::size_t>(mp.virtual_stages)));
  partition.stage_parameters.assign(static_cast<std::size_t>(mp.pipeline), 0.0);
  partition.stage_expert_parameters.assign(static_cast<std::size_t>(mp.pipeline), 0.0);
  for (std::size_t m = 0; m < partition.modules.size(); ++m) {
    const int layer = partition.modules[m].layer;
    const int virtual_stage = layer < 0               ? 0
                              : layer >= model.layers ? chunks_total - 1
                                                      : stage_of_layer[static_cast<std::size_t>(layer)];
    const int stage = virtual_stage % mp.pipeline;
    partition.chunks[static_cast<std::size_t>(stage)][static_cast<std::size_t>(virtual_stage / mp.pipeline)].push_back(m);
    partition.stage_parameters[static_cast<std::size_t>(stage)] += partition.modules[m].parameters;
    if (partition.modules[m].routed_experts && partition.experts_apart) {
      partition.stage_expert_parameters[static_cast<std::size_t>(stage)] += partition.modules[m].parameters;
    }
  }
  if ((model.tied_embeddings || model.mtp_layers > 0) && mp.pipeline > 1) {
    // The last stage keeps its own copy of the word embedding for the LM
    // head or the MTP depths' lookups (Megatron-Core all-reduces its gradient
    // with the first stage's for either, _allreduce_word_embedding_grads).
    partition.tied_embedding_parameters = static_cast<double>(model.vocab * model.hidden) / mp.tensor;
    partition.stage_parameters.back() += partition.tied_embedding_parameters;
  }
  return partition;
}

std::vector<MemoryBreakdown> estimate_stage_memory(const StepConfig& config) {
  const ModelParallelism& mp = config.plan.model_parallel;
  const ModelParallelPartition partition = partition_model(config);
  const auto schedule = stage_steps(config, partition);
  std::vector<MemoryBreakdown> stages(static_cast<std::size_t>(mp.pipeline));
  for (int stage = 0; stage < mp.pipeline; ++stage) {
    const auto& chunks = partition.chunks[static_cast<std::size_t>(stage)];
    std::vector<double> chunk_bytes(chunks.size(), 0.0);
    double working = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      for (std::size_t m : chunks[c]) {
        chunk_bytes[c] += partition.modules[m].activation_bytes;
        const ModuleWork& work = partition.modules[m];
        working = std::max({working, work.recompute_working_bytes, work.forward_working_bytes(),
                            work.backward_working_bytes()});
      }
    }
    // A combined step holds both passes' activations at once.
    double live = 0, peak = 0;
    for (const CombinedStep& step : schedule[static_cast<std::size_t>(stage)]) {
      if (step.forward) live += chunk_bytes[static_cast<std::size_t>(step.forward->chunk)];
      peak = std::max(peak, live);
      if (step.backward) live -= chunk_bytes[static_cast<std::size_t>(step.backward->chunk)];
    }
    const double psi = partition.stage_parameters[static_cast<std::size_t>(stage)];
    const double psi_experts = partition.stage_expert_parameters[static_cast<std::size_t>(stage)];
    MemoryBreakdown& memory = stages[static_cast<std::size_t>(stage)];
    memory.parameters = config.training.bytes_per_value * psi;
    memory.gradients = partition.gradient_bytes_per_value * psi;
    memory.optimizer_states = kOptimizerStateBytesPerParameter * ((psi - psi_experts) / partition.factors.optimizer +
                                                                  psi_experts / partition.expert_factors.factors.optimizer);
    memory.activations = peak + working;
  }
  return stages;
}

Program compile_model_parallel_step(const StepConfig& config) {
  const ModelParallelism& mp = config.plan.model_parallel;
  // Megatron's order puts the context-parallel rank between the tensor- and
  // the data-parallel ones: the layout's "data" index is cp + c dp.
  const int c = mp.context;
  const ModelParallelLayout layout{mp.tensor, config.data_parallel * c, mp.pipeline, c, mp.rank_order};
  const ModelParallelPartition partition = partition_model(config);

  Program program;
  program.ranks = layout.ranks();
  program.streams = {"compute",           "tensor_parallel", "activation_send", "activation_receive",
                     "gradient_send",     "gradient_receive", "gradient_reduce", "parameter_gather"};
  if (c > 1) program.streams.push_back("context_parallel");  // context_stream
  MegatronCommunicators comms;
  const auto add = [&](Communicator communicator) {
    program.communicators.push_back(std::move(communicator));
    return static_cast<int>(program.communicators.size() - 1);
  };
  const int t = layout.tensor, d = layout.data;
  if (t > 1) comms.tensor = add(make_communicator("tensor_parallel", layout.ranks(), [t](int r) { return r / t; }));
  if (d > 1) {
    comms.data = add(make_communicator("data_parallel", layout.ranks(),
                                       [&layout](int r) { return std::pair(layout.tp(r), layout.pp(r)); }));
  }
  if (c > 1) {
    comms.context = add(make_communicator("context_parallel", layout.ranks(), [&layout, c](int r) {
      return std::tuple(layout.tp(r), layout.pp(r), layout.dp(r) / c);
    }));
  }
  const int ep = config.plan.experts.parallel;
  if (partition.experts_apart) {
    // A stage's t x d x c ranks, in Megatron's order (tensor fastest), cut
    // into expert-parallel groups and, across them, the groups holding the
    // same experts.
    const auto slot = [&](int r) {
      return topology::moe_slot(layout.tp(r) + t * layout.dp(r), t * d, ep, config.plan.experts.layout);
    };
    if (ep > 1) {
      comms.expert_parallel = add(make_communicator("expert_parallel", layout.ranks(), [&](int r) {
        return std::pair(layout.pp(r), slot(r).replica);
      }));
      comms.expert_stream = static_cast<int>(program.streams.size());
      program.streams.push_back("expert_all_to_all");
    }
    if (partition.expert_factors.data_parallel > 1) {
      comms.expert_data = add(make_communicator("expert_data_parallel", layout.ranks(), [&](int r) {
        return std::pair(layout.pp(r), slot(r).expert);
      }));
    }
  }
  if (config.plan.experts.shared_expert_overlap && config.model.moe.shared_experts > 0) {
    comms.shared_expert_stream = static_cast<int>(program.streams.size());
    program.streams.push_back("shared_experts");
  }
  comms.pipeline = add_pipeline_communicators(program, layout, mp.virtual_stages, partition.tied_embedding_parameters > 0);

  const auto schedule = stage_steps(config, partition);
  program.programs.resize(static_cast<std::size_t>(mp.pipeline));
  for (int stage = 0; stage < mp.pipeline; ++stage) {
    build_megatron_stage(config, partition, comms, stage, schedule[static_cast<std::size_t>(stage)],
                         program.programs[static_cast<std::size_t>(stage)]);
  }
  program.program_of_rank = stage_of_rank(layout);

  program.description = step_description(config, partition.factors, partition.micro_batches);
  program.description["overlap"] = {{"gradient_reduce", config.plan.overlap.optimizer_all_reduce},
                                    {"parameter_gather", config.plan.overlap.parameter_broadcast}};
  program.description["tensor_parallel"] = mp.tensor;
  if (c > 1) program.description["context_parallel"] = c;
  program.description["pipeline_parallel"] = mp.pipeline;
  program.description["virtual_stages"] = mp.virtual_stages;
  if (uneven_pipeline(mp)) program.description["virtual_stage_layers"] = partition.virtual_stage_layers;
  if (mp.layout) program.description["pipeline_layout"] = *mp.layout;
  if (mp.microbatch_group_size) program.description["microbatch_group_size"] = *mp.microbatch_group_size;
  if (mp.rank_order == RankOrder::tp_cp_pp_dp) program.description["rank_order"] = "tp-cp-pp-dp";
  program.description["sequence_parallel"] = mp.sequence_parallel;
  program.description["tp_comm_overlap"] = mp.tp_comm_overlap;
  if (!mp.gradient_accumulation_fusion) program.description["gradient_accumulation_fusion"] = false;
  if (partition.boundary_gather_bytes > 0) program.description["scatter_gather_pipeline_tensors"] = true;
  program.description["distributed_optimizer"] = partition.factors.optimizer > 1;
  if (partition.experts_apart) program.description["experts"] = expert_description(config.plan, partition.expert_factors);
  if (comms.shared_expert_stream >= 0) program.description["shared_expert_overlap"] = true;
  if (config.plan.experts.overlap_expert_parallel_comm) {
    program.description["overlap_expert_parallel_comm"] = true;
    program.description["delay_wgrad_compute"] = config.plan.experts.delay_wgrad_compute;
  }
  return program;
}

}  // namespace shardsim::workloads
