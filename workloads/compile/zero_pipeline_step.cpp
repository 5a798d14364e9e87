#include "workloads/compile/zero_pipeline_step.h"

#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/compile/pipeline_stage_writer.h"
#include "workloads/inputs/pipeline_split.h"
#include "workloads/kernels/transformer_kernels.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace shardsim::workloads {

namespace {

enum Stream : int {
  compute_stream,
  activation_send_stream,
  activation_receive_stream,
  gradient_send_stream,
  gradient_receive_stream,
  gather_stream,
  reduce_stream,
  optimizer_stream,
  update_stream,
};

struct Communicators {
  std::optional<int> parameters, replicas, update;
  PipelineCommunicators pipeline;
};

// Passes of one stage during which a chunk's parameters are whole.
struct ParameterWindow {
  int chunk = 0;
  int unit = 0;
  std::size_t first = 0, last = 0;  // indices into the stage's passes
};

// ZeroPP's gathers: per (unit, chunk), one window over the forwards and one
// over the input gradients, merged when they overlap or only
// weight-gradient passes lie between them. Sorted by opening pass.
std::vector<ParameterWindow> parameter_windows(const std::vector<PipelinePass>& passes, int unit) {
  std::map<std::tuple<int, int, bool>, ParameterWindow> spans;  // (chunk, unit, backward)
  for (std::size_t k = 0; k < passes.size(); ++k) {
    const PipelinePass& pass = passes[k];
    if (pass.kind == PassKind::weight_gradient) continue;
    const auto [it, added] =
        spans.try_emplace({pass.chunk, pass.micro_batch / unit, !pass.forward()},
                          ParameterWindow{pass.chunk, pass.micro_batch / unit, k, k});
    it->second.last = k;
  }
  std::vector<std::size_t> needing_parameters;  // passes that are not weight gradients, in order
  for (std::size_t k = 0; k < passes.size(); ++k) {
    if (passes[k].kind != PassKind::weight_gradient) needing_parameters.push_back(k);
  }
  // Whether a pass needing parameters lies strictly between two passes.
  const auto separated = [&](std::size_t a, std::size_t b) {
    const auto it = std::upper_bound(needing_parameters.begin(), needing_parameters.end(), a);
    return it != needing_parameters.end() && *it < b;
  };
  std::vector<ParameterWindow> windows;
  for (const auto& [key, span] : spans) {  // a unit's forward window, then its backward one
    if (!windows.empty() && windows.back().chunk == span.chunk && windows.back().unit == span.unit &&
        (span.first <= windows.back().last || !separated(windows.back().last, span.first))) {
      windows.back().last = std::max(windows.back().last, span.last);
    } else {
      windows.push_back(span);
    }
  }
  std::sort(windows.begin(), windows.end(),
            [](const ParameterWindow& a, const ParameterWindow& b) { return a.first < b.first; });
  return windows;
}

// Pass times for ordering: the chunk's FLOPs in each kind of pass.
std::vector<std::vector<PassSeconds>> pass_flops(const ModelParallelPartition& partition) {
  std::vector<std::vector<PassSeconds>> seconds;
  for (const auto& stage : partition.chunks) {
    std::vector<PassSeconds>& row = seconds.emplace_back();
    for (const auto& chunk : stage) {
      PassSeconds& t = row.emplace_back(PassSeconds{0, 0, 0});
      for (std::size_t m : chunk) {
        const ModuleWork& work = partition.modules[m];
        for (const KernelSpec& spec : work.forward) t.forward += spec.flops;
        for (const KernelSpec& spec : work.recompute) t.input_gradient += spec.flops;
        for (const KernelSpec& spec : work.backward) (spec.weight_gradient ? t.weight_gradient : t.input_gradient) += spec.flops;
      }
    }
  }
  return seconds;
}

class StageBuilder : PipelineStageWriter {
 public:
  StageBuilder(const StepConfig& config, const ModelParallelPartition& partition, const Communicators& comms,
               int stage, const std::vector<PipelinePass>& passes, RankProgram& program)
      : PipelineStageWriter(program, compute_stream,
                            {activation_send_stream, activation_receive_stream, gradient_send_stream,
                             gradient_receive_stream},
                            config.plan.model_parallel, partition, comms.pipeline, stage),
        config_(config),
        factors_(partition.factors),
        comms_(comms),
        passes_(passes),
        program_(program),
        e_(config.training.bytes_per_value),
        embedding_copy_user_(first_borrower(partition.modules)) {}

