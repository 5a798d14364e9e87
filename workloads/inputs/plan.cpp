#include "workloads/inputs/plan.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/inputs/pipeline_split.h"

#include <numeric>
#include <stdexcept>

namespace shardsim::workloads {

namespace {

// A factor: a positive integer or "all" (stored as 0).
int factor(JsonObjectReader& reader, const std::string& key) {
  const nlohmann::json& value = reader.value(key);
  if (value == "all") return 0;
  if (!value.is_number_integer() || value.get<std::int64_t>() < 1 || value.get<std::int64_t>() > kMaxGpuCount) {
    reader.fail(key, "must be a GPU count or \"all\", got " + value.dump());
  }
  return static_cast<int>(value.get<std::int64_t>());
}

// The names for a message, each between `quote`s, the last two joined by
// `last`: "zero, fsdp, mics", or "\"zero\" and \"zeropp\"".
std::string joined(const std::vector<std::string>& names, const std::string& quote = "",
                   const std::string& last = ", ") {
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + quote + names[i] + quote;
  }
  return text;
}

// A degree of parallelism: a positive integer, at most 65536.
int parallel_degree(JsonObjectReader& parallel, const std::string& key) {
  const std::int64_t value = parallel.positive_integer(key);
  if (value > (1 << 16)) parallel.fail(key, "must be at most 65536, got " + std::to_string(value));
  return static_cast<int>(value);
}

// The pipeline systems' "model_parallel" block: the pipeline, its stages'
// split, the tensor, sequence and context parallelism around it.
void read_pipeline(JsonObjectReader& parallel, ModelParallelism& mp, bool zero_pipeline) {
  if (parallel.has("ulysses")) mp.ulysses = parallel_degree(parallel, "ulysses");  // refused below
  if (!zero_pipeline || parallel.has("tensor")) mp.tensor = parallel_degree(parallel, "tensor");
  mp.pipeline = parallel_degree(parallel, "pipeline");
  if (parallel.has("virtual_stages")) mp.virtual_stages = parallel_degree(parallel, "virtual_stages");
  if (parallel.has("sequence_parallel")) mp.sequence_parallel = parallel.boolean("sequence_parallel");
  if (parallel.has("tp_comm_overlap")) mp.tp_comm_overlap = parallel.boolean("tp_comm_overlap");
  if (parallel.has("context_parallel")) mp.context = parallel_degree(parallel, "context_parallel");
  if (parallel.has("gradient_accumulation_fusion")) {
    if (zero_pipeline) parallel.fail("gradient_accumulation_fusion", "is Megatron-LM's (system \"megatron\")");
    mp.gradient_accumulation_fusion = parallel.boolean("gradient_accumulation_fusion");
  }
  if (parallel.has("scatter_gather_pipeline_tensors")) {
    if (zero_pipeline) parallel.fail("scatter_gather_pipeline_tensors", "is Megatron-LM's (system \"megatron\")");
    mp.scatter_gather_pipeline_tensors = parallel.boolean("scatter_gather_pipeline_tensors");
  }
  if (zero_pipeline) mp.scheduling_unit = parallel_degree(parallel, "scheduling_unit");
  const auto stage_layers = [&](const std::string& key) -> std::optional<int> {
    if (!parallel.has(key)) return std::nullopt;
    const std::int64_t value = parallel.non_negative_integer(key);
    if (value > (1 << 20)) parallel.fail(key, "must be at most 1048576, got " + std::to_string(value));
    return static_cast<int>(value);
  };
  mp.first_stage_layers = stage_layers("first_stage_layers");
  mp.last_stage_layers = stage_layers("last_stage_layers");
  if (parallel.has("account_for_embedding")) mp.account_for_embedding = parallel.boolean("account_for_embedding");
  if (parallel.has("account_for_loss")) mp.account_for_loss = parallel.boolean("account_for_loss");
  if (parallel.has("layout")) {
    mp.layout = parallel.string("layout");
    const PipelineLayoutStages layout = layout_over_pipeline(*mp.layout, mp.pipeline);
    if (!layout.ok()) parallel.fail("layout", layout.problem);
    const std::size_t stages = layout.stages.size();
    if (parallel.has("virtual_stages") && mp.virtual_stages != layout.virtual_stages) {
      parallel.fail("virtual_stages", "is " + std::to_string(mp.virtual_stages) + ", but the layout's " +
                                          std::to_string(stages) + " virtual stages over " +
                                          std::to_string(mp.pipeline) + " pipeline stages make " +
                                          std::to_string(layout.virtual_stages));
    }
    mp.virtual_stages = layout.virtual_stages;
    // ZeroPP gathers and reduces each chunk's parameters as a window;
    // an empty chunk has none.
    for (std::size_t vs = 1; zero_pipeline && vs + 1 < stages; ++vs) {
      if (layout.stages[vs].empty()) {
        parallel.fail("layout", "leaves virtual stage " + std::to_string(vs) +
                                    " empty, which ZeroPP's chunks cannot be (system \"zero_pipeline\")");
      }
    }
  }
  if (parallel.has("rank_order")) {
    if (zero_pipeline) parallel.fail("rank_order", "is Megatron-LM's (system \"megatron\")");
    mp.rank_order = parallel.choice("rank_order", {"tp-cp-dp-pp", "tp-cp-pp-dp"}) == "tp-cp-dp-pp"
                        ? RankOrder::tp_cp_dp_pp
                        : RankOrder::tp_cp_pp_dp;
  }
  if (parallel.has("microbatch_group_size")) {
    if (zero_pipeline) {
      parallel.fail("microbatch_group_size", "is Megatron-LM's (system \"megatron\"); ZeroPP has scheduling_unit");
    }
    mp.microbatch_group_size = parallel_degree(parallel, "microbatch_group_size");
  }
}

// What the pipeline fields must satisfy together; `reader` is the plan's.
void check_pipeline(const JsonObjectReader& reader, const ModelParallelism& mp, bool zero_pipeline) {
  if (zero_pipeline && mp.context != 1) {
    reader.fail("model_parallel.context_parallel", "context parallelism is Megatron-LM's (system \"megatron\")");
  }
  if (zero_pipeline && mp.tensor != 1) {
    reader.fail("model_parallel.tensor", "ZeroPP's pipeline is TP-free: tensor must be 1, got " + std::to_string(mp.tensor));
  }
  if (mp.virtual_stages > 1 && mp.pipeline < 2) {
    reader.fail("model_parallel.virtual_stages", "interleaving needs at least 2 pipeline stages");
  }
  if (mp.microbatch_group_size && mp.virtual_stages < 2) {
    reader.fail("model_parallel.microbatch_group_size",
                "groups micro-batches of the interleaved schedule: needs virtual_stages > 1");
  }
  if (mp.microbatch_group_size && *mp.microbatch_group_size < mp.pipeline) {
    reader.fail("model_parallel.microbatch_group_size",
                "must be at least the " + std::to_string(mp.pipeline) + " pipeline stages, got " +
                    std::to_string(*mp.microbatch_group_size));
  }
  if (mp.sequence_parallel && mp.tensor < 2) {
    reader.fail("model_parallel.sequence_parallel", "splits activations over the tensor-parallel group: needs tensor > 1");
  }
  if (mp.tp_comm_overlap && !mp.sequence_parallel) {
    reader.fail("model_parallel.tp_comm_overlap", "overlaps the sequence-parallel gathers and reduce-scatters: needs "
                                                  "sequence_parallel (Megatron-LM asserts it)");
  }
}

// The "model_parallel" block: DeepSpeed-Ulysses alone for the data-parallel
// systems, the pipeline and what goes with it for the others.
void read_model_parallel(JsonObjectReader& reader, Plan& plan, const SystemBehaviour& behaviour) {
  auto parallel = reader.object("model_parallel");
  ModelParallelism& mp = plan.model_parallel;
  if (behaviour.pipelines()) {
    const bool zero_pipeline = behaviour.compiler == StepCompiler::zero_pipeline;
    read_pipeline(parallel, mp, zero_pipeline);
    parallel.finish();
    check_pipeline(reader, mp, zero_pipeline);
    return;
  }
  // The data-parallel systems take DeepSpeed-Ulysses and nothing else.
  const auto keys = parallel.take_all_keys();
  if (keys != std::vector<std::string>{"ulysses"}) {
    reader.fail("model_parallel", "tensor and pipeline parallelism are modelled as Megatron-LM runs them (system "
                                  "\"megatron\") or as ZeroPP's TP-free pipeline (system \"zero_pipeline\"); "
                                  "ZeRO-2/3 combined with tensor parallelism is not modelled yet (the data-parallel "
                                  "systems take {\"ulysses\": u} alone, DeepSpeed-Ulysses sequence parallelism)");
  }
  mp.ulysses = parallel_degree(parallel, "ulysses");
}

ExpertParallelism read_experts(JsonObjectReader experts) {
  ExpertParallelism parsed;
  const std::int64_t parallel = experts.positive_integer("parallel");
  if (parallel > (1 << 16)) experts.fail("parallel", "must be at most 65536, got " + std::to_string(parallel));
  parsed.parallel = static_cast<int>(parallel);
  if (experts.has("layout")) parsed.layout = topology::parse_moe_layout(experts.choice("layout", {"E+D", "D+E"}));
  if (experts.has("capacity_factor")) parsed.capacity_factor = experts.positive_number("capacity_factor");
  if (experts.has("dispatcher")) {
    parsed.dispatcher = experts.choice("dispatcher", {"all_to_all", "all_gather"}) == "all_gather"
                                  ? TokenDispatcher::all_gather
                                  : TokenDispatcher::all_to_all;
  }
  if (experts.has("shared_expert_overlap")) parsed.shared_expert_overlap = experts.boolean("shared_expert_overlap");
  if (experts.has("overlap_expert_parallel_comm")) {
    parsed.overlap_expert_parallel_comm = experts.boolean("overlap_expert_parallel_comm");
  }
  if (experts.has("delay_wgrad_compute")) parsed.delay_wgrad_compute = experts.boolean("delay_wgrad_compute");
  experts.finish();
  return parsed;
}

BucketSizes read_buckets(JsonObjectReader buckets) {
  BucketSizes sizes;
  sizes.reduce_bytes = buckets.positive_number("reduce_bytes");
  sizes.all_gather_bytes = buckets.positive_number("all_gather_bytes");
  sizes.prefetch_bytes = buckets.non_negative_number("prefetch_bytes");
  sizes.persistence_threshold_parameters = buckets.non_negative_number("persistence_threshold_parameters");
  for (auto [key, value] : {std::pair{"max_live_parameters", &sizes.max_live_parameters},
                            std::pair{"max_reuse_distance_parameters", &sizes.max_reuse_distance_parameters}}) {
    if (buckets.has(key)) *value = buckets.non_negative_number(key);
  }
  buckets.finish();
  return sizes;
}

OverlapSwitches read_overlap(JsonObjectReader overlap) {
  OverlapSwitches switches;
  switches.gather_scatter = overlap.boolean("gather_scatter");
  switches.optimizer_all_reduce = overlap.boolean("optimizer_all_reduce");
  switches.parameter_broadcast = overlap.boolean("parameter_broadcast");
  overlap.finish();
  return switches;
}

// ZeRO++'s qwZ and qgZ, where the system takes them.
void read_quantization(JsonObjectReader& reader, Plan& plan, const SystemBehaviour& behaviour) {
  for (auto [key, value] : {std::pair{"quantized_weights", &plan.quantized_weights},
                            std::pair{"quantized_gradients", &plan.quantized_gradients}}) {
    if (!reader.has(key)) continue;
    *value = reader.boolean(key);
    if (*value && !(behaviour.quantized_communication && plan.factors.parameters != 1)) {
      const auto quantizing = [](const SystemBehaviour& b) { return b.quantized_communication; };
      reader.fail(key, "ZeRO++'s quantized communication is modelled for systems " +
                           joined(system_names(quantizing), "\"", " and ") + " with the parameters sharded (ZeRO-3)");
    }
  }
  if (plan.quantized_gradients && plan.factors.parameters != 0) {
    reader.fail("quantized_gradients", "qgZ reduces the gradients over every data-parallel GPU: the parameters factor "
                                       "must be \"all\"");
  }
}

// The framework's kernels, its allocator's setting and the gradients' reduce dtype.
void read_implementation(JsonObjectReader& reader, Plan& plan, const SystemBehaviour& behaviour) {
  plan.kernels = behaviour.eager_kernels_by_default ? KernelImplementation::eager : KernelImplementation::fused;
  if (reader.has("kernels")) {
    plan.kernels = reader.choice("kernels", {"fused", "eager"}) == "eager" ? KernelImplementation::eager
                                                                           : KernelImplementation::fused;
  }
  if (reader.has("expandable_segments")) plan.expandable_segments = reader.boolean("expandable_segments");
  if (!reader.has("reduce_dtype")) return;
  if (behaviour.compiler == StepCompiler::zero_pipeline) {
    reader.fail("reduce_dtype", "is read for the data-parallel systems and Megatron-LM; ZeroPP reduces in the "
                                "training dtype");
  }
  plan.reduce_dtype = reader.choice("reduce_dtype", {"training", "fp32"}) == "fp32" ? GradientReduceDtype::fp32
                                                                                     : GradientReduceDtype::training;
}

// The factors Megatron-LM and ZeroPP can take, and ZeroPP's required block.
void check_factors_of_pipelines(const JsonObjectReader& reader, const Plan& plan, const SystemBehaviour& behaviour) {
  const FactorSpec& f = plan.factors;
  if (behaviour.compiler == StepCompiler::megatron_pipeline &&
      (f.parameters != 1 || f.gradients != 1 || (f.optimizer != 1 && f.optimizer != 0))) {
    reader.fail("factors", "Megatron-LM shards no parameters or gradients: (1, 1, 1), or (1, 1, \"all\") for its "
                           "distributed optimizer");
  }
  const bool zero_pipeline = behaviour.compiler == StepCompiler::zero_pipeline;
  if (zero_pipeline && f.gradients != f.parameters) {
    reader.fail("factors", "ZeroPP reduce-scatters each unit's gradients over the group that gathers the parameters: "
                           "the gradients factor must equal the parameters factor");
  }
  if (zero_pipeline && !reader.has("model_parallel")) {
    reader.fail("model_parallel", "system \"zero_pipeline\" needs the pipeline: {\"pipeline\": p, \"scheduling_unit\": u}");
  }
}

}  // namespace

