#include "workloads/compile/data_parallel_step.h"

#include "topology/base/json_input.h"
#include "workloads/compile/op_writer.h"
#include "workloads/kernels/kernel_specs.h"
#include "workloads/kernels/transformer_kernels.h"
#include "workloads/kernels/zero_plus_plus_quantization.h"
#include "workloads/memory/memory_model.h"
#include "workloads/memory/parameter_fetch.h"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace shardsim::workloads {

namespace {

// all_to_all_stream: the MoE dispatch and combine, or DeepSpeed-Ulysses' exchanges (never both, plan.h).
enum Stream : int { compute_stream, gather_stream, reduce_stream, optimizer_stream, update_stream, all_to_all_stream };

class StepBuilder : OpWriter {
 public:
  StepBuilder(const StepConfig& config, Program& program)
      : OpWriter(program.programs.front(), compute_stream),
        config_(config),
        program_(program),
        n_(config.data_parallel),
        e_(config.training.bytes_per_value),
        g_(config.plan.reduce_dtype == GradientReduceDtype::fp32 ? kFloat32Bytes : e_),
        per_parameter_copies_(behaviour_of(config.plan.system).per_parameter_copies) {}

  void build();
  const ShardingFactors& factors() const { return dense_.factors; }
  const ExpertShardingFactors& expert_factors() const { return expert_factors_; }
  std::int64_t accumulation() const { return accumulation_; }

 private:
  struct Communicators {
    std::optional<int> parameters, secondary, gradient_shards, replicas, update;
  };

  // The model states of one kind of module and the ranks they are sharded
  // over: the dense modules' over every rank, a MoE model's routed experts'
  // over their expert-data-parallel group when the plan splits the experts
  // (plan.h).
  struct StateGroup {
    int size = 1;
    ShardingFactors factors;
    int secondary_group = 1;  // ZeRO++ hpZ
    Communicators comms;
    double parameters = 0;    // this rank's, of the group's modules, unsharded
  };
  // A rank's group of a state kind (one of N / size) and its place in it.
  struct GroupSlot {
    int group = 0;
    int position = 0;
  };

  template <typename Key>
  std::optional<int> communicator(const std::string& name, int group_size, Key key) {
    if (group_size <= 1) return std::nullopt;
    program_.communicators.push_back(make_communicator(name, n_, key));
    return static_cast<int>(program_.communicators.size() - 1);
  }

  const StateGroup& states_of(std::size_t module) const {
    return modules_[module].routed_experts && config_.plan.experts.parallel > 1 ? experts_ : dense_;
  }
  template <typename Slot>
  void make_communicators(StateGroup& states, const std::string& prefix, Slot slot);
  GroupSlot expert_slot(int rank) const;
  void make_expert_groups();
  CallRoute route(CallGroup group) const;
  void set_resident_memory();
  void schedule_parameter_fetches();
  void emit_parameter_update(const std::vector<OpIndex>& deps);
  void emit_group_update(const StateGroup& states, const std::vector<std::size_t>& modules,
                         const std::vector<OpIndex>& deps);
  void forward(int micro_batch);
  void backward(int micro_batch, bool last);
  void flush_gradient_bucket(int micro_batch, bool last);
  OpIndex quantized_reduce(const std::string& name, double elements, std::vector<OpIndex> deps);
  OpIndex reduce_scatter_gradients(const std::string& name, const StateGroup& states, int communicator,
                                   const std::vector<std::size_t>& modules, double bytes, int stream,
                                   std::vector<OpIndex> deps);
  OpIndex reduce_over_replicas(const std::string& name, const StateGroup& states,
                               const std::vector<std::size_t>& modules, double shard_bytes, int stream,
                               std::vector<OpIndex> deps);
  void gather(std::size_t module, const std::string& prefix, int communicator_index, double group_size,
              std::vector<OpIndex> deps);
  void issue_gathers(std::size_t entry, const std::string& prefix);
  void copy_out_gathered(std::size_t entry, const std::string& prefix);
  void free_gathered(std::size_t entry, const std::string& prefix);
  std::vector<OpIndex> gathers_of(std::size_t entry) const;

