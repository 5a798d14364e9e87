#include "sim/cli/job_inputs.h"

#include "sim/cli/byte_size.h"

#include "workloads/import/deepspeed_config.h"
#include "workloads/import/megatron_args.h"
#include "workloads/import/model_file.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <stdexcept>

namespace shardsim::cli {

void add_job_options(CLI::App& command, JobOptions& options) {
  command.add_option("--cluster", options.cluster, "Cluster JSON file or preset")->capture_default_str();
  command.add_option("--model", options.model, "Model JSON, HF config.json or preset")->capture_default_str();
  command.add_option("--plan", options.plan, "Sharding plan JSON or preset")->capture_default_str();
  command.add_option("--training", options.training, "Training config JSON or preset")->capture_default_str();
  auto* plan = command.get_option("--plan");
  auto* deepspeed = command.add_option("--deepspeed", options.deepspeed,
                                       "DeepSpeed config JSON: replaces --plan, and sets the batch and precision it gives");
  auto* megatron = command.add_option(
      "--megatron", options.megatron,
      "Megatron-LM arguments (a launch script, its flags, or a bundled launch): replace --plan, and set the sequence, "
      "batch, precision and recompute they give");
  deepspeed->excludes(plan);
  megatron->excludes(plan)->excludes(deepspeed);
  command.add_option("-g,--gpus", options.gpus,
                     "GPUs (default: the whole cluster); the data-parallel size is GPUs / (tensor x pipeline)");
  command.add_option("--scale", options.scale,
                     "Shrink the model and batch, the plan unchanged: layers=2,hidden=512,seq=256,micro_batches=2 "
                     "(also ffn, vocab)");
  command.add_option("--expert-parallel", options.expert_parallel,
                     "MoE models: GPUs each layer's routed experts are split over (default: the plan's, else 1)")
      ->check(CLI::Range(1, 1 << 16));
  command.add_option("--expert-layout", options.expert_layout,
                     "MoE models: E+D (expert-parallel groups on consecutive GPUs) or D+E (each expert's replicas "
                     "on consecutive GPUs); default: the plan's, else E+D")
      ->check(CLI::IsMember({"plan", "E+D", "D+E"}));
  command.add_option("--ulysses", options.ulysses,
                     "DeepSpeed-Ulysses: consecutive GPUs each micro-batch's sequence is split over, all-to-alls "
                     "around attention (data-parallel systems; default: the plan's, else 1)")
      ->check(CLI::Range(1, 1 << 16));
  command.add_option("--mem-limit", options.memory_limit,
                     "Memory per GPU a plan must fit in, e.g. 80GiB (default: the cluster's GPU memory)");
}

void add_plan_variant_options(CLI::App& command, JobOptions& options) {
  command.add_option("--overlap", options.overlap,
                     "Overlaps, as the plan says or one of AMSP's ablation levels: all (AG/RS + AR + BC), "
                     "ag-rs+ar, ag-rs, none")
      ->check(CLI::IsMember(workloads::kOverlapLevels))
      ->capture_default_str();
  command.add_option("--behaviour", options.behaviour,
                     "DeepSpeed/MiCS limitations: as the plan says, as_implemented or ideal")
      ->check(CLI::IsMember({"plan", "as_implemented", "ideal"}))
      ->capture_default_str();
}

void print_notes(const JobInputs& inputs) {
  for (const auto& note : inputs.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
}

JobInputs load_job_inputs(const JobOptions& options) {
  using namespace workloads;
  JobInputs inputs;
  inputs.cluster = topology::load_cluster_spec(options.cluster);
  if (!options.memory_limit.empty()) {
    inputs.cluster.node.gpu_memory_bytes = static_cast<double>(parse_byte_size("--mem-limit", options.memory_limit));
  }
  StepConfig& step = inputs.step;
  step.model = load_model(options.model);
  const int available = inputs.cluster.gpu_count();
  const int gpus = options.gpus == 0 ? available : options.gpus;
  if (gpus < 1 || gpus > available) {
    throw std::invalid_argument("--gpus " + std::to_string(options.gpus) + ": cluster " + inputs.cluster.name +
                                " has 1 to " + std::to_string(available) + " GPUs");
  }
  step.gpus_per_node = inputs.cluster.node.gpus;
  step.training = load_training_config(options.training);
  step.plan_file = options.plan;
  step.training_file = options.training;
  if (!options.megatron.empty()) {
    MegatronJob megatron = load_megatron_args(options.megatron, step.model, step.training, gpus, step.gpus_per_node);
    step.plan = std::move(megatron.plan);
    step.training = megatron.training;
    step.data_parallel = megatron.data_parallel;
    step.model.mtp_layers = megatron.mtp_layers;
    step.plan_file = step.training_file = megatron.file;
    inputs.notes = std::move(megatron.notes);
  } else if (options.deepspeed.empty()) {
    step.plan = load_plan(options.plan);
    step.data_parallel = data_parallel_size(step.plan, gpus, step.gpus_per_node, step.plan_file);
  } else {
    step.data_parallel = gpus;
    const DeepSpeedConfig deepspeed = load_deepspeed_config(options.deepspeed, step.model);
    inputs.notes.insert(inputs.notes.end(), deepspeed.notes.begin(), deepspeed.notes.end());
    step.plan = deepspeed.plan;
    step.training = apply_deepspeed_batch(step.training, deepspeed, step.data_parallel);
    step.plan_file = step.training_file = options.deepspeed;
  }
  if (options.expert_parallel > 0) step.plan.experts.parallel = options.expert_parallel;
  if (options.expert_layout != "plan") step.plan.experts.layout = topology::parse_moe_layout(options.expert_layout);
  if (options.ulysses > 0) step.plan.model_parallel.ulysses = options.ulysses;
  check_parallelism_system(step.plan, step.plan_file);
  apply_overlap_level(step.plan, options.overlap);
  if (options.behaviour != "plan") step.plan.as_implemented = options.behaviour == "as_implemented";
  if (!options.scale.empty()) {
    inputs.scale = parse_job_scale(options.scale);
    // micro_batches counts each rank's micro-batches, whatever shares them.
    apply_job_scale(inputs.scale, batch_replicas(step), step.model, step.training);
  }
  // These checks name the file at fault before anything is compiled.
  check_sequence_length(step.training, step.model, step.training_file);
  // Data-parallel groups of a tensor-parallel plan have gpus_per_node / t GPUs in a node.
  inputs.factors = resolve_factors(step.plan, sharding_group_size(step),
                                   step.gpus_per_node / step.plan.model_parallel.tensor, step.plan_file);
  inputs.gradient_accumulation_steps = micro_batches_per_step(step);
  return inputs;
}

void check_profile_runs_job(const JobInputs& inputs, const calib::Profile& profile) {
  // Said here, naming the training config's field, rather than by the first
  // kernel the simulation prices, which can only name the profile.
  const workloads::TrainingConfig& training = inputs.step.training;
  const auto require = [&](const char* dtype, const char* field) {
    if (profile.compute.find(dtype) != nullptr) return;
    std::string listed;
    for (const auto& [name, compute] : profile.compute.dtypes) listed += (listed.empty() ? "" : ", ") + name;
    throw_input_error(inputs.step.training_file, field,
                      std::string("asks for ") + dtype + " GEMMs, which the profile " + profile.name + " (" + profile.gpu +
                          ") does not have (it lists " + listed + ")");
  };
  require(training.fp16 ? "fp16" : "bf16", "precision");
  if (training.fp8_gemms) require("fp8", "fp8_gemms");
}

calib::Profile load_job_profile(const std::string& profile_option, const topology::ClusterSpec& cluster) {
  if (!profile_option.empty()) {
    calib::Profile profile = calib::load_profile(profile_option);
    // Another device's profile prices every kernel and call as that device
    // runs them, and MFU against that device's peak: legitimate (what-if),
    // but said, as it is easy to do by mistake.
    std::string own_gpu;
    try {
      own_gpu = calib::load_profile(cluster.profile).gpu;
    } catch (const InputError&) {
    }
    if (!own_gpu.empty() && profile.gpu != own_gpu) {
      std::fprintf(stderr, "note: --profile %s describes %s; cluster %s's GPUs are %s (its profile %s): times and MFU "
                   "are the profile's device's\n",
                   profile_option.c_str(), profile.gpu.c_str(), cluster.name.c_str(), own_gpu.c_str(),
                   cluster.profile.c_str());
    }
    return profile;
  }
  try {
    return calib::load_profile(cluster.profile);
  } catch (const InputError& e) {
    throw_input_error(cluster.file, "profile", e.what());
  }
}

}  // namespace shardsim::cli