  void build();

 private:
  // Parameters to gather and reduce for a module: the last stage's copy of
  // the embedding goes with the first module that uses it, an MTP depth's
  // input or the head of a tied model.
  double parameters_of(std::size_t module) const {
    return partition_.modules[module].parameters +
           (module == embedding_copy_user_ ? partition_.tied_embedding_parameters : 0.0);
  }
  static std::size_t first_borrower(const std::vector<ModuleWork>& modules) {
    const auto it = std::find_if(modules.begin(), modules.end(),
                                 [](const ModuleWork& m) { return m.layer >= 0 && !m.borrowed_tensors.empty(); });
    return static_cast<std::size_t>(it - modules.begin());
  }
  // What a module's first kernel in pass k waits for: its gather, when pass
  // k opens a window, or else the update of the previous step.
  std::vector<OpIndex> parameters_ready(std::size_t k, std::size_t module);

  void plan_windows();
  void issue_gather(std::size_t window);
  void forward(const PipelinePass& pass, std::size_t k);
  void input_gradient(const PipelinePass& pass, std::size_t k);
  void weight_gradient(const PipelinePass& pass, std::size_t k);
  void reduce_bucket(bool last_unit);
  void reduce_over_replicas(const std::string& name, double shard_bytes, std::vector<OpIndex> deps);
  void emit_update(const std::vector<OpIndex>& deps);

  const StepConfig& config_;
  const ShardingFactors& factors_;
  const Communicators& comms_;
  const std::vector<PipelinePass>& passes_;
  RankProgram& program_;
  double e_;
  std::size_t embedding_copy_user_;  // modules.size() when no module borrows the embedding

  std::vector<ParameterWindow> windows_;
  std::vector<std::vector<std::size_t>> issue_at_;  // per pass: windows whose gathers are issued before it
  std::vector<std::optional<std::size_t>> opens_;   // per pass: the window it opens
  std::vector<std::vector<std::size_t>> closes_;    // per pass: windows freed after it
  std::vector<std::vector<std::optional<OpIndex>>> gather_;  // [window][module]
  std::vector<std::optional<OpIndex>> update_of_module_;
  bool update_at_start_ = false;

  // Per (unit, chunk): the weight-gradient passes that open and close it.
  std::map<std::pair<int, int>, std::pair<std::size_t, std::size_t>> weight_passes_;
  std::vector<std::size_t> bucket_;
  double bucket_parameters_ = 0;
  std::vector<OpIndex> reductions_;          // the optimizer waits for these
  struct DeferredBucket {
    std::string name;
    double shard_bytes = 0;
    std::optional<OpIndex> after;
  };
  std::vector<DeferredBucket> deferred_;
};

void StageBuilder::plan_windows() {
  const std::size_t n = passes_.size();
  issue_at_.assign(n, {});
  opens_.assign(n, std::nullopt);
  closes_.assign(n, {});
  if (!comms_.parameters) return;
  windows_ = parameter_windows(passes_, mp_.scheduling_unit);
  gather_.assign(windows_.size(), std::vector<std::optional<OpIndex>>(partition_.modules.size()));
  for (std::size_t w = 0; w < windows_.size(); ++w) {
    opens_[windows_[w].first] = w;
    closes_[windows_[w].last].push_back(w);
    const bool prefetch = config_.plan.overlap.gather_scatter && w > 0;
    issue_at_[prefetch ? windows_[w - 1].first : windows_[w].first].push_back(w);
  }
}

// A window's all-gathers, in buckets of whole modules in the order the
// window first runs them; the gathered copy (less the GPU's own shard) is
// allocated when the gather is issued, after what the compute stream freed.
void StageBuilder::issue_gather(std::size_t w) {
  const ParameterWindow& window = windows_[w];
  const bool backward = !passes_[window.first].forward();
  std::vector<std::size_t> order = modules_of(window.chunk);
  if (backward) std::reverse(order.begin(), order.end());
  const std::string name = "gather." + std::to_string(w) + ".";
  const double f_p = static_cast<double>(factors_.parameters);
  std::vector<std::size_t> pending;
  double pending_bytes = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    pending.push_back(order[k]);
    pending_bytes += e_ * parameters_of(order[k]);
    if (k + 1 < order.size() && pending_bytes < config_.plan.buckets.all_gather_bytes) continue;
    std::vector<OpIndex> deps;
    if (update_at_start_) {
      for (std::size_t m : pending) {
        if (update_of_module_[m]) deps.push_back(*std::exchange(update_of_module_[m], std::nullopt));
      }
    }
    const std::string bucket = name + partition_.modules[pending.front()].name + (pending.size() > 1 ? "+" : "");
    memory(bucket + ".alloc", MemoryCategory::gathered_parameters, pending_bytes * (1 - 1 / f_p), gather_stream,
           last_on_compute_stream_ ? std::vector<OpIndex>{*last_on_compute_stream_} : std::vector<OpIndex>{});
    const OpIndex op = collective(bucket + ".all_gather", CollectiveOp::all_gather, *comms_.parameters, pending_bytes,
                                  gather_stream, deps);
    for (std::size_t m : pending) gather_[w][m] = op;
    pending.clear();
    pending_bytes = 0;
  }
}