  const StepConfig& config_;
  Program& program_;
  int n_;
  double e_;
  double g_;  // bytes per gradient value as reduced (Plan::reduce_dtype)
  bool per_parameter_copies_;  // FSDP2's copy-out after a gather and copy-in before a reduce-scatter
  StateGroup dense_, experts_;
  ExpertShardingFactors expert_factors_;
  std::optional<int> expert_parallel_;  // the MoE all-to-all communicator
  std::optional<int> ulysses_;          // DeepSpeed-Ulysses' all-to-all communicator
  // A collective over blocks of ranks that span several whole nodes, in two
  // hops: among each block's ranks with the same place in their nodes, and
  // among each node's ranks.
  struct TwoHopGroups {
    std::optional<int> inter_node, intra_node;
    explicit operator bool() const { return inter_node.has_value(); }
  };
  TwoHopGroups two_hop_groups(const std::string& prefix, bool wanted, int block);
  TwoHopGroups qgz_;                  // ZeRO++ qgZ's all-to-alls, over every rank
  TwoHopGroups hierarchical_gather_;  // MiCS's parameter gathers, over its group
  std::vector<ModuleWork> modules_;
  std::vector<double> module_offset_;  // first element of each module in its state group's flat buffer
  std::int64_t accumulation_ = 1;
  bool update_at_start_ = false;

  std::vector<std::optional<OpIndex>> update_of_module_;
  ParameterFetches fetch_;                        // one micro-batch's gathers and frees (parameter_fetch.h)
  std::vector<double> gathered_bytes_;            // per module: what its live gather holds
  std::vector<std::optional<OpIndex>> gathered_;  // latest all-gather of each module in this micro-batch
  std::vector<std::optional<OpIndex>> copied_out_;  // the gather each module's FSDP2 copy-out last followed
  std::vector<std::optional<OpIndex>> activation_alloc_;
  std::vector<std::size_t> bucket_;               // modules whose gradients wait to be reduced
  std::vector<OpIndex> last_reductions_;          // the optimizer waits for these
  // Last-micro-batch buckets whose replica reduction waits for the end of the
  // backward (optimizer_all_reduce off): modules, whether the reduction frees
  // their gradient buffer, and the reduction it must follow.
  struct DeferredBucket {
    std::vector<std::size_t> modules;
    bool frees_buffer = false;
    std::optional<OpIndex> after;
  };
  std::vector<DeferredBucket> deferred_buckets_;
};

// The factors' groups are blocks of consecutive places within each group of
// `slot` (rank -> GroupSlot).
template <typename Slot>
void StepBuilder::make_communicators(StateGroup& states, const std::string& prefix, Slot slot) {
  const int fp = states.factors.parameters, fg = states.factors.gradients, fos = states.factors.optimizer;
  const int k = states.secondary_group;
  const auto group = [&slot](int r) { return slot(r).group; };
  const auto at = [&slot](int r) { return slot(r).position; };
  states.comms.parameters = communicator(prefix + "parameters", fp, [&](int r) { return std::pair(group(r), at(r) / fp); });
  states.comms.secondary =
      communicator(prefix + "secondary_parameters", k, [&](int r) { return std::pair(group(r), at(r) / k); });
  states.comms.gradient_shards = communicator(prefix + "gradient_shards", fg / fp, [&](int r) {
    return std::tuple(group(r), at(r) / fg, at(r) % fp);
  });
  states.comms.replicas =
      communicator(prefix + "parameter_replicas", states.size / fp, [&](int r) { return std::pair(group(r), at(r) % fp); });
  states.comms.update = communicator(prefix + "parameter_update", fos / fp, [&](int r) {
    return std::tuple(group(r), at(r) / fos, at(r) % fp);
  });
}

// Under expert parallelism: the routed experts' state group, one per expert-
// parallel position, and the all-to-all communicator (topology/placement.h).
void StepBuilder::make_expert_groups() {
  const Plan& plan = config_.plan;
  const int ep = plan.experts.parallel;
  expert_factors_ = resolve_expert_factors(plan, config_.model.routed_experts(), dense_.factors,
                                           n_, config_.plan_file);
  if (ep <= 1) return;
  experts_.size = expert_factors_.data_parallel;
  experts_.factors = expert_factors_.factors;
  experts_.secondary_group = expert_factors_.secondary_group;
  make_communicators(experts_, "expert_", [this](int r) { return expert_slot(r); });
  // An all-to-all group holds one rank of each expert-data-parallel group, the same place in each.
  expert_parallel_ = communicator("expert_parallel", ep, [this](int r) { return expert_slot(r).position; });
}

// A rank's expert-data-parallel group is the expert position it holds; its
// place there, its replica (topology/placement.h).
StepBuilder::GroupSlot StepBuilder::expert_slot(int rank) const {
  const topology::MoeSlot slot = topology::moe_slot(rank, n_, config_.plan.experts.parallel, config_.plan.experts.layout);
  return {slot.expert, slot.replica};
}

OpWriter::CallRoute StepBuilder::route(CallGroup group) const {
  const std::optional<int>& communicator = group == CallGroup::expert_parallel   ? expert_parallel_
                                           : group == CallGroup::sequence_parallel ? ulysses_
                                                                                   : std::optional<int>{};
  if (!communicator) throw std::logic_error("StepBuilder: a model-parallel call without its group");
  return {*communicator, all_to_all_stream};
}

void StepBuilder::set_resident_memory() {
  const MemoryBreakdown states =
      estimate_memory(config_.model, config_.training, config_.plan, dense_.factors, config_.data_parallel, expert_factors_);
  auto& resident = program_.programs.front().resident_bytes;
  resident[static_cast<std::size_t>(MemoryCategory::parameters)] = states.parameters;
  resident[static_cast<std::size_t>(MemoryCategory::secondary_parameters)] = states.secondary_parameters;
  resident[static_cast<std::size_t>(MemoryCategory::gradients)] = states.gradients;
  resident[static_cast<std::size_t>(MemoryCategory::optimizer_states)] = states.optimizer_states;
}

void StepBuilder::emit_parameter_update(const std::vector<OpIndex>& deps) {
  for (const StateGroup* states : {&dense_, &experts_}) {
    std::vector<std::size_t> modules;
    for (std::size_t module = 0; module < modules_.size(); ++module) {
      if (&states_of(module) == states) modules.push_back(module);
    }
    if (!modules.empty()) emit_group_update(*states, modules, deps);
  }
}

void StepBuilder::emit_group_update(const StateGroup& states, const std::vector<std::size_t>& modules,
                                    const std::vector<OpIndex>& deps) {
  if (!states.comms.update) return;
  const int communicator = *states.comms.update;
  const double per_shard = e_ / states.factors.parameters;
  const int group = program_.communicators[static_cast<std::size_t>(communicator)].group_size();
  if (behaviour_of(config_.plan.system).whole_module_updates) {
    // Inter-tensor sharding: whole modules assigned greedily (largest first)
    // to the least-loaded rank of the group, which broadcasts them.
    std::vector<std::size_t> order = modules;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return modules_[a].parameters > modules_[b].parameters; });
    std::vector<double> load(static_cast<std::size_t>(group), 0.0);
    std::vector<int> owner(modules_.size(), 0);
    for (std::size_t module : order) {
      const auto least = std::min_element(load.begin(), load.end());
      owner[module] = static_cast<int>(least - load.begin());
      *least += modules_[module].parameters;
    }
    for (std::size_t module : modules) {
      update_of_module_[module] = collective("update." + modules_[module].name, CollectiveOp::broadcast, communicator,
                                             modules_[module].parameters * per_shard, update_stream, deps, owner[module]);
    }
    return;
  }
  // The other systems partition flat buffers: all-gathers, in buckets of
  // all_gather_bytes unless the plan gathers everything in one call.
  std::vector<std::size_t> pending;
  double pending_bytes = 0;
  const double limit = config_.plan.flat_all_gather ? 0 : config_.plan.buckets.all_gather_bytes;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const std::size_t module = modules[i];
    pending.push_back(module);
    pending_bytes += modules_[module].parameters * per_shard;
    const bool last = i + 1 == modules.size();
    if (last || (limit > 0 && pending_bytes >= limit)) {
      const OpIndex op = collective("update." + modules_[pending.front()].name + (pending.size() > 1 ? "+" : ""),
                                    CollectiveOp::all_gather, communicator, pending_bytes, update_stream, deps);
      for (std::size_t m : pending) update_of_module_[m] = op;
      pending.clear();
      pending_bytes = 0;
    }
  }
}