Plan parse_plan(const nlohmann::json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  Plan plan;
  plan.name = reader.string("name");
  plan.system = *parse_sharding_system(reader.choice("system", system_names()));
  auto factors = reader.object("factors");
  plan.factors.parameters = factor(factors, "parameters");
  plan.factors.gradients = factor(factors, "gradients");
  plan.factors.optimizer = factor(factors, "optimizer");
  factors.finish();
  const auto secondary = reader.positive_integer("secondary_parameter_group");
  const SystemBehaviour& behaviour = behaviour_of(plan.system);
  if (secondary > 1 && !behaviour.secondary_parameter_copy) {
    reader.fail("secondary_parameter_group", "a secondary parameter copy is ZeRO++'s (system \"zeropp\"); use 1");
  }
  plan.secondary_parameter_group = static_cast<int>(secondary);
  if (reader.has("hierarchical_gradient_reduction")) {
    reader.fail("hierarchical_gradient_reduction",
                "no longer read: MiCS always reduces gradients in its group, then across groups; DeepSpeed's "
                "mics_hierarchical_params_gather is \"hierarchical_parameter_gather\"");
  }
  if (reader.has("hierarchical_parameter_gather")) {
    plan.hierarchical_parameter_gather = reader.boolean("hierarchical_parameter_gather");
    if (plan.hierarchical_parameter_gather && !behaviour.hierarchical_parameter_gather) {
      reader.fail("hierarchical_parameter_gather", "the two-hop parameter gather is MiCS's (system \"mics\")");
    }
  }
  plan.buckets = read_buckets(reader.object("buckets"));
  plan.overlap = read_overlap(reader.object("overlap"));
  plan.as_implemented = reader.choice("behaviour", {"as_implemented", "ideal"}) == "as_implemented";
  plan.multi_rank_bucketing = reader.boolean("multi_rank_bucketing");
  plan.flat_all_gather = reader.boolean("flat_all_gather");
  read_quantization(reader, plan, behaviour);
  read_implementation(reader, plan, behaviour);
  check_factors_of_pipelines(reader, plan, behaviour);
  if (reader.has("model_parallel")) read_model_parallel(reader, plan, behaviour);
  if (reader.has("experts")) plan.experts = read_experts(reader.object("experts"));
  check_parallelism_system(plan, file);
  plan.sources = reader.string_list("sources");
  reader.finish();
  return plan;
}