std::vector<OpIndex> StageBuilder::parameters_ready(std::size_t k, std::size_t module) {
  if (opens_[k]) {
    const std::optional<OpIndex> gathered = gather_[*opens_[k]][module];
    return gathered ? std::vector<OpIndex>{*gathered} : std::vector<OpIndex>{};
  }
  if (!comms_.parameters && update_of_module_[module]) return {*std::exchange(update_of_module_[module], std::nullopt)};
  return {};
}

void StageBuilder::forward(const PipelinePass& pass, std::size_t k) {
  const std::string name = prefix(pass);
  std::vector<OpIndex> deps = receive_activations(pass);
  for (std::size_t module : modules_of(pass.chunk)) {
    const ModuleWork& work = partition_.modules[module];
    const std::vector<OpIndex> ready = parameters_ready(k, module);
    deps.insert(deps.end(), ready.begin(), ready.end());
    memory(name + work.name + ".activations.alloc", MemoryCategory::activations, work.activation_bytes, compute_stream);
    allocate_working(name + work.name + ".", work.forward_working);
    for (const KernelSpec& spec : work.forward) kernel(spec, name + work.name + ".", std::exchange(deps, {}));
    free_working(name + work.name + ".", work.forward_working);
  }
  send_activations(pass, after_last_compute());
}

void StageBuilder::input_gradient(const PipelinePass& pass, std::size_t k) {
  const std::string name = prefix(pass);
  const auto& modules = modules_of(pass.chunk);
  std::vector<OpIndex> deps = receive_gradients(pass);
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    const ModuleWork& work = partition_.modules[*it];
    const std::string module_prefix = name + work.name + ".";
    const std::vector<OpIndex> ready = parameters_ready(k, *it);
    deps.insert(deps.end(), ready.begin(), ready.end());
    // What recompute rebuilt (a layer under full recompute, a module's parts
    // under selective) stays until the weight gradients.
    if (work.recompute_working_bytes > 0) {
      memory(module_prefix + "recompute.alloc", MemoryCategory::activations, work.recompute_working_bytes, compute_stream);
    }
    for (const KernelSpec& spec : work.recompute) kernel(spec, module_prefix + "recompute.", std::exchange(deps, {}));
    // The loss's working memory is done with once the logits' gradient is.
    allocate_working(module_prefix + "backward.", work.backward_working);
    for (const KernelSpec& spec : work.backward) {
      if (!spec.weight_gradient) kernel(spec, module_prefix, std::exchange(deps, {}));
    }
    free_working(module_prefix + "backward.", work.backward_working);
  }
  send_gradients(pass, after_last_compute());
}