void StepBuilder::gather(std::size_t module, const std::string& prefix, int communicator_index, double group_size,
                         std::vector<OpIndex> deps) {
  const ModuleWork& work = modules_[module];
  if (update_of_module_[module] && update_at_start_) deps.push_back(*update_of_module_[module]);
  gathered_bytes_[module] = e_ * fetch_.elements[module] * (1 - 1 / group_size);
  // Allocated when the framework issues the gather, after it has released
  // what the previous module freed (PyTorch's allocator works in host order),
  // not when the gather stream gets to it.
  std::vector<OpIndex> after_frees;
  if (last_on_compute_stream_) after_frees.push_back(*last_on_compute_stream_);
  memory(prefix + "gather." + work.name + ".alloc", MemoryCategory::gathered_parameters, gathered_bytes_[module],
         gather_stream, std::move(after_frees));
  if (hierarchical_gather_ && communicator_index == *dense_.comms.parameters) {
    // MiCS's two hops: each GPU first gathers the shards of its peers in the
    // other nodes (1/G of the module), then the node gathers those.
    const double bytes = e_ * fetch_.elements[module];
    const OpIndex across =
        collective(prefix + "all_gather." + work.name + ".inter_node", CollectiveOp::all_gather,
                   *hierarchical_gather_.inter_node, bytes / config_.gpus_per_node, gather_stream, deps);
    gathered_[module] = collective(prefix + "all_gather." + work.name + ".intra_node", CollectiveOp::all_gather,
                                   *hierarchical_gather_.intra_node, bytes, gather_stream, {across});
    return;
  }
  if (!config_.plan.quantized_weights) {
    gathered_[module] = collective(prefix + "all_gather." + work.name, CollectiveOp::all_gather, communicator_index,
                                   e_ * fetch_.elements[module], gather_stream, deps);
    return;
  }
  // ZeRO++ qwZ: int8 on the wire, (de)quantized on the gather stream.
  const double elements = fetch_.elements[module];
  const OpIndex quantized = add(kernel_op(weight_quantize(elements / group_size, e_), gather_stream),
                                prefix + work.name + ".qwz.quantize", deps);
  const OpIndex gathered = collective(prefix + "all_gather." + work.name, CollectiveOp::all_gather, communicator_index,
                                      kQuantizedWeightBytesPerElement * elements, gather_stream, {quantized});
  gathered_[module] = add(kernel_op(weight_dequantize(elements, e_), gather_stream),
                          prefix + work.name + ".qwz.dequantize", {gathered});
}

