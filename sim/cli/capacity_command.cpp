// shardsim capacity: how many GPUs, and how long? The search at each GPU
// count (sim/search/capacity_plan.h), priced on a token budget; under mpirun
// each count's candidates are shared among the processes, as in search.
#include "sim/cli/commands.h"
#include "workloads/import/model_file.h"

#include "calib/profile.h"
#include "sim/cli/byte_size.h"
#include "sim/cli/job_inputs.h"
#include "sim/cli/mpi_work_share.h"
#include "sim/cli/progress_bar.h"
#include "sim/cli/reliability_options.h"
#include "sim/cli/search_space_options.h"
#include "sim/cli/threads_option.h"
#include "sim/cli/token_count.h"
#include "sim/search/capacity_output.h"
#include "sim/search/capacity_plan.h"
#include "topology/base/atomic_output.h"
#include "topology/base/mpi_session.h"
#include "topology/base/text_format.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/memory/memory_model.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

namespace shardsim::cli {

namespace {

struct CapacityOptions {
  std::string cluster = "dgx-a100-1024";
  std::string model = "llama-7b";
  std::string training = "seq4096-mbs1-4m-tokens";
  std::string profile;
  std::string memory_limit;  // default: the GPU's memory
  std::string tokens;
  std::string gpus;  // default: a node, doubling, up to the cluster
  std::optional<double> deadline_days;
  sim::ReliabilityInputs reliability;
  std::size_t simulate = 8;
  int threads = 0;  // 0: mpi_work_share's default
  SearchSpaceOptions space;
  std::string csv;
  bool json = false;
};

int capacity(const CapacityOptions& options, int rank, int processes) {
  topology::ClusterSpec spec = topology::load_cluster_spec(options.cluster);
  if (!options.memory_limit.empty()) {
    spec.node.gpu_memory_bytes = static_cast<double>(parse_byte_size("--mem-limit", options.memory_limit));
  }
  sim::TrainingBudget budget;
  budget.tokens = parse_token_count("--tokens", options.tokens);
  budget.reliability = options.reliability;
  if (options.deadline_days) {
    if (!(*options.deadline_days > 0) || !std::isfinite(*options.deadline_days)) {
      throw std::invalid_argument("--deadline-days: must be a positive number of days, got " +
                                  printf_string("%g", *options.deadline_days));
    }
    budget.deadline_seconds = *options.deadline_days * sim::kSecondsPerDay;
  }
  sim::SearchRequest request;
  request.model = workloads::load_model(options.model);
  request.training = workloads::load_training_config(options.training);
  workloads::check_sequence_length(request.training, request.model, options.training);
  request.space = parse_search_space(options.space);
  request.simulate = options.simulate;
  request.simulate_pareto_front = false;  // only each count's fastest is wanted
  const calib::Profile profile = load_job_profile(options.profile, spec);
  const topology::Cluster cluster(spec);
  const topology::Router router(cluster);
  std::vector<int> counts;
  if (options.gpus.empty()) {
    counts = sim::default_gpu_counts(cluster);
  } else {
    for (const long long gpus : positive_integers("--gpus", options.gpus, cluster.gpu_count())) {
      counts.push_back(static_cast<int>(gpus));
    }
  }

  sim::PlanSearch planner(cluster, router, profile);
  const sim::WorkShare share = mpi_work_share(rank, processes, options.threads);
  SearchProgressBar progress;
  sim::CapacityPlan plan;
  try {
    plan = sim::plan_capacity(planner, request, counts, budget, share, rank == 0 ? &progress : nullptr);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--gpus: ") + e.what());
  }
  if (rank != 0) return plan.fastest ? 0 : 1;

  const sim::CapacityHeading heading{request.model.name,
                                     static_cast<double>(workloads::count_parameters(request.model).total()),
                                     spec.name,
                                     profile.name,
                                     spec.node.gpu_memory_bytes,
                                     request.simulate};
  if (!options.csv.empty()) {
    AtomicOutputFile out(options.csv);
    sim::write_capacity_csv(out.stream(), plan);
    out.commit();
  }
  if (options.json) {
    std::cout << sim::capacity_to_json(heading, plan).dump(2) << "\n";
  } else {
    sim::print_capacity_table(std::cout, heading, plan);
  }
  return plan.fastest ? 0 : 1;
}

}  // namespace

void add_capacity_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CapacityOptions>();
  CLI::App* command =
      app.add_subcommand("capacity", "How many GPUs, and how long: the fastest plan at each GPU count, on a token budget");
  command->footer(
      "Example:\n"
      "  shardsim capacity --cluster dgx-a100-1024 --model llama-7b --tokens 1T --deadline-days 14\n"
      "  shardsim capacity --model llama-65b --tokens 1.4T --gpus 256,512,1024 --systems megatron --csv plan.csv\n"
      "  mpirun -np 4 shardsim capacity --model llama-13b --tokens 300B      (same output, the work shared)\n"
      "Each GPU count gets the search of `shardsim search` (the same plan space and options); its fastest plan\n"
      "that fits sets the step time, and the token budget at the training config's global batch sets the\n"
      "steps. The table gives days and GPU-hours per count, then the fewest GPUs that finish by the deadline,\n"
      "the count that spends the fewest GPU-hours, and the fastest. Days are at the simulated step rate plus\n"
      "what interruptions cost at the count: a job on n GPUs fails n times as often as one GPU, each failure\n"
      "costs a restart and the work since the last checkpoint, and checkpoints come at the interval that keeps\n"
      "the most time (Daly's optimum). Evaluation is not in them. Exit code 1 when no count has a plan\n"
      "that fits, 2 on bad input or a GPU count the cluster cannot hold.");
  command->add_option("--cluster", options->cluster, "Cluster JSON file or preset")->capture_default_str();
  command->add_option("--model", options->model, "Model JSON, HF config.json or preset")->capture_default_str();
  command->add_option("--training", options->training,
                      "Training config: sequence, global batch (kept at every count), precision")
      ->capture_default_str();
  command->add_option("--tokens", options->tokens, "Tokens to train on, e.g. 300B, 1.4T, 2e12")->required();
  command->add_option("-g,--gpus", options->gpus,
                      "GPU counts to plan for, e.g. 64,128,256 (default: one node, doubling, up to the cluster)");
  command->add_option("--deadline-days", options->deadline_days, "Days the training must finish in");
  command->add_option("--profile", options->profile, "Calibration profile JSON or preset (default: the cluster's)");
  command->add_option("--mem-limit", options->memory_limit, "Memory per GPU a plan must fit in, e.g. 80GiB "
                                                            "(default: the cluster's GPU memory)");
  command->add_option("--simulate", options->simulate, "Fastest estimates simulated on the flow network, per count")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  add_search_space_options(*command, options->space);
  add_threads_option(*command, options->threads);
  add_reliability_options(*command, options->reliability);
  command->add_option("--csv", options->csv, "Write one row per GPU count as CSV");
  command->add_flag("--json", options->json, "Print the plan as JSON");
  command->callback([options, &exit_code] {
    exit_code = run_across_processes("shardsim capacity",
                                     [&](int rank, int size) { return capacity(*options, rank, size); });
  });
}

}  // namespace shardsim::cli