void StageBuilder::weight_gradient(const PipelinePass& pass, std::size_t k) {
  const std::string name = prefix(pass);
  const int unit = pass.micro_batch / mp_.scheduling_unit;
  const auto [opening, closing] = weight_passes_.at({unit, pass.chunk});
  const bool last_unit = (unit + 1) * mp_.scheduling_unit == static_cast<int>(partition_.micro_batches);
  const auto& modules = modules_of(pass.chunk);
  const bool buffered = factors_.gradients > 1;
  if (k == opening && buffered) {
    double parameters = 0;
    for (std::size_t m : modules) parameters += parameters_of(m);
    memory(name + "gradients.alloc", MemoryCategory::communication_buffers, e_ * parameters, compute_stream);
  }
  double working = 0;
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    const ModuleWork& work = partition_.modules[*it];
    const std::string module_prefix = name + work.name + ".";
    for (const KernelSpec& spec : work.backward) {
      if (spec.weight_gradient) kernel(spec, module_prefix, {});
    }
    memory(module_prefix + "activations.free", MemoryCategory::activations, -work.activation_bytes, compute_stream);
    working += work.recompute_working_bytes;
    const bool layer_done = std::next(it) == modules.rend() || partition_.modules[*std::next(it)].layer != work.layer;
    if (working > 0 && layer_done) {
      memory(module_prefix + "recompute.free", MemoryCategory::activations, -std::exchange(working, 0.0), compute_stream);
    }
    if (k != closing) continue;
    bucket_.push_back(*it);
    bucket_parameters_ += parameters_of(*it);
    if (e_ * bucket_parameters_ >= config_.plan.buckets.reduce_bytes || *it == modules.front()) reduce_bucket(last_unit);
  }
}

// A bucket of the unit's gradients: reduce-scattered into the shards over
// the parameter group, and in the last unit reduced across replicas.
void StageBuilder::reduce_bucket(bool last_unit) {
  const std::vector<std::size_t> modules = std::exchange(bucket_, {});
  const double bytes = e_ * std::exchange(bucket_parameters_, 0.0);
  const std::string name = "grad." + partition_.modules[modules.front()].name + (modules.size() > 1 ? "+" : "");
  std::optional<OpIndex> done;
  if (comms_.parameters) {
    done = collective(name + ".reduce_scatter", CollectiveOp::reduce_scatter, *comms_.parameters, bytes, reduce_stream,
                      after_last_compute());
    memory(name + ".buffer.free", MemoryCategory::communication_buffers, -bytes, reduce_stream);
    if (!config_.plan.overlap.gather_scatter) blocking_.push_back(*done);
  }
  if (!last_unit || !comms_.replicas) {
    if (last_unit && done) reductions_.push_back(*done);
    return;
  }
  const double shard_bytes = bytes / factors_.parameters;
  if (!config_.plan.overlap.optimizer_all_reduce) {
    deferred_.push_back({name, shard_bytes, done});
    return;
  }
  reduce_over_replicas(name, shard_bytes, done ? std::vector<OpIndex>{*done} : after_last_compute());
}

// Into the optimizer shards when they span the stage's data-parallel GPUs,
// else an all-reduce of the shard.
void StageBuilder::reduce_over_replicas(const std::string& name, double shard_bytes, std::vector<OpIndex> deps) {
  const bool scatter = factors_.optimizer == config_.data_parallel;
  reductions_.push_back(collective(name + (scatter ? ".replicas.reduce_scatter" : ".replicas.all_reduce"),
                                   scatter ? CollectiveOp::reduce_scatter : CollectiveOp::all_reduce, *comms_.replicas,
                                   shard_bytes, optimizer_stream, deps));
}

// The updated parameters all-gathered over the optimizer's group, in
// buckets of whole modules in forward order.
void StageBuilder::emit_update(const std::vector<OpIndex>& deps) {
  std::vector<std::size_t> order;
  for (int c = 0; c < mp_.virtual_stages; ++c) order.insert(order.end(), modules_of(c).begin(), modules_of(c).end());
  std::vector<std::size_t> pending;
  double pending_bytes = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    pending.push_back(order[k]);
    pending_bytes += e_ * parameters_of(order[k]) / factors_.parameters;
    if (k + 1 < order.size() && pending_bytes < config_.plan.buckets.all_gather_bytes) continue;
    const OpIndex op = collective("update." + partition_.modules[pending.front()].name + (pending.size() > 1 ? "+" : "") +
                                      ".all_gather",
                                  CollectiveOp::all_gather, *comms_.update, pending_bytes, update_stream, deps);
    for (std::size_t m : pending) update_of_module_[m] = op;
    pending.clear();
    pending_bytes = 0;
  }
}