// The gathers the fetch schedule issues as entry t starts: over the
// secondary (hpZ) group when issued in the backward, named after the use
// they serve.
void StepBuilder::issue_gathers(std::size_t t, const std::string& prefix) {
  for (const FetchSchedule::Gather& g : fetch_.schedule.gather_at[t]) {
    const StateGroup& states = states_of(g.module);
    const int group = gather_group(states.factors.parameters, states.secondary_group, fetch_.entries[t].backward);
    const int communicator = group == states.factors.parameters ? *states.comms.parameters : *states.comms.secondary;
    gather(g.module, prefix + (g.serves_backward ? "backward." : ""), communicator, static_cast<double>(group),
           after_last_compute());
  }
}

void StepBuilder::free_gathered(std::size_t t, const std::string& prefix) {
  for (std::size_t m : fetch_.schedule.free_after[t]) {
    memory(prefix + (fetch_.entries[t].backward ? "backward." : "") + "gather." + modules_[m].name + ".free",
           MemoryCategory::gathered_parameters, -gathered_bytes_[m], compute_stream);
  }
}

std::vector<OpIndex> StepBuilder::gathers_of(std::size_t t) const {
  std::vector<OpIndex> deps;
  for (std::size_t m : fetch_.entries[t].modules) {
    if (gathered_[m]) deps.push_back(*gathered_[m]);
  }
  return deps;
}

// FSDP2 (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
// foreach_all_gather_copy_out): the module's pre-forward (or pre-backward)
// hook waits for its gather, then split_with_sizes_copy moves the flat
// all-gather output into the unsharded parameters on the compute stream:
// each gathered value read and written once.
void StepBuilder::copy_out_gathered(std::size_t t, const std::string& prefix) {
  if (!per_parameter_copies_) return;
  for (std::size_t m : fetch_.entries[t].modules) {
    if (!gathered_[m] || copied_out_[m] == gathered_[m] || fetch_.elements[m] <= 0) continue;
    kernel(memory_pass("gather." + modules_[m].name + ".copy_out", value_dtype(config_.training), fetch_.elements[m],
                       2 * e_),
           prefix + (fetch_.entries[t].backward ? "backward." : ""), {*gathered_[m]});
    copied_out_[m] = gathered_[m];
  }
}

void StepBuilder::forward(int micro_batch) {
  const std::string prefix = "mb" + std::to_string(micro_batch) + ".";
  std::fill(gathered_.begin(), gathered_.end(), std::nullopt);
  for (std::size_t module = 0; module < modules_.size(); ++module) {
    const std::size_t t = module;  // forward entries are the modules in order
    const ModuleWork& work = modules_[module];
    issue_gathers(t, prefix);
    copy_out_gathered(t, prefix);
    std::vector<OpIndex> deps = gathers_of(t);
    if (micro_batch == 0 && update_at_start_ && update_of_module_[module]) deps.push_back(*update_of_module_[module]);
    activation_alloc_[module] = memory(prefix + work.name + ".activations.alloc", MemoryCategory::activations,
                                       work.activation_bytes, compute_stream);
    allocate_working(prefix + work.name + ".", work.forward_working);
    run(work.forward, prefix + work.name + ".", deps, [this](CallGroup group) { return route(group); });
    free_working(prefix + work.name + ".", work.forward_working);
    free_gathered(t, prefix);
  }
}

