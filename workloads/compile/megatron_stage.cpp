#include "workloads/compile/megatron_stage.h"

#include "workloads/compile/combined_1f1b.h"
#include "workloads/compile/pipeline_stage_writer.h"
#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/memory/memory_model.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace shardsim::workloads {

namespace {

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
  // `steps`: the stage's passes, one per step unless the plan overlaps the
  // expert-parallel all-to-alls (combined 1F1B, combined_1f1b.h).
  StageBuilder(const StepConfig& config, const ModelParallelPartition& partition, const MegatronCommunicators& comms,
               int stage, const std::vector<CombinedStep>& steps, RankProgram& program)
      : PipelineStageWriter(program, compute_stream,
                            {activation_send_stream, activation_receive_stream, gradient_send_stream,
                             gradient_receive_stream},
                            config.plan.model_parallel, partition, comms.pipeline, stage),
        config_(config),
        comms_(comms),
        steps_(steps),
        combined_(config.plan.experts.overlap_expert_parallel_comm),
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
  // What a pass's pipeline send waits for: its results, and what it
  // received but no kernel took (a layout's empty virtual stage passes its
  // input straight on).
  std::vector<OpIndex> after_pass(const std::vector<OpIndex>& unused) const {
    std::vector<OpIndex> after = after_results();
    after.insert(after.end(), unused.begin(), unused.end());
    return after;
  }

  // Model-parallel calls of a kernel list go over the tensor-, the context-
  // or the expert-parallel group (plans refuse DeepSpeed-Ulysses with
  // Megatron-LM, plan.h).
  CallRoute route(CallGroup group) const;
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
  // A module's backward is done: its gradients added to the main ones (no
  // fusion), its activations freed, and, on the chunk's last micro-batch,
  // its gradients into their bucket; `chunk_done` closes every bucket.
  void module_backward_done(std::size_t module, const std::string& module_prefix, bool last_of_chunk, bool chunk_done);
  // Megatron-Core's combined 1F1B step (combined_1f1b.h).
  void combined(const CombinedStep& step);
  void close_bucket(ModuleBucket& bucket);
  void reduce_bucket(const ModuleBucket& bucket, std::vector<OpIndex> deps);
  void emit_parameter_gathers(const std::vector<OpIndex>& deps);

  const StepConfig& config_;
  const MegatronCommunicators& comms_;
  const std::vector<CombinedStep>& steps_;
  bool combined_;
  RankProgram& program_;

  std::array<ModuleBucket, 2> buckets_;  // filling, per StateGroup
  std::vector<OpIndex> reductions_;       // the optimizer waits for these
  std::vector<ModuleBucket> deferred_;  // buckets reduced after the backward
  std::vector<std::optional<OpIndex>> gather_of_module_;
  bool gather_at_start_ = false;
  std::map<std::pair<int, int>, CombinedOrder> combined_orders_;  // by (forward, backward) chunk, -1: none
};

StageBuilder::CallRoute StageBuilder::route(CallGroup group) const {
  if (group == CallGroup::tensor_parallel && comms_.tensor) return CallRoute{*comms_.tensor, tensor_stream};
  if (group == CallGroup::context_parallel && comms_.context) return CallRoute{*comms_.context, context_stream};
  if (group == CallGroup::expert_parallel && comms_.expert_parallel) {
    return CallRoute{*comms_.expert_parallel, comms_.expert_stream};
  }
  throw std::logic_error("StageBuilder: a call outside the tensor-, context- and expert-parallel groups");
}

void StageBuilder::run(const std::vector<KernelSpec>& list, const std::string& prefix, std::vector<OpIndex>& deps) {
  OpWriter::run(list, prefix, deps, [this](CallGroup group) { return route(group); });
}

void StageBuilder::forward(const PipelinePass& pass) {
  const std::string name = prefix(pass);
  std::vector<OpIndex> deps = gathered(receive_activations(pass), name + "receive_activations");
  for (std::size_t module : modules_of(pass.chunk)) {
    const ModuleWork& work = partition_.modules[module];
    if (gather_at_start_ && pass.micro_batch == 0 && gather_of_module_[module]) deps.push_back(*gather_of_module_[module]);
    memory(name + work.name + ".activations.alloc", MemoryCategory::activations, work.activation_bytes, compute_stream);
    allocate_working(name + work.name + ".", work.forward_working);
    run(work.forward, name + work.name + ".", deps);
    free_working(name + work.name + ".", work.forward_working);
  }
  send_activations(pass, after_pass(deps));
}

