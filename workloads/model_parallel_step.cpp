#include "workloads/model_parallel_step.h"

#include "topology/json_input.h"
#include "workloads/kernel_specs.h"
#include "workloads/memory_model.h"
#include "workloads/pipeline_schedule.h"
#include "workloads/pipeline_split.h"
#include "workloads/pipeline_stage_writer.h"
#include "workloads/transformer_kernels.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace shardsim::workloads {

namespace {

enum Stream : int {
  compute_stream,
  tensor_stream,
  activation_send_stream,
  activation_receive_stream,
  gradient_send_stream,
  gradient_receive_stream,
  reduce_stream,
  gather_stream,
  context_stream,
};

struct Communicators {
  std::optional<int> tensor, data, context;
  std::optional<int> expert_parallel, expert_data;
  int expert_stream = -1;  // after the context stream when there is one
  int shared_expert_stream = -1;  // a second compute stream, under --moe-shared-expert-overlap
  PipelineCommunicators pipeline;
};

// The two kinds of model state a stage reduces and gathers over different
// groups: every module's over the data (x context) GPUs, except, under
// expert parallelism, the routed experts' over their expert-data-parallel
// GPUs.
enum StateGroup : std::size_t { dense_states, expert_states };

// Modules whose gradients (or parameters) go in one call.
struct ModuleBucket {
  std::vector<std::size_t> modules;
  double parameters = 0;
};

class StageBuilder : PipelineStageWriter {
 public:
  StageBuilder(const StepConfig& config, const ModelParallelPartition& partition, const Communicators& comms,
               int stage, const std::vector<PipelinePass>& passes, RankProgram& program)
      : PipelineStageWriter(program, compute_stream,
                            {activation_send_stream, activation_receive_stream, gradient_send_stream,
                             gradient_receive_stream},
                            config.plan.model_parallel, partition, comms.pipeline, stage),
        config_(config),
        comms_(comms),
        passes_(passes),
        program_(program) {
    side_stream_ = comms.shared_expert_stream;
  }

  void build();

 private:
  // What sending or reducing a result waits for: the last kernel and the
  // tensor-parallel calls that complete it.
  std::vector<OpIndex> after_results() const {
    std::vector<OpIndex> after = after_last_compute();
    after.insert(after.end(), blocking_.begin(), blocking_.end());
    return after;
  }

  void run(const std::vector<KernelSpec>& list, const std::string& prefix, std::vector<OpIndex>& deps);
  // Without gradient-accumulation fusion Megatron-LM's DDP hook adds each
  // micro-batch's gradients (param.grad, in the training dtype) into the main
  // gradients: main_grad.add_(param.grad), a pass that reads both and writes
  // the main gradient.
  KernelSpec main_grad_add(double parameters) const {
    return gradient_add("main_grad.add", value_dtype(config_.training), parameters, config_.training.bytes_per_value,
                        partition_.gradient_bytes_per_value);
  }
  // Under scatter/gather a received slice is all-gathered over the
  // tensor-parallel group before the pass can use it, on the compute
  // stream's behalf (Megatron-LM's gather_split_1d_tensor).
  std::vector<OpIndex> gathered(std::vector<OpIndex> received, const std::string& name) {
    if (received.empty() || partition_.boundary_gather_bytes == 0) return received;
    return {collective(name + ".all_gather", CollectiveOp::all_gather, *comms_.tensor, partition_.boundary_gather_bytes,
                       tensor_stream, received)};
  }
  StateGroup group_of(std::size_t module) const {
    return partition_.modules[module].routed_experts && partition_.experts_apart ? expert_states : dense_states;
  }
  const std::optional<int>& reducer(StateGroup group) const {
    return group == expert_states ? comms_.expert_data : comms_.data;
  }
  int optimizer_factor(StateGroup group) const {
    return group == expert_states ? partition_.expert_factors.factors.optimizer : partition_.factors.optimizer;
  }
  // Whether the distributed optimizer shards the group's states, so its
  // parameters are all-gathered after the update.
  bool distributed(StateGroup group) const { return reducer(group) && optimizer_factor(group) > 1; }

  void forward(const PipelinePass& pass);
  void backward(const PipelinePass& pass, bool last_of_chunk);
  void close_bucket(ModuleBucket& bucket);
  void reduce_bucket(const ModuleBucket& bucket, std::vector<OpIndex> deps);
  void emit_parameter_gathers(const std::vector<OpIndex>& deps);

  const StepConfig& config_;
  const Communicators& comms_;
  const std::vector<PipelinePass>& passes_;
  RankProgram& program_;

