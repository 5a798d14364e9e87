// The inputs every training-step command shares (run, memory, exec): a
// cluster, a model, a sharding plan (or a DeepSpeed config, or Megatron-LM
// arguments), a training config and a GPU count, as command-line options and
// as loaded, checked values.
#pragma once

#include "calib/profile.h"
#include "topology/cluster_spec.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/job_scale.h"
#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace shardsim::cli {

struct JobOptions {
  std::string cluster = "dgx-a100-1024";
  std::string model = "llama-7b";
  std::string plan = "zero3";
  std::string training = "seq4096-mbs1-4m-tokens";
  std::string deepspeed;  // replaces the plan and the batch
  std::string megatron;   // Megatron-LM arguments: replace the plan and the training config's fields they give
  int gpus = 0;           // 0: the whole cluster
  std::string scale;      // workloads::JobScale, empty: the job as given
  int expert_parallel = 0;            // 0: as the plan says
  std::string expert_layout = "plan";  // or E+D / D+E
  int ulysses = 0;                     // 0: as the plan says
  std::string overlap = "plan";    // or an overlap level (workloads::kOverlapLevels)
  std::string behaviour = "plan";  // or as_implemented / ideal
  std::string memory_limit;        // --mem-limit, e.g. 80GiB; empty: the cluster's GPU memory
};

struct JobInputs {
  topology::ClusterSpec cluster;
  workloads::StepConfig step;  // model, training, plan, data-parallel size
  workloads::ShardingFactors factors;
  std::int64_t gradient_accumulation_steps = 1;
  workloads::JobScale scale;
  // What the inputs could not carry over (a Megatron-LM flag shardsim does
  // not model, ...): each command prints them, once per job.
  std::vector<std::string> notes;
};

// Prints `notes` to stderr, one "note:" line each.
void print_notes(const JobInputs& inputs);

void add_job_options(CLI::App& command, JobOptions& options);
// --overlap and --behaviour: the plan's variants, for the commands that run a
// step (simulated or real).
void add_plan_variant_options(CLI::App& command, JobOptions& options);

// Throws InputError / std::invalid_argument with the file, field or option at fault.
JobInputs load_job_inputs(const JobOptions& options);

// The profile --profile names, else the cluster's own; a cluster whose
// profile cannot be loaded is refused naming the cluster file's field. A
// --profile of another device than the cluster's own profile gets a note on
// stderr.
calib::Profile load_job_profile(const std::string& profile_option, const topology::ClusterSpec& cluster);

// Throws InputError naming the training config's precision or fp8_gemms when
// the profile has no GEMMs of that dtype (fp8 on an A100).
void check_profile_runs_job(const JobInputs& inputs, const calib::Profile& profile);
}  // namespace shardsim::cli