void StageBuilder::backward(const PipelinePass& pass, bool last_of_chunk) {
  const std::string name = prefix(pass);
  const auto& modules = modules_of(pass.chunk);
  std::vector<OpIndex> deps = gathered(receive_gradients(pass), name + "receive_gradients");
  // A layer rebuilt under full recompute lives until the layer's backward
  // is done; what selective recompute rebuilt, until its module's.
  const bool whole_layers = config_.training.recompute == Recompute::full;
  double working = 0;
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    const ModuleWork& work = partition_.modules[*it];
    const std::string module_prefix = name + work.name + ".";
    if (work.recompute_working_bytes > 0) {
      working += work.recompute_working_bytes;
      memory(module_prefix + "recompute.alloc", MemoryCategory::activations, work.recompute_working_bytes,
             compute_stream);
    }
    run(work.recompute, module_prefix + "recompute.", deps);
    allocate_working(module_prefix + "backward.", work.backward_working);
    run(work.backward, module_prefix, deps);
    free_working(module_prefix + "backward.", work.backward_working);
    const bool layer_done = std::next(it) == modules.rend() || partition_.modules[*std::next(it)].layer != work.layer;
    if (working > 0 && (layer_done || !whole_layers)) {
      memory(module_prefix + "recompute.free", MemoryCategory::activations, -std::exchange(working, 0.0), compute_stream);
    }
    module_backward_done(*it, module_prefix, last_of_chunk, *it == modules.front());
  }
  send_gradients(pass, after_pass(deps));
}

void StageBuilder::module_backward_done(std::size_t module, const std::string& module_prefix, bool last_of_chunk,
                                        bool chunk_done) {
  const ModuleWork& work = partition_.modules[module];
  if (!mp_.gradient_accumulation_fusion && work.parameters > 0) {
    std::vector<OpIndex> none;
    run({main_grad_add(work.parameters)}, module_prefix, none);
  }
  memory(module_prefix + "activations.free", MemoryCategory::activations, -work.activation_bytes, compute_stream);
  if (!last_of_chunk) return;
  if (const StateGroup group = group_of(module); reducer(group)) {
    ModuleBucket& bucket = buckets_[group];
    bucket.modules.push_back(module);
    bucket.parameters += work.parameters;
    if (partition_.gradient_bytes_per_value * bucket.parameters >= config_.plan.buckets.reduce_bytes) {
      close_bucket(bucket);
    }
  }
  if (chunk_done) {
    for (ModuleBucket& bucket : buckets_) {
      if (!bucket.modules.empty()) close_bucket(bucket);
    }
  }
}

