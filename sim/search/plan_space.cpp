#include "sim/search/plan_space.h"

#include "topology/base/json_input.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/inputs/pipeline_split.h"
#include "workloads/kernels/transformer_kernels.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

namespace shardsim::sim {

using workloads::Plan;

namespace {

bool is_pipeline(const Plan& plan) { return workloads::behaviour_of(plan.system).pipelines(); }

bool is_megatron(const Plan& plan) {
  return workloads::behaviour_of(plan.system).compiler == workloads::StepCompiler::megatron_pipeline;
}

}  // namespace

std::vector<int> mesh_factors(int gpus, int gpus_per_node) {
  std::vector<int> factors;
  for (int f = 1; f <= gpus; ++f) {
    if (gpus % f != 0) continue;
    if (f <= gpus_per_node ? gpus_per_node % f == 0 : f % gpus_per_node == 0) factors.push_back(f);
  }
  return factors;
}

int placement_group_ranks(const Plan& plan, const workloads::ShardingFactors& factors, int gpus) {
  if (is_pipeline(plan)) return 0;
  int largest = 0;
  for (int f : {factors.parameters, factors.gradients, factors.optimizer, plan.secondary_parameter_group}) {
    if (f < gpus) largest = std::max(largest, f);
  }
  return largest;
}

namespace {

Plan with_factors(Plan plan, std::string name, int parameters, int gradients, int optimizer) {
  plan.name = std::move(name);
  plan.factors = {parameters, gradients, optimizer};
  return plan;
}

// A named system's group preset sized to a sharding group of k GPUs: ZeRO++'s
// secondary parameter copy over k, any other's factors (k, k, k).
Plan sized_to_group(const Plan& preset, const workloads::GroupPreset& group, int k) {
  std::string name(group.name_pattern);
  name.replace(name.find("{k}"), 3, std::to_string(k));
  if (workloads::behaviour_of(preset.system).secondary_parameter_copy) {
    Plan plan = preset;
    plan.name = std::move(name);
    plan.secondary_parameter_group = k;
    return plan;
  }
  return with_factors(preset, std::move(name), k, k, k);
}

// The data-parallel systems to try, each with its factors written out (0 =
// all), in the registry's order (workloads/inputs/sharding_systems.h): the
// named systems' presets; those that reduce ZeRO-1/2 gradients to their
// owners again with multi-rank bucketing; then, for each sharding group size
// k, every group preset sized to it; then AMSP's factor triples.
std::vector<Plan> systems(const SearchSpace& space, int gpus, int gpus_per_node) {
  std::vector<Plan> plans;
  const std::vector<int> factors = mesh_factors(gpus, gpus_per_node);
  if (space.searches("named")) {
    std::vector<std::pair<Plan, const workloads::GroupPreset*>> group_presets;
    for (const auto& record : workloads::sharding_systems()) {
      if (record.search.family != "named") continue;
      for (std::string_view preset : record.search.presets) plans.push_back(workloads::load_plan(std::string(preset)));
      for (const auto& group : record.search.group_presets) {
        group_presets.emplace_back(workloads::load_plan(std::string(group.preset)), &group);
      }
    }
    // The presets reduce ZeRO-1/2 gradients to their owners, as DeepSpeed
    // releases before PR #4695 did; current DeepSpeed all-reduces each bucket
    // (multi-rank bucketing, TECHNIQUES.md section 6) by default.
    const std::size_t presets = plans.size();
    for (std::size_t i = 0; i < presets; ++i) {
      const Plan& plan = plans[i];
      const bool to_owners = workloads::behaviour_of(plan.system).reduce_to_gradient_owners &&
                             plan.factors.parameters == 1 && plan.factors.optimizer != 1;
      if (!to_owners) continue;
      Plan multi_rank = plan;
      multi_rank.name += "-multi-rank";
      multi_rank.multi_rank_bucketing = true;
      multi_rank.sources.push_back("use_multi_rank_bucket_allreduce, DeepSpeed's default since PR #4695");
      plans.push_back(std::move(multi_rank));
    }
    for (int k : factors) {
      if (k == 1 || k == gpus) continue;
      for (const auto& [preset, group] : group_presets) plans.push_back(sized_to_group(preset, *group, k));
    }
  }
  if (space.searches("amsp")) {
    Plan amsp = workloads::load_plan(workloads::search_preset("amsp"));
    amsp.sources = {"AMSP (TECHNIQUES.md section 2): factor triple enumerated by shardsim search under the dependency "
                    "rule and the mesh filter"};
    for (int p : factors) {
      for (int g : factors) {
        if (g < p || g % p != 0) continue;
        for (int os : factors) {
          if (os < g || os % g != 0) continue;
          plans.push_back(with_factors(amsp, "amsp-" + std::to_string(p) + "-" + std::to_string(g) + "-" + std::to_string(os),
                                       p, g, os));
        }
      }
    }
  }
  return plans;
}

// The sequence-parallel degrees of `space` (`sizes`, or when empty 1 and
// `needed`, for a batch of fewer sequences than GPUs, where splitting the
// batch alone leaves GPUs idle) that `gpus` and the model take, 1 first if
// it is among them.
std::vector<int> sequence_degrees(const std::vector<int>& sizes, std::vector<int> needed,
                                  const workloads::ModelSpec& model, const workloads::TrainingConfig& training, int gpus,
                                  int workloads::ModelParallelism::*degree) {
  std::vector<int> tried = sizes;
  if (tried.empty()) {
    tried = {1};
    if (training.global_batch_sequences < gpus) tried.insert(tried.end(), needed.begin(), needed.end());
  }
  std::vector<int> degrees;
  if (std::find(tried.begin(), tried.end(), 1) != tried.end()) degrees.push_back(1);
  for (int size : tried) {
    if (size == 1 || gpus % size != 0 || std::find(degrees.begin(), degrees.end(), size) != degrees.end()) continue;
    workloads::ModelParallelism parallel;
    parallel.*degree = size;
    try {
      workloads::require_model_parallel_split(model, training, parallel);
    } catch (const InputError&) {
      continue;
    }
    degrees.push_back(size);
  }
  return degrees;
}

// A Megatron-Core layout string for `layers` per virtual stage, the
// embedding on the first and the MTP layers and output layer on the last;
// runs of equal middle stages written as groups ("Et*3|(t*3|)*5,t*2mL").
std::string layout_string(const std::vector<int>& layers, int mtp_layers) {
  const auto stage = [](int n) {
    return n == 0 ? std::string() : n == 1 ? std::string("t") : "t*" + std::to_string(n);
  };
  std::string text = "E" + stage(layers.front()) + "|";
  for (std::size_t vs = 1; vs + 1 < layers.size();) {
    std::size_t run = 1;
    while (vs + run + 1 < layers.size() && layers[vs + run] == layers[vs]) ++run;
    text += run == 1 ? stage(layers[vs]) + "|" : "(" + stage(layers[vs]) + "|)*" + std::to_string(run) + ",";
    vs += run;
  }
  const std::string mtp = mtp_layers == 0 ? "" : mtp_layers == 1 ? "m" : "m*" + std::to_string(mtp_layers);
  return text + stage(layers.back()) + mtp + "L";
}

// How the p v chunks of `parallel` split the layers: evenly where they
// divide, else with Megatron-Core's accounting of the embedding and the
// output layer as layers (pipeline_split.h), as Llama 3 405B runs 126 layers
// on 16 x 8 chunks: both (L + 2 slots), else the output layer alone (L + 1;
// of the two it is the heavier, an h x vocabulary GEMM and the loss, and the
// embedding alone would divide the same L + 1 slots). Where none divides (61
// layers, DeepSeek-V3's, divide no count of chunks), a layout
// (--pipeline-model-parallel-layout) spreads the same L + 1 slots as evenly
// as they go: one more on each of the first (L + 1) mod (p v) virtual
// stages, as Megatron-Bridge's DeepSeek-V3 layouts load the first stages
// fully and the last lightly. Sets the accounting or the layout in
// `parallel` and returns the plan-name suffix ("" for the even split,
// "-split-emb-loss", "-split-loss", "-layout"); nothing when the chunks
// outnumber the slots.
std::optional<std::string> choose_layer_split(workloads::ModelParallelism& parallel, const workloads::ModelSpec& model) {
  parallel.layout = std::nullopt;
  for (const auto& [embedding, loss, suffix] : {std::tuple{false, false, ""}, std::tuple{true, true, "-split-emb-loss"},
                                                std::tuple{false, true, "-split-loss"}}) {
    parallel.account_for_embedding = embedding;
    parallel.account_for_loss = loss;
    if (workloads::split_pipeline(parallel, model.layers, model.name, model.mtp_layers).ok()) return std::string(suffix);
  }
  parallel.account_for_embedding = parallel.account_for_loss = false;
  const int chunks = parallel.pipeline * parallel.virtual_stages, slots = model.layers + 1;
  if (slots < chunks) return std::nullopt;
  std::vector<int> layers(static_cast<std::size_t>(chunks), slots / chunks);
  for (int vs = 0; vs < slots % chunks; ++vs) ++layers[static_cast<std::size_t>(vs)];
  --layers.back();  // the output layer's slot
  parallel.layout = layout_string(layers, model.mtp_layers);
  if (!workloads::split_pipeline(parallel, model.layers, model.name, model.mtp_layers).ok()) {
    throw std::logic_error("choose_layer_split: the layout " + *parallel.layout + " does not place " + model.name);
  }
  return std::string("-layout");
}

// The source line of a chosen accounting or layout, empty for the even split.
std::string layer_split_source(const workloads::ModelParallelism& parallel) {
  if (parallel.layout) return ", the layers placed by --pipeline-model-parallel-layout \"" + *parallel.layout + "\"";
  if (!parallel.account_for_loss) return "";
  return parallel.account_for_embedding
             ? ", the embedding and the output layer counted as layers in the split "
               "(--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split)"
             : ", the output layer counted as a layer in the split (--account-for-loss-in-pipeline-split)";
}

// Megatron-LM's tensor x pipeline (x virtual stages) (x context) layouts.
std::vector<Plan> megatron_plans(const SearchSpace& space, const workloads::ModelSpec& model,
                                 const workloads::TrainingConfig& training, int gpus, int gpus_per_node) {
  const std::vector<int> contexts =
      sequence_degrees(space.context_parallel, {2, 4, 8}, model, training, gpus, &workloads::ModelParallelism::context);
  std::vector<Plan> plans;
  const Plan preset = workloads::load_plan(workloads::search_preset("megatron"));
  std::vector<int> stages = {1};
  stages.insert(stages.end(), space.pipeline_stages.begin(), space.pipeline_stages.end());
  for (int t = 1; t <= gpus_per_node; ++t) {
    if (gpus_per_node % t != 0) continue;
    for (int p : stages) {
      if (p > model.layers || gpus % (t * p) != 0) continue;
      for (int v : {1, 2}) {
        if (v == 2 && p == 1) continue;
        workloads::ModelParallelism layout = preset.model_parallel;
        layout.pipeline = p;
        layout.virtual_stages = v;
        const std::optional<std::string> split = p == 1 ? std::string() : choose_layer_split(layout, model);
        if (!split) continue;
        for (bool overlap : space.tp_comm_overlap) {
          if (overlap && t == 1) continue;
          for (int c : contexts) {
            if (gpus % (t * p * c) != 0 || (t == 1 && p == 1 && c == 1)) continue;
            Plan plan = preset;
            plan.name = "megatron-t" + std::to_string(t) + "-p" + std::to_string(p) +
                        (v > 1 ? "-v" + std::to_string(v) : "") + *split + (c > 1 ? "-c" + std::to_string(c) : "") +
                        (overlap ? "-tp-overlap" : "");
            plan.model_parallel = layout;
            plan.model_parallel.tensor = t;
            plan.model_parallel.context = c;
            plan.model_parallel.sequence_parallel = t > 1;
            plan.model_parallel.tp_comm_overlap = overlap;
            plan.sources = {"Megatron-LM layout enumerated by shardsim search: tensor " + std::to_string(t) + ", pipeline " +
                                std::to_string(p) + " x " + std::to_string(v) + " virtual stages" +
                                layer_split_source(layout) + (c > 1 ? ", context " + std::to_string(c) : "") +
                                (overlap ? ", TP comm overlap" : "") +
                                "; the rest as " + preset.name,
                            preset.sources.at(1)};
            plans.push_back(std::move(plan));
          }
        }
      }
    }
  }
  return plans;
}

// ZeroPP layouts: stages, scheduling units and the factors inside a stage.
std::vector<Plan> zero_pipeline_plans(const SearchSpace& space, const workloads::ModelSpec& model, int gpus,
                                      int gpus_per_node) {
  std::vector<Plan> plans;
  const Plan preset = workloads::load_plan(workloads::search_preset("zero-pipeline"));
  const int chunks = preset.model_parallel.virtual_stages;
  for (int p : space.pipeline_stages) {
    if (p < 2 || p > model.layers || gpus % p != 0) continue;
    workloads::ModelParallelism layout = preset.model_parallel;
    layout.pipeline = p;
    const std::optional<std::string> split = choose_layer_split(layout, model);
    if (!split) continue;
    const int stage_gpus = gpus / p;
    const int node_shard = std::min(gpus_per_node, stage_gpus);
    const auto one_or_both = [](int a, int b) { return a == b ? std::vector<int>{a} : std::vector<int>{a, b}; };
    for (int f : one_or_both(node_shard, stage_gpus)) {
      for (int os : one_or_both(f, stage_gpus)) {
        for (int u : {p, 2 * p}) {
          Plan plan =
              with_factors(preset, "zero-pipeline-p" + std::to_string(p) + *split + "-u" + std::to_string(u), f, f, os);
          plan.model_parallel = layout;
          plan.model_parallel.scheduling_unit = u;
          plan.sources = {"ZeroPP layout enumerated by shardsim search: " + std::to_string(p) + " stages x " +
                              std::to_string(chunks) + " chunks" + layer_split_source(layout) + ", units of " +
                              std::to_string(u) +
                              " micro-batches, factors (" + std::to_string(f) + ", " + std::to_string(f) + ", " +
                              std::to_string(os) + ") inside a stage; the rest as zero-pipeline-pp4",
                          preset.sources.at(1)};
          plans.push_back(std::move(plan));
        }
      }
    }
  }
  return plans;
}

// Megatron's interleaved schedule takes the micro-batches in groups of p,
// which needs m to be a multiple of p; else the smallest group N Megatron-Core
// accepts (pipeline_schedule.h: N in [p, m], m mod N 0 or at least p), the
// fewest warm-up forwards held, and the plan's name gains "-nN". False when
// there is none (m < p).
bool with_microbatch_group(Plan& plan, std::int64_t micro_batches) {
  auto& mp = plan.model_parallel;
  if (!is_megatron(plan) || mp.virtual_stages == 1 || micro_batches % mp.pipeline == 0) return true;
  for (int n = mp.pipeline + 1; n <= micro_batches; ++n) {
    if (workloads::microbatch_group_problem(mp.pipeline, static_cast<int>(micro_batches), n).empty()) {
      mp.microbatch_group_size = n;
      plan.name += "-n" + std::to_string(n);
      return true;
    }
  }
  return false;
}

// Whether the model and the batch split the way a pipeline's compiler
// requires (layers over chunks, heads over tensor ranks, micro-batches over
// stages or scheduling units).
bool pipeline_splits(const workloads::StepConfig& config) {
  try {
    workloads::partition_model(config);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

std::string bytes_label(double bytes) {
  char text[32];
  if (bytes >= 1e9) {
    std::snprintf(text, sizeof text, "%g GB", bytes / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%g MB", bytes / 1e6);
  }
  return text;
}

// The expert-parallel sizes to try (plan_space.h).
std::vector<int> expert_parallel_sizes(const SearchSpace& space, const workloads::ModelSpec& model, int gpus_per_node) {
  if (!space.expert_parallel.empty()) return space.expert_parallel;
  return {1, std::min(model.routed_experts(), gpus_per_node)};
}

// Each data-parallel system under each expert parallelism the space and the
// model allow (plan_space.h).
std::vector<Plan> with_expert_parallelism(std::vector<Plan> systems, const SearchSpace& space,
                                          const workloads::ModelSpec& model, int gpus, int gpus_per_node) {
  if (!model.has_moe) return systems;
  const int experts = model.routed_experts();
  std::vector<Plan> plans;
  for (const Plan& system : systems) {
    for (int ep : expert_parallel_sizes(space, model, gpus_per_node)) {
      if (ep == 1) {
        plans.push_back(system);
        continue;
      }
      if (experts % ep != 0 || gpus % ep != 0) continue;
      for (const auto layout : {topology::MoeLayout::expert_data, topology::MoeLayout::data_expert}) {
        Plan plan = system;
        plan.experts = {ep, layout};
        plan.name += "+ep" + std::to_string(ep) + ":" + std::string(topology::to_string(layout));
        plans.push_back(std::move(plan));
      }
    }
  }
  return plans;
}

// How a Megatron-LM plan with expert parallelism hides its all-to-alls
// (plan_space.h): the combined 1F1B with delayed weight gradients where
// Megatron-Core allows it (no pipeline or an interleaved one, no full
// recompute), else the shared experts, if any, beside the dispatch.
void with_expert_overlap(Plan& plan, const workloads::ModelSpec& model, workloads::Recompute recompute) {
  workloads::ExpertParallelism& experts = plan.experts;
  if (experts.parallel < 2) return;
  const auto& mp = plan.model_parallel;
  const bool combined = (mp.pipeline == 1 || mp.virtual_stages > 1) && recompute != workloads::Recompute::full;
  experts.overlap_expert_parallel_comm = experts.delay_wgrad_compute = combined;
  experts.shared_expert_overlap = !combined && model.moe.shared_experts > 0;
  if (combined) {
    plan.sources.push_back("each forward merged with another micro-batch's backward, weight gradients "
                           "delayed (--overlap-moe-expert-parallel-comm --delay-wgrad-compute)");
  } else if (experts.shared_expert_overlap) {
    plan.sources.push_back("the shared experts beside the dispatch (--moe-shared-expert-overlap)");
  }
}

// Each Megatron-LM layout under each expert parallelism the space and the
// model allow, in Megatron-Core's order (E+D) with its all-to-all
// dispatcher, each expert whole (plan_space.h).
std::vector<Plan> with_megatron_expert_parallelism(std::vector<Plan> layouts, const SearchSpace& space,
                                                   const workloads::ModelSpec& model, int gpus, int gpus_per_node) {
  if (!model.has_moe) return layouts;
  std::vector<Plan> plans;
  for (const Plan& layout : layouts) {
    const int stage_gpus = gpus / layout.model_parallel.pipeline;  // tensor x data x context
    for (int ep : expert_parallel_sizes(space, model, gpus_per_node)) {
      if (model.routed_experts() % ep != 0 || stage_gpus % ep != 0) continue;
      Plan plan = layout;
      if (ep > 1) {
        plan.experts = {ep, topology::MoeLayout::expert_data, 1.0, workloads::TokenDispatcher::all_to_all};
        plan.name += "+ep" + std::to_string(ep);
        plan.sources.push_back("experts over " + std::to_string(ep) +
                               " GPUs of a stage in Megatron-Core's order (E+D), each whole "
                               "(--expert-tensor-parallel-size 1), the all-to-all dispatcher "
                               "(--moe-token-dispatcher-type alltoall, which Megatron recommends with expert "
                               "parallelism)");
      }
      plans.push_back(std::move(plan));
    }
  }
  return plans;
}

// Each data-parallel system (expert parallelism 1) under each
// DeepSpeed-Ulysses degree the space and the model allow (plan_space.h).
std::vector<Plan> with_ulysses(std::vector<Plan> systems, const SearchSpace& space, const workloads::ModelSpec& model,
                               const workloads::TrainingConfig& training, int gpus, int gpus_per_node) {
  const std::vector<int> degrees =
      sequence_degrees(space.ulysses, {gpus_per_node}, model, training, gpus, &workloads::ModelParallelism::ulysses);
  std::vector<Plan> plans;
  for (const Plan& system : systems) {
    for (int u : degrees) {
      if (u == 1) {
        plans.push_back(system);
        continue;
      }
      if (system.experts.parallel > 1) break;
      Plan plan = system;
      plan.model_parallel.ulysses = u;
      plan.name += "+ulysses" + std::to_string(u);
      plans.push_back(std::move(plan));
    }
  }
  return plans;
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const SearchSpace& space, const workloads::ModelSpec& model,
                                            const workloads::TrainingConfig& training, const topology::Cluster& cluster,
                                            int gpus) {
  const int per_node = cluster.gpus_per_node();
  // place_ranks() says why a GPU count cannot be a job here.
  const auto consecutive = std::make_shared<const topology::Placement>(
      topology::place_ranks(cluster, gpus, topology::PlacementPolicy::consecutive));

  // (micro-batch size, accumulation) on a data-parallel size.
  auto batches_of = [&](int replicas) {
    std::vector<std::pair<std::int64_t, std::int64_t>> batches;
    for (std::int64_t size : space.micro_batch_sizes) {
      const std::int64_t per_step = size * replicas;
      if (size > 0 && training.global_batch_sequences % per_step == 0) {
        batches.emplace_back(size, training.global_batch_sequences / per_step);
      }
    }
    return batches;
  };

  std::map<std::pair<topology::PlacementPolicy, int>, std::shared_ptr<const topology::Placement>> placements;
  auto placement_for = [&](topology::PlacementPolicy policy, int group) {
    auto& placed = placements[{policy, group}];
    if (!placed) placed = std::make_shared<const topology::Placement>(topology::place_ranks(cluster, gpus, policy, group));
    return placed;
  };

  std::vector<Plan> plans = with_ulysses(with_expert_parallelism(systems(space, gpus, per_node), space, model, gpus, per_node),
                                        space, model, training, gpus, per_node);
  if (space.searches("megatron")) {
    for (Plan& plan : with_megatron_expert_parallelism(megatron_plans(space, model, training, gpus, per_node), space,
                                                       model, gpus, per_node)) {
      plans.push_back(std::move(plan));
    }
  }
  if (space.searches("zero-pipeline")) {
    for (Plan& plan : zero_pipeline_plans(space, model, gpus, per_node)) plans.push_back(std::move(plan));
  }

  std::vector<Candidate> candidates;
  for (const Plan& system : plans) {
    const int data_parallel = gpus / system.model_parallel.gpus_per_replica();
    const bool pipeline = is_pipeline(system);
    workloads::ShardingFactors factors;
    try {
      // Megatron-LM shards over the data x context GPUs (sharding_group_size).
      factors = workloads::resolve_factors(system, data_parallel * system.model_parallel.context,
                                           per_node / system.model_parallel.tensor, system.name);
    } catch (const InputError&) {
      continue;  // e.g. ZeRO++'s secondary group against this GPU count
    }
    const int group = placement_group_ranks(system, factors, gpus);
    // Megatron and ZeroPP keep their presets' buckets.
    const std::vector<double> buckets = pipeline ? std::vector<double>{system.buckets.reduce_bytes} : space.bucket_bytes;
    for (double bucket : buckets) {
      Plan plan = system;
      if (!pipeline) {
        plan.buckets.reduce_bytes = bucket;
        plan.buckets.all_gather_bytes = bucket;
      }
      for (const auto& [size, accumulation] : batches_of(data_parallel / system.model_parallel.ulysses)) {
        Candidate candidate;
        candidate.plan = plan;
        candidate.factors = factors;
        candidate.training = training;
        candidate.training.micro_batch_size = size;
        candidate.data_parallel = data_parallel;
        candidate.accumulation = accumulation;
        if (!with_microbatch_group(candidate.plan, accumulation)) continue;
        if (pipeline && !pipeline_splits(step_config(model, candidate, per_node))) continue;
        const Plan layout = candidate.plan;  // the overlap of experts' all-to-alls depends on the recompute
        for (workloads::Recompute recompute : space.recompute) {
          // Selective recompute redoes the attention core, which flash
          // attention already recomputes: the same step, listed once.
          if (recompute == workloads::Recompute::selective && training.flash_attention) continue;
          for (topology::PlacementPolicy policy : space.placements) {
            const bool consecutive_policy = policy == topology::PlacementPolicy::consecutive;
            if (pipeline && !consecutive_policy) continue;
            auto placement = consecutive_policy ? consecutive : placement_for(policy, group);
            if (!consecutive_policy && *placement == *consecutive) continue;
            candidate.index = candidates.size();
            candidate.training.recompute = recompute;
            if (is_megatron(system)) {
              candidate.plan = layout;
              with_expert_overlap(candidate.plan, model, recompute);
            }
            candidate.placement = std::move(placement);
            candidates.push_back(candidate);
          }
        }
      }
    }
  }
  if (candidates.empty()) {
    std::string sizes;
    for (std::int64_t size : space.micro_batch_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
    throw std::invalid_argument(std::to_string(gpus) + " GPUs: the global batch of " +
                                std::to_string(training.global_batch_sequences) +
                                " sequences is not a whole number of micro-batches of " + sizes +
                                " per data-parallel replica of any plan the search tries");
  }
  return candidates;
}

workloads::StepConfig step_config(const workloads::ModelSpec& model, const Candidate& candidate, int gpus_per_node) {
  workloads::StepConfig config;
  config.model = model;
  config.training = candidate.training;
  config.plan = candidate.plan;
  config.data_parallel = candidate.data_parallel;
  config.gpus_per_node = gpus_per_node;
  config.plan_file = candidate.plan.name;
  return config;
}

std::string describe(const Candidate& candidate) {
  return candidate.plan.name + ", mbs " + std::to_string(candidate.training.micro_batch_size) + ", recompute " +
         workloads::to_string(candidate.training.recompute) + ", buckets " +
         bytes_label(candidate.plan.buckets.reduce_bytes) + ", " +
         std::string(topology::to_string(candidate.placement->policy));
}

}  // namespace shardsim::sim