void StepBuilder::backward(int micro_batch, bool last) {
  const std::string prefix = "mb" + std::to_string(micro_batch) + ".";
  const auto routed = [this](CallGroup group) { return route(group); };
  for (std::size_t t = modules_.size(); t < fetch_.entries.size(); ++t) {
    const std::vector<std::size_t>& group = fetch_.entries[t].modules;
    issue_gathers(t, prefix);
    copy_out_gathered(t, prefix);
    std::vector<OpIndex> deps = gathers_of(t);
    // Recompute (the whole layer under full recompute, a module's parts under
    // selective recompute), held until the group's backward is done.
    double working = 0;
    for (std::size_t module : group) working += modules_[module].recompute_working_bytes;
    if (working > 0) memory(prefix + "recompute.alloc", MemoryCategory::activations, working, compute_stream);
    // The backward runs in reverse module order inside the group.
    for (auto it = group.rbegin(); it != group.rend(); ++it) {
      const std::size_t module = *it;
      const ModuleWork& work = modules_[module];
      const std::string name = prefix + work.name + ".";
      if (states_of(module).factors.gradients > 1) {
        memory(name + "gradient.alloc", MemoryCategory::communication_buffers, g_ * work.parameters, compute_stream);
      }
      run(work.recompute, name + "recompute.", deps, routed);
      allocate_working(name + "backward.", work.backward_working);
      run(work.backward, name, deps, routed);
      free_working(name + "backward.", work.backward_working);
      // From the second micro-batch on, each rank adds the new gradient into
      // the 1/f_G it keeps between micro-batches, in place: whole gradients
      // (f_G 1) are PyTorch's param.grad, which AccumulateGrad adds into
      // before any hook reduces it; a sharded one is added after its
      // reduction, on the reduction's stream, charged here to the compute
      // stream, where the Program's kernels run; a reduced shard is in the
      // reduce dtype.
      if (micro_batch > 0 && work.parameters > 0) {
        const int f_g = states_of(module).factors.gradients;
        const double bytes = f_g > 1 ? g_ : e_;
        run({gradient_add("grad.accumulate", value_dtype(config_.training), work.parameters / f_g, bytes, bytes)}, name,
            deps, routed);
      }
      if (activation_alloc_[module]) {
        memory(name + "activations.free", MemoryCategory::activations, -work.activation_bytes, compute_stream);
      }
      // A bucket holds gradients of one state group: they reduce over its communicators.
      if (!bucket_.empty() && &states_of(bucket_.front()) != &states_of(module)) flush_gradient_bucket(micro_batch, last);
      bucket_.push_back(module);
      double bucket_bytes = 0;
      for (std::size_t m : bucket_) bucket_bytes += g_ * modules_[m].parameters;
      if (bucket_bytes >= config_.plan.buckets.reduce_bytes || module == 0) flush_gradient_bucket(micro_batch, last);
    }
    if (working > 0) memory(prefix + "recompute.free", MemoryCategory::activations, -working, compute_stream);
    free_gathered(t, prefix);
  }
}

// A bucket's reduction into gradient shards that partition the whole model
// over the communicator's group. DeepSpeed ZeRO-1/2 partitions one flat
// buffer of every parameter in module order, rank p owning the p-th 1/n of
// it; as implemented it sends a bucket's gradients to their owners as one
// reduce per owner the bucket covers (partitions shrink as 1/n, so the
// reduces get many and small), or, with multi-rank bucketing, all-reduces
// the bucket once and each rank keeps its part. Every other case, "ideal"
// ZeRO-1/2 included, is one reduce-scatter.
OpIndex StepBuilder::reduce_scatter_gradients(const std::string& name, const StateGroup& states, int communicator,
                                              const std::vector<std::size_t>& modules, double bytes, int stream,
                                              std::vector<OpIndex> deps) {
  const Plan& plan = config_.plan;
  const bool deepspeed_flat =
      plan.as_implemented && behaviour_of(plan.system).reduce_to_gradient_owners && states.factors.parameters == 1;
  if (!deepspeed_flat) {
    return collective(name + ".reduce_scatter", CollectiveOp::reduce_scatter, communicator, bytes, stream, deps);
  }
  if (plan.multi_rank_bucketing) {
    return collective(name + ".all_reduce", CollectiveOp::all_reduce, communicator, bytes, stream, deps);
  }
  const int n = program_.communicators[static_cast<std::size_t>(communicator)].group_size();
  double first = module_offset_[modules.front()], end = first;
  for (std::size_t m : modules) {
    first = std::min(first, module_offset_[m]);
    end = std::max(end, module_offset_[m] + modules_[m].parameters);
  }
  const double partition = states.parameters / n;
  // Owners in the order the backward produced the bucket: highest offset first.
  const int first_owner = std::min(n - 1, static_cast<int>(first / partition));
  const int last_owner = std::max(first_owner, std::min(n - 1, static_cast<int>((end - 1) / partition)));
  std::optional<OpIndex> done;
  for (int owner = last_owner; owner >= first_owner; --owner) {
    const double covered = std::min(end, (owner + 1) * partition) - std::max(first, owner * partition);
    if (covered <= 0 && (done || owner > first_owner)) continue;  // a bucket without parameters still makes one call
    done = collective(name + ".reduce_to" + std::to_string(owner), CollectiveOp::reduce, communicator,
                      g_ * std::max(covered, 0.0), stream, done ? std::vector<OpIndex>{} : std::exchange(deps, {}), owner);
  }
  return *done;
}