  std::array<ModuleBucket, 2> buckets_;  // filling, per StateGroup
  std::vector<OpIndex> reductions_;       // the optimizer waits for these
  std::vector<ModuleBucket> deferred_;  // buckets reduced after the backward
  std::vector<std::optional<OpIndex>> gather_of_module_;
  bool gather_at_start_ = false;
};

// Model-parallel calls of a kernel list go over the tensor-, the context- or
// the expert-parallel group (plans refuse DeepSpeed-Ulysses with Megatron-LM,
// plan.h).
void StageBuilder::run(const std::vector<KernelSpec>& list, const std::string& prefix, std::vector<OpIndex>& deps) {
  OpWriter::run(list, prefix, deps, [this](CallGroup group) {
    if (group == CallGroup::tensor_parallel && comms_.tensor) return CallRoute{*comms_.tensor, tensor_stream};
    if (group == CallGroup::context_parallel && comms_.context) return CallRoute{*comms_.context, context_stream};
    if (group == CallGroup::expert_parallel && comms_.expert_parallel) {
      return CallRoute{*comms_.expert_parallel, comms_.expert_stream};
    }
    throw std::logic_error("StageBuilder: a call outside the tensor-, context- and expert-parallel groups");
  });
}

void StageBuilder::forward(const PipelinePass& pass) {
  const std::string name = prefix(pass);
  std::vector<OpIndex> deps = gathered(receive_activations(pass), name + "receive_activations");
  for (std::size_t module : modules_of(pass.chunk)) {
    const ModuleWork& work = partition_.modules[module];
    if (gather_at_start_ && pass.micro_batch == 0 && gather_of_module_[module]) deps.push_back(*gather_of_module_[module]);
    memory(name + work.name + ".activations.alloc", MemoryCategory::activations, work.activation_bytes, compute_stream);
    run(work.forward, name + work.name + ".", deps);
  }
  send_activations(pass, after_results());
}

void StageBuilder::backward(const PipelinePass& pass, bool last_of_chunk) {
  const std::string name = prefix(pass);
  const auto& modules = modules_of(pass.chunk);
  std::vector<OpIndex> deps = gathered(receive_gradients(pass), name + "receive_gradients");
  double working = 0;  // a layer rebuilt under full recompute, until the layer's backward is done
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    const ModuleWork& work = partition_.modules[*it];
    const std::string module_prefix = name + work.name + ".";
    if (work.recompute_working_bytes > 0) {
      working = work.recompute_working_bytes;
      memory(module_prefix + "recompute.alloc", MemoryCategory::activations, working, compute_stream);
    }
    run(work.recompute, module_prefix + "recompute.", deps);
    run(work.backward, module_prefix, deps);
    if (!mp_.gradient_accumulation_fusion && work.parameters > 0) run({main_grad_add(work.parameters)}, module_prefix, deps);
    memory(module_prefix + "activations.free", MemoryCategory::activations, -work.activation_bytes, compute_stream);
    const bool layer_done = std::next(it) == modules.rend() || partition_.modules[*std::next(it)].layer != work.layer;
    if (working > 0 && layer_done) {
      memory(module_prefix + "recompute.free", MemoryCategory::activations, -std::exchange(working, 0.0), compute_stream);
    }
    if (!last_of_chunk) continue;
    if (const StateGroup group = group_of(*it); reducer(group)) {
      ModuleBucket& bucket = buckets_[group];
      bucket.modules.push_back(*it);
      bucket.parameters += work.parameters;
      if (partition_.gradient_bytes_per_value * bucket.parameters >= config_.plan.buckets.reduce_bytes) {
        close_bucket(bucket);
      }
    }
    if (*it == modules.front()) {
      for (ModuleBucket& bucket : buckets_) {
        if (!bucket.modules.empty()) close_bucket(bucket);
      }
    }
  }
  send_gradients(pass, after_results());
}

void StageBuilder::close_bucket(ModuleBucket& bucket) {
  if (config_.plan.overlap.optimizer_all_reduce) {
    reduce_bucket(std::exchange(bucket, {}), after_results());
  } else {
    deferred_.push_back(std::exchange(bucket, {}));
  }
}

// One bucket of gradients over its data-parallel group: a reduce-scatter
// into the distributed optimizer's shards, or an all-reduce.
void StageBuilder::reduce_bucket(const ModuleBucket& bucket, std::vector<OpIndex> deps) {
  const StateGroup group = group_of(bucket.modules.front());
  const std::string name =
      "grad." + partition_.modules[bucket.modules.front()].name + (bucket.modules.size() > 1 ? "+" : "");
  const bool sharded = optimizer_factor(group) > 1;
  reductions_.push_back(collective(name + (sharded ? ".reduce_scatter" : ".all_reduce"),
                                   sharded ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, *reducer(group),
                                   partition_.gradient_bytes_per_value * bucket.parameters, reduce_stream,
                                   std::move(deps)));
}