std::string to_string(KernelImplementation kernels) {
  return kernels == KernelImplementation::eager ? "eager" : "fused";
}

Plan load_plan(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "workloads/plans", "plan");
  return parse_plan(load_json_file(file), file);
}

namespace {

void check_group(int size, int data_parallel, int gpus_per_node, const std::string& file, const std::string& field) {
  if (data_parallel % size != 0) {
    throw_input_error(file, field, std::to_string(size) + " does not divide the " + std::to_string(data_parallel) +
                                       " data-parallel GPUs");
  }
  if (size <= gpus_per_node && gpus_per_node % size != 0) {
    throw_input_error(file, field, "breaks the mesh filter: a group within a node must divide its " +
                                       std::to_string(gpus_per_node) + " GPUs, got " + std::to_string(size));
  }
  if (size > gpus_per_node && size % gpus_per_node != 0) {
    throw_input_error(file, field, "breaks the mesh filter: a group larger than a node must span whole nodes of " +
                                       std::to_string(gpus_per_node) + " GPUs, got " + std::to_string(size));
  }
}

}  // namespace

int data_parallel_size(const Plan& plan, int gpus, int gpus_per_node, const std::string& file) {
  const ModelParallelism& mp = plan.model_parallel;
  if (gpus_per_node % mp.tensor != 0) {
    throw_input_error(file, "model_parallel.tensor",
                      "tensor-parallel groups stay inside a node: must divide its " + std::to_string(gpus_per_node) +
                          " GPUs, got " + std::to_string(mp.tensor));
  }
  if (gpus % mp.gpus_per_replica() != 0) {
    throw_input_error(file, "model_parallel",
                      "tensor x pipeline = " + std::to_string(mp.gpus_per_replica()) + " does not divide the " +
                          std::to_string(gpus) + " GPUs");
  }
  return gpus / mp.gpus_per_replica();
}