// The last micro-batch's reduction across parameter replicas: into the
// optimizer shards when they span every rank, else AMSP's all-reduce that
// keeps what each optimizer shard needs.
OpIndex StepBuilder::reduce_over_replicas(const std::string& name, const StateGroup& states,
                                          const std::vector<std::size_t>& modules, double shard_bytes, int stream,
                                          std::vector<OpIndex> deps) {
  if (states.factors.optimizer == states.size) {
    return reduce_scatter_gradients(name, states, *states.comms.replicas, modules, shard_bytes, stream, std::move(deps));
  }
  return collective(name + ".all_reduce", CollectiveOp::all_reduce, *states.comms.replicas, shard_bytes, stream,
                    deps);
}

void StepBuilder::flush_gradient_bucket(int micro_batch, bool last) {
  const Plan& plan = config_.plan;
  std::vector<std::size_t> modules = std::exchange(bucket_, {});
  double bytes = 0;
  for (std::size_t m : modules) bytes += g_ * modules_[m].parameters;
  const std::string name = "mb" + std::to_string(micro_batch) + ".grad." + modules_[modules.front()].name +
                           (modules.size() > 1 ? "+" : "");
  const StateGroup& states = states_of(modules.front());
  const Communicators& comms = states.comms;
  const bool overlap = plan.overlap.gather_scatter;
  const bool gradients_sharded = states.factors.gradients > 1;
  std::optional<OpIndex> done;
  std::optional<int> buffer_stream;
  if (comms.parameters && qgz_ && &states == &dense_) {
    done = quantized_reduce(name, bytes / g_, after_last_compute());
    buffer_stream = reduce_stream;
    if (!overlap || plan.as_implemented) blocking_.push_back(*done);
  } else if (comms.parameters) {
    if (per_parameter_copies_) {
      // FSDP2's foreach_reduce: the gradients chunk-cat into one flat
      // reduce-scatter input, cast to the reduce dtype, on the compute
      // stream, before the reduce-scatter stream takes it.
      kernel(memory_pass("grad.copy_in", value_dtype(config_.training), bytes / g_, e_ + g_), name + ".", {});
    }
    done = collective(name + ".reduce_scatter", CollectiveOp::reduce_scatter, *comms.parameters, bytes, reduce_stream,
                      after_last_compute());
    buffer_stream = reduce_stream;
    const bool deepspeed_blocks = plan.as_implemented && behaviour_of(plan.system).blocking_backward_reduce_scatter;
    if (!overlap || deepspeed_blocks) blocking_.push_back(*done);
  }
  const double shard_bytes = bytes / states.factors.parameters;
  if (!last && comms.gradient_shards) {
    done = reduce_scatter_gradients(name + ".shards", states, *comms.gradient_shards, modules, shard_bytes,
                                    reduce_stream, done ? std::vector<OpIndex>{*done} : after_last_compute());
    if (!buffer_stream) buffer_stream = reduce_stream;
    if (!overlap) blocking_.push_back(*done);
  }
  if (gradients_sharded && buffer_stream) {
    memory(name + ".buffer.free", MemoryCategory::communication_buffers, -bytes, *buffer_stream);
  }
  if (last && comms.replicas) {
    if (!plan.overlap.optimizer_all_reduce) {
      deferred_buckets_.push_back({std::move(modules), gradients_sharded && !buffer_stream, done});
      return;
    }
    const bool mics_blocks = plan.as_implemented && behaviour_of(plan.system).replica_reduce_on_reduce_stream;
    const int stream = mics_blocks ? reduce_stream : optimizer_stream;
    done = reduce_over_replicas(name + ".replicas", states, modules, shard_bytes, stream,
                                done ? std::vector<OpIndex>{*done} : after_last_compute());
    if (gradients_sharded && !buffer_stream) {
      memory(name + ".buffer.free", MemoryCategory::communication_buffers, -bytes, stream);
    }
  }
  if (last && done) last_reductions_.push_back(*done);
}

