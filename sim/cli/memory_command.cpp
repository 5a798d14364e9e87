#include "sim/cli/commands.h"

#include "sim/cli/job_inputs.h"
#include "sim/report/step_table.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/memory/memory_model.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <stdexcept>

namespace shardsim::cli {

namespace {

struct MemoryOptions {
  JobOptions job;
  bool json = false;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

int run_memory(const MemoryOptions& options) {
  using namespace workloads;
  const JobInputs inputs = load_job_inputs(options.job);
  print_notes(inputs);
  const topology::ClusterSpec& cluster = inputs.cluster;
  const ModelSpec& model = inputs.step.model;
  const Plan& plan = inputs.step.plan;
  const TrainingConfig& training = inputs.step.training;
  const int gpus = inputs.step.ranks();
  const ShardingFactors& factors = inputs.factors;
  const std::int64_t accumulation = inputs.gradient_accumulation_steps;
  const std::int64_t parameters = count_parameters(model).total();
  // Pipeline stages differ: the answer is the fullest one's.
  const StepMemory step_memory = estimate_step_memory(inputs.step);
  const MemoryBreakdown& memory = step_memory.memory;
  const int stage = step_memory.stage;
  const ModelParallelism& mp = plan.model_parallel;
  const double capacity = cluster.node.gpu_memory_bytes;
  const bool fits = memory.total() <= capacity;

  const auto parts = memory_components(memory);
  const nlohmann::json experts =
      plan.experts.parallel > 1 ? expert_description(plan, step_memory.experts) : nlohmann::json();
  if (options.json) {
    nlohmann::json out = {{"cluster", cluster.name},     {"model", model.name},
                          {"parameters", parameters},    {"plan", plan.name},
                          {"system", to_string(plan.system)},
                          {"gpus", gpus},
                          {"data_parallel", inputs.step.data_parallel},
                          {"tensor_parallel", mp.tensor},
                          {"pipeline_parallel", mp.pipeline},
                          {"pipeline_stage", stage},
                          {"factors", {{"parameters", factors.parameters}, {"gradients", factors.gradients},
                                       {"optimizer", factors.optimizer}}},
                          {"gradient_accumulation_steps", accumulation},
                          {"recompute", recompute_label(training)},
                          {"flash_attention", training.flash_attention},
                          {"total_bytes", memory.total()},
                          {"gpu_memory_bytes", capacity},
                          {"fits", fits},
                          {"headroom_bytes", capacity - memory.total()}};
    for (const auto& [name, bytes] : parts) out["bytes"][name] = bytes;
    if (!experts.is_null()) out["experts"] = experts;
    if (mp.ulysses > 1) out["ulysses"] = mp.ulysses;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# shardsim memory: %s (%.3f B parameters) on %s, %d GPUs, %d data-parallel\n", model.name.c_str(),
              static_cast<double>(parameters) / 1e9, cluster.name.c_str(), gpus, inputs.step.data_parallel);
  if (workloads::behaviour_of(plan.system).compiler == workloads::StepCompiler::zero_pipeline) {
    std::printf("# TP-free pipeline %d x %d virtual stages, scheduling units of %d micro-batches; the fullest stage: %d\n",
                mp.pipeline, mp.virtual_stages, mp.scheduling_unit, stage);
  } else if (mp.any()) {
    std::printf("# tensor parallel %d%s%s, pipeline %d x %d virtual stages; the fullest stage: %d\n", mp.tensor,
                mp.sequence_parallel ? " (sequence parallel)" : "",
                mp.context > 1 ? (", context parallel " + std::to_string(mp.context)).c_str() : "", mp.pipeline,
                mp.virtual_stages, stage);
  }
  std::printf("# plan %s (%s): f_P %d, f_G %d, f_OS %d\n", plan.name.c_str(), to_string(plan.system).c_str(),
              factors.parameters, factors.gradients, factors.optimizer);
  if (!experts.is_null()) print_experts_line(experts);
  if (mp.ulysses > 1) print_ulysses_line(mp.ulysses);
  std::printf("# training: sequence %lld, micro-batch %lld, %lld micro-batches per step; recompute %s, flash attention %s\n",
              static_cast<long long>(training.sequence_length), static_cast<long long>(training.micro_batch_size),
              static_cast<long long>(accumulation), recompute_label(training).c_str(),
              training.flash_attention ? "on" : "off");
  std::printf("%-24s %10s\n", "component", "GiB/GPU");
  for (const auto& [name, bytes] : parts) std::printf("%-24s %10.2f\n", name, bytes / kGiB);
  std::printf("%-24s %10.2f\n", "total", memory.total() / kGiB);
  std::printf("%-24s %10.2f\n", "gpu_memory", capacity / kGiB);
  std::printf("%-24s %10s\n", "fits", fits ? "yes" : "no (out of memory)");
  // How close to the limit: what is left of it (negative: what is missing).
  std::printf("%-24s %10.2f (%.1f %% of gpu_memory)\n", "headroom", (capacity - memory.total()) / kGiB,
              100 * (capacity - memory.total()) / capacity);
  return 0;
}

}  // namespace

void add_memory_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<MemoryOptions>();
  CLI::App* command = app.add_subcommand("memory", "Peak memory per GPU of a sharding plan, without simulating");
  command->footer(
      "Example:\n"
      "  shardsim memory --cluster a800-1024 --model llama-13b --plan amsp-llama13b --gpus 64\n"
      "  shardsim memory --model llama-30b --plan zero1 --gpus 8 --json\n"
      "  shardsim memory --model path/to/config.json --deepspeed ds_config.json --gpus 64\n"
      "Models, plans and training configs are JSON files or bundled presets (shardsim presets);\n"
      "--model also takes a Hugging Face config.json.");
  add_job_options(*command, options->job);
  command->add_flag("--json", options->json, "Print one JSON object instead of the table");
  command->callback([options, &exit_code] { exit_code = run_memory(*options); });
}

}  // namespace shardsim::cli