// The distributed optimizer's parameter all-gathers, in buckets of whole
// modules in forward order, each group's over its own GPUs.
void StageBuilder::emit_parameter_gathers(const std::vector<OpIndex>& deps) {
  const double e = config_.training.bytes_per_value;
  std::array<ModuleBucket, 2> pending;
  const auto gather = [&](ModuleBucket& bucket, StateGroup group) {
    const OpIndex op = collective("update." + partition_.modules[bucket.modules.front()].name +
                                      (bucket.modules.size() > 1 ? "+" : "") + ".all_gather",
                                  CollectiveOp::all_gather, *reducer(group), e * bucket.parameters, gather_stream, deps);
    for (std::size_t m : std::exchange(bucket, {}).modules) gather_of_module_[m] = op;
  };
  for (const auto& chunk : partition_.chunks[static_cast<std::size_t>(stage_)]) {
    for (std::size_t m : chunk) {
      const StateGroup group = group_of(m);
      if (!distributed(group)) continue;
      pending[group].modules.push_back(m);
      pending[group].parameters += partition_.modules[m].parameters;
      if (e * pending[group].parameters >= config_.plan.buckets.all_gather_bytes) gather(pending[group], group);
    }
  }
  for (const StateGroup group : {dense_states, expert_states}) {
    if (!pending[group].modules.empty()) gather(pending[group], group);
  }
}