// ZeRO++ qgZ's replacement for the reduce-scatter over every rank
// (zero_plus_plus_quantization.h), on the reduce stream.
OpIndex StepBuilder::quantized_reduce(const std::string& name, double elements, std::vector<OpIndex> deps) {
  const QuantizedGradientReduction q = quantized_gradient_reduction(elements, e_, config_.gpus_per_node, n_);
  const OpIndex quantized = add(kernel_op(q.quantize, reduce_stream), name + "." + q.quantize.name, deps);
  const OpIndex intra = collective(name + ".qgz.intra_node.all_to_all", CollectiveOp::all_to_all, *qgz_.intra_node,
                                   q.intra_node_bytes, reduce_stream, {quantized});
  const OpIndex reduced = add(kernel_op(q.reduce, reduce_stream), name + "." + q.reduce.name, {intra});
  const OpIndex inter = collective(name + ".qgz.inter_node.all_to_all", CollectiveOp::all_to_all, *qgz_.inter_node,
                                   q.inter_node_bytes, reduce_stream, {reduced});
  return add(kernel_op(q.dequantize, reduce_stream), name + "." + q.dequantize.name, {inter});
}

// Empty unless wanted and `block` covers several whole nodes.
StepBuilder::TwoHopGroups StepBuilder::two_hop_groups(const std::string& prefix, bool wanted, int block) {
  const int per_node = config_.gpus_per_node;
  if (!wanted || block <= per_node || block % per_node != 0) return {};
  return {communicator(prefix + "inter_node", block / per_node,
                       [block, per_node](int r) { return std::pair(r / block, r % per_node); }),
          communicator(prefix + "intra_node", per_node, [per_node](int r) { return r / per_node; })};
}

void StepBuilder::build() {
  const StepConfig& c = config_;
  dense_.size = n_;
  dense_.factors = resolve_factors(c.plan, c.data_parallel, c.gpus_per_node, c.plan_file);
  dense_.secondary_group = c.plan.secondary_parameter_group;
  make_communicators(dense_, "", [](int r) { return GroupSlot{0, r}; });
  hierarchical_gather_ = two_hop_groups("parameters_", c.plan.hierarchical_parameter_gather, dense_.factors.parameters);
  make_expert_groups();
  accumulation_ = micro_batches_per_step(c);
  // DeepSpeed-Ulysses: u consecutive ranks share each micro-batch.
  const int u = c.plan.model_parallel.ulysses;
  ulysses_ = communicator("ulysses", u, [u](int r) { return r / u; });
  qgz_ = two_hop_groups("qgz_", c.plan.quantized_gradients, n_);
  modules_ = transformer_modules(c.model, c.training, c.plan.model_parallel, c.plan.experts, c.plan.kernels);
  for (std::size_t module = 0; module < modules_.size(); ++module) {
    StateGroup& states = &states_of(module) == &dense_ ? dense_ : experts_;
    module_offset_.push_back(states.parameters);
    states.parameters += modules_[module].parameters;
  }
  update_of_module_.assign(modules_.size(), std::nullopt);
  gathered_.assign(modules_.size(), std::nullopt);
  copied_out_.assign(modules_.size(), std::nullopt);
  activation_alloc_.assign(modules_.size(), std::nullopt);
  set_resident_memory();
  schedule_parameter_fetches();

  const bool deepspeed_gathers_at_end =
      c.plan.as_implemented && behaviour_of(c.plan.system).gathers_updated_parameters_at_step_end;
  update_at_start_ = (dense_.comms.update || experts_.comms.update) && c.plan.overlap.parameter_broadcast &&
                     !deepspeed_gathers_at_end;
  if (update_at_start_) emit_parameter_update({});

  for (std::int64_t micro_batch = 0; micro_batch < accumulation_; ++micro_batch) {
    const bool last = micro_batch + 1 == accumulation_;
    forward(static_cast<int>(micro_batch));
    backward(static_cast<int>(micro_batch), last);
  }
  // Replica reductions held back until the backward is over.
  for (const DeferredBucket& bucket : deferred_buckets_) {
    double bytes = 0;
    for (std::size_t m : bucket.modules) bytes += g_ * modules_[m].parameters;
    const std::string name = "grad." + modules_[bucket.modules.front()].name + (bucket.modules.size() > 1 ? "+" : "");
    std::vector<OpIndex> deps = after_last_compute();
    if (bucket.after) deps.push_back(*bucket.after);
    const StateGroup& states = states_of(bucket.modules.front());
    last_reductions_.push_back(reduce_over_replicas(name + ".replicas", states, bucket.modules,
                                                    bytes / states.factors.parameters, optimizer_stream, deps));
    if (bucket.frees_buffer) memory(name + ".buffer.free", MemoryCategory::communication_buffers, -bytes, optimizer_stream);
  }
  // This rank's optimizer shard: of the dense states, and of its experts' under expert parallelism.
  const double shard = dense_.parameters / dense_.factors.optimizer + experts_.parameters / experts_.factors.optimizer;
  // Gradients were reduced in the plan's reduce dtype; ZeRO and FSDP free
  // them rather than zeroing a buffer. Eager plans run torch.optim's foreach
  // AdamW as torchtitan does.
  const OpIndex optimizer = kernel(optimizer_step({.shard_parameters = shard,
                                                    .gradient_bytes_per_value = g_,
                                                    .weight_bytes_per_value = e_,
                                                    .loss_scaling = config_.training.fp16,
                                                    .torch_foreach = config_.plan.kernels == KernelImplementation::eager}),
                                   "", last_reductions_);
  if (!update_at_start_) emit_parameter_update({optimizer});
  // DeepSpeed ZeRO-3 gathers the updated persistent parameters at the end of
  // its step, in one call.
  if (fetch_.persistent_elements > 0) {
    collective("update.persistent.all_gather", CollectiveOp::all_gather, *dense_.comms.parameters,
               e_ * fetch_.persistent_elements, gather_stream, {optimizer});
  }
}