void StageBuilder::build() {
  double psi = 0;
  for (int c = 0; c < mp_.virtual_stages; ++c) {
    for (std::size_t m : modules_of(c)) psi += parameters_of(m);
  }
  auto& resident = program_.resident_bytes;
  resident[static_cast<std::size_t>(MemoryCategory::parameters)] = e_ * psi / factors_.parameters;
  resident[static_cast<std::size_t>(MemoryCategory::gradients)] = e_ * psi / factors_.gradients;
  resident[static_cast<std::size_t>(MemoryCategory::optimizer_states)] =
      kOptimizerStateBytesPerParameter * psi / factors_.optimizer;

  for (std::size_t k = 0; k < passes_.size(); ++k) {
    const PipelinePass& pass = passes_[k];
    if (pass.kind != PassKind::weight_gradient) continue;
    const auto [it, added] = weight_passes_.try_emplace({pass.micro_batch / mp_.scheduling_unit, pass.chunk}, k, k);
    it->second.second = k;
  }
  update_of_module_.assign(partition_.modules.size(), std::nullopt);
  update_at_start_ = comms_.update && config_.plan.overlap.parameter_broadcast;
  if (update_at_start_) emit_update({});
  plan_windows();

  for (std::size_t k = 0; k < passes_.size(); ++k) {
    for (std::size_t w : issue_at_[k]) issue_gather(w);
    const PipelinePass& pass = passes_[k];
    switch (pass.kind) {
      case PassKind::forward: forward(pass, k); break;
      case PassKind::input_gradient: input_gradient(pass, k); break;
      case PassKind::weight_gradient: weight_gradient(pass, k); break;
      case PassKind::backward: throw std::logic_error("zero_pipeline: a whole backward in a unit schedule");
    }
    for (std::size_t w : closes_[k]) {
      double parameters = 0;
      for (std::size_t m : modules_of(windows_[w].chunk)) parameters += parameters_of(m);
      memory("gather." + std::to_string(w) + ".free", MemoryCategory::gathered_parameters,
             -e_ * parameters * (1 - 1.0 / factors_.parameters), compute_stream);
    }
  }
  for (const DeferredBucket& bucket : deferred_) {
    std::vector<OpIndex> deps = after_last_compute();
    if (bucket.after) deps.push_back(*bucket.after);
    reduce_over_replicas(bucket.name, bucket.shard_bytes, std::move(deps));
  }
  if (comms_.pipeline.embedding && (stage_ == 0 || stage_ == mp_.pipeline - 1)) {
    reductions_.push_back(collective("grad.tied_embedding.all_reduce", CollectiveOp::all_reduce, *comms_.pipeline.embedding,
                                     e_ * partition_.tied_embedding_parameters / factors_.parameters, reduce_stream,
                                     after_last_compute()));
  }
  std::vector<OpIndex> before_optimizer = reductions_;
  before_optimizer.insert(before_optimizer.end(), blocking_.begin(), blocking_.end());
  blocking_.clear();
  kernel(optimizer_step({.shard_parameters = psi / factors_.optimizer,  // gradients in the training dtype, as ZeRO's
                         .gradient_bytes_per_value = e_,
                         .weight_bytes_per_value = e_,
                         .loss_scaling = config_.training.fp16}),
         "", std::move(before_optimizer));
  if (comms_.update && !update_at_start_) emit_update({*last_compute_});
}

}  // namespace

