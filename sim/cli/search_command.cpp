// shardsim search: which sharding plan and placement train fastest within
// the GPUs' memory (sim/search/plan_search.h); under mpirun the candidates
// are shared among the processes and rank 0 writes the same output a lone
// process would.
#include "sim/cli/commands.h"
#include "workloads/import/model_file.h"

#include "calib/profile.h"
#include "sim/cli/byte_size.h"
#include "sim/cli/job_inputs.h"
#include "sim/cli/mpi_work_share.h"
#include "sim/cli/progress_bar.h"
#include "sim/cli/search_space_options.h"
#include "sim/cli/threads_option.h"
#include "sim/report/step_table.h"
#include "sim/search/plan_search.h"
#include "sim/search/search_output.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/base/mpi_session.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/memory/memory_model.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>

namespace shardsim::cli {

namespace {

struct SearchOptions {
  std::string cluster = "dgx-a100-1024";
  std::string model = "llama-7b";
  std::string training = "seq4096-mbs1-4m-tokens";
  std::string profile;
  int gpus = 0;
  std::string memory_limit;  // default: the GPU's memory
  std::size_t top = 10;
  std::size_t simulate = 16;
  int threads = 0;  // 0: mpi_work_share's default
  SearchSpaceOptions space;
  bool show_rejected = false;
  std::string csv;
  std::string h5;
  bool json = false;
  std::size_t explain = 0;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void print_memory(const workloads::MemoryBreakdown& memory) {
  for (const auto& [name, bytes] : workloads::memory_components(memory)) std::printf("  %-24s %10.2f GiB\n", name, bytes / kGiB);
  std::printf("  %-24s %10.2f GiB\n", "total", memory.total() / kGiB);
}

int search(const SearchOptions& options, int rank, int processes) {
  const bool root = rank == 0;
  topology::ClusterSpec spec = topology::load_cluster_spec(options.cluster);
  if (!options.memory_limit.empty()) {
    spec.node.gpu_memory_bytes = static_cast<double>(parse_byte_size("--mem-limit", options.memory_limit));
  }
  const int gpus = options.gpus == 0 ? spec.gpu_count() : options.gpus;
  sim::SearchRequest request;
  request.model = workloads::load_model(options.model);
  request.training = workloads::load_training_config(options.training);
  workloads::check_sequence_length(request.training, request.model, options.training);
  request.gpus = gpus;
  request.space = parse_search_space(options.space);
  request.simulate = options.simulate;
  const calib::Profile profile = load_job_profile(options.profile, spec);
  const topology::Cluster cluster(spec);
  const topology::Router router(cluster);
  sim::PlanSearch planner(cluster, router, profile);

  const sim::WorkShare share = mpi_work_share(rank, processes, options.threads);
  try {
    topology::place_ranks(cluster, gpus, topology::PlacementPolicy::consecutive);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--gpus: ") + e.what());
  }
  SearchProgressBar progress;
  const sim::SearchResult result = planner.run(request, share, root ? &progress : nullptr);
  if (!root) return result.ranked.empty() ? 1 : 0;

  const sim::SearchHeading heading{request.model.name,
                                   static_cast<double>(workloads::count_parameters(request.model).total()),
                                   spec.name, profile.name, gpus, spec.node.gpu_memory_bytes};
  if (!options.csv.empty()) {
    AtomicOutputFile out(options.csv);
    sim::write_search_csv(out.stream(), result);
    out.commit();
  }
  if (!options.h5.empty()) sim::write_search_hdf5(options.h5, heading, result);
  if (result.ranked.empty()) {
    const sim::Candidate& smallest = result.candidates[result.smallest];
    std::printf("shardsim search: nothing fits in %.1f GiB per GPU: %zu candidates, none fits%s.\n",
                spec.node.gpu_memory_bytes / kGiB, result.candidates.size(),
                result.estimated ? " through a whole step" : " by the memory model");
    std::printf("The smallest, %s, needs (memory model):\n", sim::describe(smallest).c_str());
    print_memory(result.results[result.smallest].memory);
    std::printf("Try more GPUs, full recompute, a smaller micro-batch, or a larger --mem-limit.\n");
    if (options.show_rejected) sim::print_rejections(std::cout, result, spec.node.gpu_memory_bytes);
    return 1;
  }
  if (options.json) {
    std::cout << sim::search_to_json(heading, result, options.top).dump(2) << "\n";
  } else {
    sim::print_search_table(std::cout, heading, result, options.top);
    if (options.show_rejected) sim::print_rejections(std::cout, result, spec.node.gpu_memory_bytes);
  }
  if (options.explain > 0) {
    if (options.explain > result.ranked.size()) {
      throw std::invalid_argument("--explain " + std::to_string(options.explain) + ": the search ranked " +
                                  std::to_string(result.ranked.size()) + " plans");
    }
    const sim::Candidate& candidate = result.candidates[result.ranked[options.explain - 1]];
    const workloads::Program program = planner.compile(request, candidate);
    const workloads::Timeline timeline = planner.simulate(program, candidate);
    const sim::StepSummary summary = sim::summarize_step(program, timeline, profile, spec.node.gpu_memory_bytes, 0);
    std::cout.flush();
    const int group = std::max(sim::placement_group_ranks(candidate.plan, candidate.factors, gpus), 1);
    std::vector<int> first_group(static_cast<std::size_t>(group));
    std::iota(first_group.begin(), first_group.end(), 0);
    std::printf("\n# explain rank %zu: %s; its largest sharding group below the job (%d GPUs) sits under %d leaf "
                "block(s)\n",
                options.explain, sim::describe(candidate).c_str(), group,
                topology::leaf_blocks_spanned(cluster, *candidate.placement, first_group));
    std::printf("# memory model (what the filter used):\n");
    print_memory(result.results[candidate.index].memory);
    print_step_table("shardsim search --explain " + std::to_string(options.explain), program, timeline, summary,
                     spec.name);
  }
  return 0;
}

int run_search_command(const SearchOptions& options) {
  return run_across_processes("shardsim search", [&](int rank, int size) { return search(options, rank, size); });
}

}  // namespace

void add_search_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<SearchOptions>();
  CLI::App* command = app.add_subcommand("search", "Find the sharding plan and placement that train fastest in memory");
  command->footer(
      "Example:\n"
      "  shardsim search --cluster a800-1024 --model llama-7b --gpus 1024 --top 10\n"
      "  shardsim search --model llama-30b --mem-limit 60GiB --csv all.csv --h5 all.h5 --explain 1\n"
      "  mpirun -np 4 shardsim search --model llama-13b      (same output, the work shared)\n"
      "  shardsim search --model llama-65b --systems megatron,zero-pipeline   (pipelines only)\n"
      "Every AMSP factor triple and named system (ZeRO-0..3, FSDP, MiCS(k), ZeRO++ hpZ(k)) is crossed\n"
      "with bucket sizes, micro-batch sizes, recompute and placements, and every Megatron-LM layout\n"
      "(tensor x pipeline x virtual stages) and ZeroPP layout (stages, unit, factors) with micro-batch\n"
      "sizes and recompute; the memory model drops what\n"
      "does not fit, an analytical estimate ranks the rest, and the --simulate best (plus the\n"
      "estimates' Pareto front) are simulated on the flow network. Exit code 1 when nothing fits\n"
      "(the smallest plan's memory is shown), 2 on bad input or a GPU count the cluster cannot hold.");
  command->add_option("--cluster", options->cluster, "Cluster JSON file or preset")->capture_default_str();
  command->add_option("--model", options->model, "Model JSON, HF config.json or preset")->capture_default_str();
  command->add_option("--training", options->training, "Training config (sequence, global batch, precision); "
                                                       "micro-batch and recompute are searched")
      ->capture_default_str();
  command->add_option("-g,--gpus", options->gpus, "GPUs of the job (default: the whole cluster)");
  command->add_option("--profile", options->profile, "Calibration profile JSON or preset (default: the cluster's)");
  command->add_option("--mem-limit", options->memory_limit, "Memory per GPU a plan must fit in, e.g. 80GiB "
                                                            "(default: the cluster's GPU memory)");
  command->add_option("--top", options->top, "Rows of the ranked table")->capture_default_str();
  command->add_option("--simulate", options->simulate, "Fastest estimates simulated on the flow network")
      ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
      ->capture_default_str();
  command->add_flag("--show-rejected", options->show_rejected, "List every rejected candidate with the reason");
  add_search_space_options(*command, options->space);
  add_threads_option(*command, options->threads);
  command->add_option("--csv", options->csv, "Write every candidate, estimated and simulated numbers, as CSV");
  command->add_option("--h5", options->h5, "Write every candidate as an HDF5 table (/candidates)");
  command->add_flag("--json", options->json, "Print the ranked table and Pareto front as JSON");
  command->add_option("--explain", options->explain, "Show the time and memory breakdown of the plan ranked RANK");
  command->callback([options, &exit_code] { exit_code = run_search_command(*options); });
}

}  // namespace shardsim::cli