void StageBuilder::combined(const CombinedStep& step) {
  const auto chunk_of = [this](const std::optional<PipelinePass>& pass) {
    return pass ? &modules_of(pass->chunk) : nullptr;
  };
  // Steps pairing the same chunks write the same order: made once per pair.
  const auto pair = std::pair(step.forward ? step.forward->chunk : -1, step.backward ? step.backward->chunk : -1);
  auto [cached, made] = combined_orders_.try_emplace(pair);
  if (made) {
    cached->second = combined_1f1b_order(partition_.modules, config_.model.head_layer(), chunk_of(step.forward),
                                         chunk_of(step.backward), config_.plan.experts.delay_wgrad_compute);
  }
  const CombinedOrder& order = cached->second;
  // Each pass continues from where the stage stands, and keeps its own last
  // kernel and pending calls while the two are written interleaved.
  PassState forward_state{last_compute_, blocking_}, backward_state = forward_state;
  std::vector<OpIndex> forward_deps, backward_deps;
  if (step.forward) {
    forward_deps = gathered(receive_activations(*step.forward), prefix(*step.forward) + "receive_activations");
  }
  if (step.backward) {
    backward_deps = gathered(receive_gradients(*step.backward), prefix(*step.backward) + "receive_gradients");
  }
  const bool last_of_chunk =
      step.backward && step.backward->micro_batch == static_cast<int>(partition_.micro_batches - 1);
  std::size_t modules_left = step.backward ? modules_of(step.backward->chunk).size() : 0;
  std::map<std::tuple<bool, std::size_t, KernelListKind>, ListCalls> calls;
  const auto write = [&](const KernelRange& range) {
    const PipelinePass& pass = range.forward_pass ? *step.forward : *step.backward;
    const ModuleWork& work = partition_.modules[range.module];
    if (config_.training.recompute == Recompute::full) {
      throw std::logic_error("StageBuilder: full recompute in a combined 1F1B step, which plans refuse");
    }
    std::vector<OpIndex>& deps = range.forward_pass ? forward_deps : backward_deps;
    as_pass(range.forward_pass ? forward_state : backward_state, [&] {
      const std::string module_prefix = prefix(pass) + work.name + ".";
      if (range.starts_module) {
        if (gather_at_start_ && pass.micro_batch == 0 && gather_of_module_[range.module]) {
          deps.push_back(*gather_of_module_[range.module]);
        }
        memory(module_prefix + "activations.alloc", MemoryCategory::activations, work.activation_bytes, compute_stream);
      }
      const std::vector<KernelSpec>& list = kernel_list(work, range.list);
      ListRange entries = range.entries;
      if (range.on_communication_stream) entries.kernel_stream = comms_.expert_stream;
      const auto key = std::tuple(range.forward_pass, range.module, range.list);
      auto it = calls.try_emplace(key, list).first;
      // What selective recompute rebuilds lives until the module's backward is done.
      const bool rebuilds = range.list == KernelListKind::recompute && work.recompute_working_bytes > 0;
      if (rebuilds) {
        memory(module_prefix + "recompute.alloc", MemoryCategory::activations, work.recompute_working_bytes,
               compute_stream);
      }
      // A list's working memory from its first range to its last (of a list
      // split in halves, from the input gradient's to the weight gradient's).
      static const std::vector<double> none;
      const std::vector<double>& working = range.list == KernelListKind::forward    ? work.forward_working
                                           : range.list == KernelListKind::backward ? work.backward_working
                                                                                    : none;
      const std::string working_prefix = module_prefix + (range.forward_pass ? "" : "backward.");
      using Half = ListRange::Half;
      if (range.entries.begin == 0 && range.entries.half != Half::weight_gradient) {
        allocate_working(working_prefix, working);
      }
      run_range(list, entries, range.list == KernelListKind::recompute ? module_prefix + "recompute." : module_prefix,
                deps, [this](CallGroup group) { return route(group); }, it->second);
      if (range.entries.end == list.size() && range.entries.half != Half::input_gradient) {
        free_working(working_prefix, working);
      }
      if (range.finishes_module) {
        if (work.recompute_working_bytes > 0) {
          memory(module_prefix + "recompute.free", MemoryCategory::activations, -work.recompute_working_bytes,
                 compute_stream);
        }
        module_backward_done(range.module, module_prefix, last_of_chunk, --modules_left == 0);
      }
    });
  };
  for (const KernelRange& range : order.before_sends) write(range);
  // The pipeline sends, each after its own pass's last kernel and calls.
  if (step.forward) as_pass(forward_state, [&] { send_activations(*step.forward, after_pass(forward_deps)); });
  if (step.backward) as_pass(backward_state, [&] { send_gradients(*step.backward, after_pass(backward_deps)); });
  for (const KernelRange& range : order.after_sends) write(range);
  // The stage goes on after whichever pass wrote last, waiting for what
  // either left pending.
  last_compute_ = std::max(forward_state.last_compute, backward_state.last_compute);
  blocking_ = std::move(forward_state.blocking);
  blocking_.insert(blocking_.end(), backward_state.blocking.begin(), backward_state.blocking.end());
  std::sort(blocking_.begin(), blocking_.end());
  blocking_.erase(std::unique(blocking_.begin(), blocking_.end()), blocking_.end());
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
  for (const CombinedStep& step : steps_) {
    if (combined_) {
      combined(step);
    } else if (step.forward) {
      forward(*step.forward);
    } else {
      backward(*step.backward, step.backward->micro_batch == last_micro_batch);
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

void build_megatron_stage(const StepConfig& config, const ModelParallelPartition& partition,
                          const MegatronCommunicators& comms, int stage, const std::vector<CombinedStep>& steps,
                          RankProgram& program) {
  StageBuilder(config, partition, comms, stage, steps, program).build();
}

}  // namespace shardsim::workloads