void StageBuilder::build() {
  const double psi = partition_.stage_parameters[static_cast<std::size_t>(stage_)];
  const double psi_experts = partition_.stage_expert_parameters[static_cast<std::size_t>(stage_)];
  // This GPU's optimizer shard: of the dense states, and of its experts' under expert parallelism.
  const double shard = (psi - psi_experts) / optimizer_factor(dense_states) + psi_experts / optimizer_factor(expert_states);
  const double e = config_.training.bytes_per_value;
  auto& resident = program_.resident_bytes;
  resident[static_cast<std::size_t>(MemoryCategory::parameters)] = e * psi;
  resident[static_cast<std::size_t>(MemoryCategory::gradients)] = partition_.gradient_bytes_per_value * psi;
  resident[static_cast<std::size_t>(MemoryCategory::optimizer_states)] = kOptimizerStateBytesPerParameter * shard;

  gather_of_module_.assign(partition_.modules.size(), std::nullopt);
  const bool gathers = distributed(dense_states) || distributed(expert_states);
  gather_at_start_ = gathers && config_.plan.overlap.parameter_broadcast;
  if (gather_at_start_) emit_parameter_gathers({});

  // A chunk's last backward is its last micro-batch's.
  const int last_micro_batch = static_cast<int>(partition_.micro_batches - 1);
  for (const PipelinePass& pass : passes_) {
    if (pass.forward()) {
      forward(pass);
    } else {
      backward(pass, pass.micro_batch == last_micro_batch);
    }
  }
  for (const ModuleBucket& bucket : deferred_) reduce_bucket(bucket, after_results());
  // Megatron-LM's finalize_model_grads, once the data-parallel reductions are
  // done: the gradients of the tensors each GPU holds whole and ran on its
  // part of the sequence, summed over the tensor-parallel group in one call.
  double sequence_parallel_parameters = 0;
  for (const auto& chunk : partition_.chunks[static_cast<std::size_t>(stage_)]) {
    for (std::size_t m : chunk) sequence_parallel_parameters += partition_.modules[m].sequence_parallel_parameters;
  }
  if (sequence_parallel_parameters > 0 && comms_.tensor) {
    std::vector<OpIndex> deps = reductions_;
    const std::vector<OpIndex> results = after_results();
    deps.insert(deps.end(), results.begin(), results.end());
    reductions_.push_back(collective("grad.sequence_parallel.all_reduce", CollectiveOp::all_reduce, *comms_.tensor,
                                     partition_.gradient_bytes_per_value * sequence_parallel_parameters, tensor_stream,
                                     std::move(deps)));
  }
  if (comms_.pipeline.embedding && (stage_ == 0 || stage_ == mp_.pipeline - 1)) {
    reductions_.push_back(collective("grad.tied_embedding.all_reduce", CollectiveOp::all_reduce, *comms_.pipeline.embedding,
                                     partition_.gradient_bytes_per_value * partition_.tied_embedding_parameters,
                                     reduce_stream, after_last_compute()));
  }
  std::vector<OpIndex> before_optimizer = reductions_;
  before_optimizer.insert(before_optimizer.end(), blocking_.begin(), blocking_.end());
  blocking_.clear();
  const OpIndex optimizer =
      kernel(optimizer_step({.shard_parameters = shard,
                             .gradient_bytes_per_value = partition_.gradient_bytes_per_value,
                             .weight_bytes_per_value = e,
                             .loss_scaling = config_.training.fp16,
                             .zeroed_gradient_bytes = partition_.gradient_bytes_per_value * psi}),  // zero_grad_buffer
             "", std::move(before_optimizer));
  if (gathers && !gather_at_start_) emit_parameter_gathers({optimizer});
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
  partition.virtual_stage_layers = virtual_stage_layers(mp, model.layers, model.name, config.plan_file);
  // The distributed optimizer shards over the data x context-parallel GPUs,
  // which all hold the same parameters; the batch splits over data alone.
  partition.factors =
      resolve_factors(config.plan, sharding_group_size(config), config.gpus_per_node / mp.tensor, config.plan_file);
  partition.expert_factors = megatron_expert_factors(config, partition.factors);
  partition.experts_apart = model.has_moe && (config.plan.experts.parallel > 1 || mp.tensor > 1);
  partition.micro_batches = gradient_accumulation_steps(config.training, config.data_parallel, config.training_file);
  if (config.plan.system == ShardingSystem::zero_pipeline && partition.micro_batches % mp.scheduling_unit != 0) {
    throw_input_error(config.plan_file, "model_parallel.scheduling_unit",
                      "must divide the micro-batches per step (" + std::to_string(partition.micro_batches) +
                          "), got " + std::to_string(mp.scheduling_unit));
  }
  if (config.plan.system == ShardingSystem::megatron && mp.virtual_stages > 1) {
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
  partition.modules = transformer_modules(model, config.training, mp, config.plan.experts);
  // Megatron-LM keeps bf16 gradients in fp32 (accumulate_allreduce_grads_in_fp32
  // is forced on for bf16); fp16 gradients stay fp16. ZeRO keeps them in the
  // training dtype.
  const bool fp32_gradients = config.plan.system == ShardingSystem::megatron && !config.training.fp16;
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
  if (model.tied_embeddings && mp.pipeline > 1) {
    // The last stage keeps its own copy of the word embedding for the LM head.
    partition.tied_embedding_parameters = static_cast<double>(model.vocab * model.hidden) / mp.tensor;
    partition.stage_parameters.back() += partition.tied_embedding_parameters;
  }
  return partition;
}

std::vector<MemoryBreakdown> estimate_stage_memory(const StepConfig& config) {
  const ModelParallelism& mp = config.plan.model_parallel;
  const ModelParallelPartition partition = partition_model(config);
  const auto schedule = pipeline_schedule(mp.pipeline, mp.virtual_stages, static_cast<int>(partition.micro_batches),
                                          mp.microbatch_group());
  std::vector<MemoryBreakdown> stages(static_cast<std::size_t>(mp.pipeline));
  for (int stage = 0; stage < mp.pipeline; ++stage) {
    const auto& chunks = partition.chunks[static_cast<std::size_t>(stage)];
    std::vector<double> chunk_bytes(chunks.size(), 0.0);
    double working = 0;
    for (std::size_t c = 0; c < chunks.size(); ++c) {
      for (std::size_t m : chunks[c]) {
        chunk_bytes[c] += partition.modules[m].activation_bytes;
        working = std::max(working, partition.modules[m].recompute_working_bytes);
      }
    }
    double live = 0, peak = 0;
    for (const PipelinePass& pass : schedule[static_cast<std::size_t>(stage)]) {
      live += (pass.forward() ? 1 : -1) * chunk_bytes[static_cast<std::size_t>(pass.chunk)];
      peak = std::max(peak, live);
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
  Communicators comms;
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

  const auto schedule = pipeline_schedule(mp.pipeline, mp.virtual_stages, static_cast<int>(partition.micro_batches),
                                          mp.microbatch_group());
  program.programs.resize(static_cast<std::size_t>(mp.pipeline));
  for (int stage = 0; stage < mp.pipeline; ++stage) {
    StageBuilder(config, partition, comms, stage, schedule[static_cast<std::size_t>(stage)],
                 program.programs[static_cast<std::size_t>(stage)])
        .build();
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
  if (mp.microbatch_group_size) program.description["microbatch_group_size"] = *mp.microbatch_group_size;
  if (mp.rank_order == RankOrder::tp_cp_pp_dp) program.description["rank_order"] = "tp-cp-pp-dp";
  program.description["sequence_parallel"] = mp.sequence_parallel;
  program.description["tp_comm_overlap"] = mp.tp_comm_overlap;
  if (!mp.gradient_accumulation_fusion) program.description["gradient_accumulation_fusion"] = false;
  if (partition.boundary_gather_bytes > 0) program.description["scatter_gather_pipeline_tensors"] = true;
  program.description["distributed_optimizer"] = partition.factors.optimizer > 1;
  if (partition.experts_apart) program.description["experts"] = expert_description(config.plan, partition.expert_factors);
  if (comms.shared_expert_stream >= 0) program.description["shared_expert_overlap"] = true;
  return program;
}

}  // namespace shardsim::workloads