Program compile_zero_pipeline_step(const StepConfig& config) {
  const ModelParallelism& mp = config.plan.model_parallel;
  const int d = config.data_parallel, p = mp.pipeline;
  const ModelParallelLayout layout{1, d, p};
  const ModelParallelPartition partition = partition_model(config);
  const ShardingFactors& f = partition.factors;

  Program program;
  program.ranks = layout.ranks();
  program.streams = {"compute",          "activation_send", "activation_receive", "gradient_send",   "gradient_receive",
                     "parameter_gather", "gradient_reduce", "optimizer_reduce",   "parameter_update"};
  Communicators comms;
  const auto add = [&](Communicator communicator) {
    program.communicators.push_back(std::move(communicator));
    return static_cast<int>(program.communicators.size() - 1);
  };
  const int fp = f.parameters, fos = f.optimizer;
  if (fp > 1) {
    comms.parameters = add(make_communicator("parameters", layout.ranks(), [&layout, fp](int r) {
      return std::pair(layout.pp(r), layout.dp(r) / fp);
    }));
  }
  if (d / fp > 1) {
    comms.replicas = add(make_communicator("parameter_replicas", layout.ranks(), [&layout, fp](int r) {
      return std::pair(layout.pp(r), layout.dp(r) % fp);
    }));
  }
  if (fos / fp > 1) {
    comms.update = add(make_communicator("parameter_update", layout.ranks(), [&layout, fp, fos](int r) {
      return std::tuple(layout.pp(r), layout.dp(r) / fos, layout.dp(r) % fp);
    }));
  }
  comms.pipeline = add_pipeline_communicators(program, layout, mp.virtual_stages, partition.tied_embedding_parameters > 0);

  // A deferred weight-gradient pass holds the layers its input-gradient pass
  // rebuilt under full recompute: then each runs before the next B.
  const int pending_weight_passes = config.training.recompute == Recompute::full ? 1 : 0;
  const auto schedule = unit_schedule(p, mp.virtual_stages, static_cast<int>(partition.micro_batches),
                                      mp.scheduling_unit, pass_flops(partition), pending_weight_passes);
  program.programs.resize(static_cast<std::size_t>(p));
  for (int stage = 0; stage < p; ++stage) {
    StageBuilder(config, partition, comms, stage, schedule[static_cast<std::size_t>(stage)],
                 program.programs[static_cast<std::size_t>(stage)])
        .build();
  }
  program.program_of_rank = stage_of_rank(layout);

  program.description = step_description(config, f, partition.micro_batches);
  program.description["behaviour"] = "ideal";
  program.description["overlap"] = {{"gather_scatter", config.plan.overlap.gather_scatter},
                                    {"optimizer_all_reduce", config.plan.overlap.optimizer_all_reduce},
                                    {"parameter_broadcast", config.plan.overlap.parameter_broadcast}};
  program.description["pipeline_parallel"] = p;
  program.description["virtual_stages"] = mp.virtual_stages;
  if (uneven_pipeline(mp)) program.description["virtual_stage_layers"] = partition.virtual_stage_layers;
  if (mp.layout) program.description["pipeline_layout"] = *mp.layout;
  program.description["scheduling_unit"] = mp.scheduling_unit;
  return program;
}

std::vector<MemoryBreakdown> estimate_zero_pipeline_memory(const StepConfig& config) {
  const Program program = compile_zero_pipeline_step(config);
  std::vector<MemoryBreakdown> stages;
  for (const RankProgram& stage : program.programs) {
    std::vector<double> held = stage.resident_bytes, at_peak = held;
    double total = 0, peak = 0;
    for (double bytes : held) total += bytes;
    peak = total;
    for (const Op& op : stage.ops) {
      if (op.kind != OpKind::memory) continue;
      held[static_cast<std::size_t>(op.memory)] += op.bytes;
      total += op.bytes;
      if (total > peak) {
        peak = total;
        at_peak = held;
      }
    }
    const auto of = [&](MemoryCategory category) { return at_peak[static_cast<std::size_t>(category)]; };
    MemoryBreakdown& memory = stages.emplace_back();
    memory.parameters = of(MemoryCategory::parameters);
    memory.gradients = of(MemoryCategory::gradients);
    memory.optimizer_states = of(MemoryCategory::optimizer_states);
    memory.activations = of(MemoryCategory::activations);
    memory.gathered_parameters = of(MemoryCategory::gathered_parameters);
    memory.communication_buffers = of(MemoryCategory::communication_buffers);
  }
  return stages;
}

}  // namespace shardsim::workloads