// Which parameters each micro-batch gathers when (parameter_fetch.h), and
// the persistent ones held whole on every GPU.
void StepBuilder::schedule_parameter_fetches() {
  const bool sharded = dense_.comms.parameters.has_value();
  fetch_ = plan_parameter_fetches(
      gathered_modules(std::vector<ModuleParameters>(modules_.begin(), modules_.end()), config_.plan,
                       experts_.factors.parameters),
      config_.model.head_layer(),
      [this](int layer) { return config_.training.reruns_whole_layer(layer); }, config_.plan, e_, sharded);
  gathered_bytes_.assign(modules_.size(), 0.0);
  if (sharded) {
    program_.programs.front().resident_bytes[static_cast<std::size_t>(MemoryCategory::gathered_parameters)] =
        e_ * fetch_.persistent_elements * (1 - 1.0 / dense_.factors.parameters);
  }
}

}  // namespace

Program compile_data_parallel_step(const StepConfig& config) {
  Program program;
  program.ranks = config.data_parallel;
  program.streams = {"compute", "parameter_gather", "gradient_reduce", "optimizer_reduce", "parameter_update"};
  if (config.plan.experts.parallel > 1) program.streams.push_back("expert_all_to_all");
  if (config.plan.model_parallel.ulysses > 1) program.streams.push_back("ulysses_all_to_all");
  program.programs.emplace_back();
  program.program_of_rank.assign(static_cast<std::size_t>(config.data_parallel), 0);
  StepBuilder builder(config, program);
  builder.build();
  program.description = step_description(config, builder.factors(), builder.accumulation());
  program.description["behaviour"] = config.plan.as_implemented ? "as_implemented" : "ideal";
  program.description["overlap"] = {{"gather_scatter", config.plan.overlap.gather_scatter},
                                    {"optimizer_all_reduce", config.plan.overlap.optimizer_all_reduce},
                                    {"parameter_broadcast", config.plan.overlap.parameter_broadcast}};
  program.description["secondary_parameter_group"] = config.plan.secondary_parameter_group;
  if (config.plan.hierarchical_parameter_gather) program.description["hierarchical_parameter_gather"] = true;
  if (config.plan.quantized_weights || config.plan.quantized_gradients) {
    program.description["quantized"] = {{"weights", config.plan.quantized_weights},
                                        {"gradients", config.plan.quantized_gradients}};
  }
  if (config.plan.experts.parallel > 1) {
    program.description["experts"] = expert_description(config.plan, builder.expert_factors());
  }
  if (config.plan.model_parallel.ulysses > 1) program.description["ulysses"] = config.plan.model_parallel.ulysses;
  return program;
}

}  // namespace shardsim::workloads