ShardingFactors resolve_factors(const Plan& plan, int data_parallel, int gpus_per_node, const std::string& file) {
  auto resolve = [&](int f) { return f == 0 ? data_parallel : f; };
  const ShardingFactors f{resolve(plan.factors.parameters), resolve(plan.factors.gradients),
                          resolve(plan.factors.optimizer)};
  // "all" is the whole data-parallel group, a valid mesh whatever its size;
  // a number carves the group into meshes that must obey the rules.
  if (plan.factors.parameters != 0) check_group(f.parameters, data_parallel, gpus_per_node, file, "factors.parameters");
  if (plan.factors.gradients != 0) check_group(f.gradients, data_parallel, gpus_per_node, file, "factors.gradients");
  if (plan.factors.optimizer != 0) check_group(f.optimizer, data_parallel, gpus_per_node, file, "factors.optimizer");
  const std::string rule = "breaks the dependency rule (f_P <= f_G <= f_OS, each dividing the next): ";
  if (f.gradients < f.parameters || f.gradients % f.parameters != 0) {
    throw_input_error(file, "factors.gradients",
                      rule + "f_G = " + std::to_string(f.gradients) + ", f_P = " + std::to_string(f.parameters));
  }
  if (f.optimizer < f.gradients || f.optimizer % f.gradients != 0) {
    throw_input_error(file, "factors.optimizer",
                      rule + "f_OS = " + std::to_string(f.optimizer) + ", f_G = " + std::to_string(f.gradients));
  }
  if (plan.secondary_parameter_group > 1) {
    check_group(plan.secondary_parameter_group, data_parallel, gpus_per_node, file, "secondary_parameter_group");
  }
  return f;
}

namespace {

bool has_pipelines(const Plan& plan) { return behaviour_of(plan.system).pipelines(); }

bool megatron_steps(const Plan& plan) {
  return behaviour_of(plan.system).compiler == StepCompiler::megatron_pipeline;
}

bool data_parallel_steps(const SystemBehaviour& behaviour) { return !behaviour.pipelines(); }

}  // namespace

void check_parallelism_system(const Plan& plan, const std::string& file) {
  if (plan.model_parallel.ulysses > 1 && has_pipelines(plan)) {
    throw_input_error(file, "model_parallel.ulysses",
                      "DeepSpeed-Ulysses is modelled with the data-parallel systems (" +
                          joined(system_names(data_parallel_steps)) + "), not with pipelines");
  }
  if (plan.experts.parallel > 1 && behaviour_of(plan.system).compiler == StepCompiler::zero_pipeline) {
    throw_input_error(file, "experts.parallel",
                      "expert parallelism is compiled for the data-parallel systems (" +
                          joined(system_names(data_parallel_steps)) + ") and Megatron-LM, not yet with ZeroPP's pipeline");
  }
  if (plan.experts.parallel > 1 && plan.model_parallel.ulysses > 1) {
    throw_input_error(file, "experts.parallel", "expert parallelism together with DeepSpeed-Ulysses is not modelled yet");
  }
  if (plan.experts.shared_expert_overlap && !megatron_steps(plan)) {
    throw_input_error(file, "experts.shared_expert_overlap",
                      "is Megatron-Core's --moe-shared-expert-overlap (system megatron); the data-parallel systems and "
                      "ZeroPP run the shared experts in line");
  }
  if (plan.experts.shared_expert_overlap && plan.experts.dispatcher != TokenDispatcher::all_to_all) {
    throw_input_error(file, "experts.shared_expert_overlap",
                      "works with the all_to_all dispatcher only (Megatron-Core refuses it with the allgather one)");
  }
  if (plan.experts.delay_wgrad_compute && !plan.experts.overlap_expert_parallel_comm) {
    throw_input_error(file, "experts.delay_wgrad_compute",
                      "delays weight gradients for the combined 1F1B: needs experts.overlap_expert_parallel_comm "
                      "(Megatron-Core asserts it)");
  }
  if (!plan.experts.overlap_expert_parallel_comm) return;
  // Megatron-Core's TransformerConfig asserts each of these.
  const auto refuse = [&](const std::string& why) {
    throw_input_error(file, "experts.overlap_expert_parallel_comm", why);
  };
  if (!megatron_steps(plan)) {
    refuse("is Megatron-Core's --overlap-moe-expert-parallel-comm (system megatron)");
  }
  if (plan.experts.parallel < 2) refuse("overlaps the expert-parallel all-to-alls: needs experts.parallel > 1");
  if (plan.experts.dispatcher != TokenDispatcher::all_to_all) refuse("works with the all_to_all dispatcher only");
  if (plan.experts.shared_expert_overlap) refuse("cannot run with experts.shared_expert_overlap");
  if (plan.model_parallel.pipeline > 1 && plan.model_parallel.virtual_stages < 2) {
    refuse("with pipeline stages needs the interleaved schedule (model_parallel.virtual_stages > 1)");
  }
}

ExpertShardingFactors resolve_expert_factors(const Plan& plan, int experts, const ShardingFactors& factors,
                                             int data_parallel, const std::string& file) {
  const int ep = plan.experts.parallel;
  if (ep > 1 && experts == 0) throw_input_error(file, "experts.parallel", "the model has no MoE layers; use 1");
  if (ep > 1 && experts % ep != 0) {
    throw_input_error(file, "experts.parallel",
                      std::to_string(ep) + " does not divide the model's " + std::to_string(experts) + " routed experts");
  }
  if (data_parallel % ep != 0) {
    throw_input_error(file, "experts.parallel",
                      std::to_string(ep) + " does not divide the " + std::to_string(data_parallel) + " data-parallel GPUs");
  }
  ExpertShardingFactors resolved;
  resolved.data_parallel = data_parallel / ep;
  const auto within = [&](int f) { return std::gcd(f, resolved.data_parallel); };
  resolved.factors = {within(factors.parameters), within(factors.gradients), within(factors.optimizer)};
  resolved.secondary_group = within(plan.secondary_parameter_group);
  return resolved;
}

void apply_overlap_level(Plan& plan, const std::string& level) {
  if (level == "plan") return;
  if (level != "all" && level != "ag-rs+ar" && level != "ag-rs" && level != "none") {
    throw std::invalid_argument("overlap level '" + level + "': use plan, all, ag-rs+ar, ag-rs or none");
  }
  plan.overlap.gather_scatter = level != "none";
  plan.overlap.optimizer_all_reduce = level == "ag-rs+ar" || level == "all";
  plan.overlap.parameter_broadcast = level == "all";
}

}  // namespace shardsim::workloads
