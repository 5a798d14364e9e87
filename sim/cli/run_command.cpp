#include "sim/cli/commands.h"

#include "calib/profile.h"
#include "sim/cli/index_list.h"
#include "sim/cli/job_inputs.h"
#include "sim/cli/progress_bar.h"
#include "sim/cli/reliability_options.h"
#include "sim/cli/token_count.h"
#include "sim/report/chakra_trace.h"
#include "sim/report/chrome_trace.h"
#include "sim/report/hdf5_timeline.h"
#include "sim/report/step_report.h"
#include "sim/report/step_table.h"
#include "sim/search/interruptions.h"
#include "sim/search/plan_space.h"
#include "sim/search/training_time.h"
#include "sim/step/step_simulator.h"
#include "topology/base/atomic_output.h"
#include "topology/cluster.h"
#include "topology/placement.h"
#include "topology/routing.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/memory/allocator_replay.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>

namespace shardsim::cli {

namespace {

struct RunOptions {
  JobOptions job;
  std::string profile;  // default: the cluster's
  std::string network = "flow";
  std::string placement = "consecutive";
  std::string record_ranks;  // default: the first node's ranks
  std::string trace;
  std::string h5;
  std::string program;
  std::string chakra;  // a file prefix
  int breakdown_rank = 0;
  std::string tokens;  // a training budget to price the step on
  sim::ReliabilityInputs reliability;  // and what interrupts it
  bool json = false;
};

std::vector<int> recorded_ranks(const RunOptions& options, int ranks, int gpus_per_node) {
  std::vector<int> list;
  if (options.record_ranks == "all") {
    for (int r = 0; r < ranks; ++r) list.push_back(r);
  } else if (options.record_ranks.empty()) {
    for (int r = 0; r < std::min(ranks, gpus_per_node); ++r) list.push_back(r);
  } else {
    list = parse_index_list("--record-ranks", options.record_ranks);
    for (int r : list) {
      if (r >= ranks) {
        throw std::invalid_argument("--record-ranks: rank " + std::to_string(r) + " is outside the job (" +
                                    std::to_string(ranks) + " ranks)");
      }
    }
  }
  return list;
}

// `<prefix>.<rank>.et` for every rank and `<prefix>.json`, the comm groups:
// all of them or none.
void write_chakra_traces(const std::string& prefix, const workloads::Program& program,
                         const calib::Profile& profile) {
  const sim::ChakraTraceWriter writer(program, profile);
  AtomicOutputFiles files;
  for (int rank = 0; rank < program.ranks; ++rank) {
    writer.write_rank(files.next(prefix + "." + std::to_string(rank) + ".et"), rank);
  }
  writer.write_comm_groups(files.next(prefix + ".json"));
  files.commit();
}

// What failures add to the budget's time, under the training line.
void print_interruptions(const sim::ReliabilityInputs& inputs, const sim::Goodput& g, int gpus) {
  if (g.job_failures_per_second == 0) {
    std::printf("%-30s %12s no failures (--failures-per-gpu-day 0)\n", "with interruptions", "");
    return;
  }
  if (!std::isfinite(g.wall_seconds)) {
    std::printf("%-30s %12s never finishes: the job fails every %.3g s and a restart takes %.3g s\n",
                "with interruptions", "", 1 / g.job_failures_per_second, g.restart_seconds);
    return;
  }
  std::printf("%-30s %12.2f days, %.0f GPU-hours, ETTR %.1f %%: %.1f expected failures (one every %.1f h on %d GPUs at "
              "%.3g per GPU-day), %.0f s restarts, %.1f s checkpoints every %.1f min\n",
              "with interruptions", g.wall_seconds / sim::kSecondsPerDay, gpus * g.wall_seconds / sim::kSecondsPerHour,
              100 * g.ettr, g.expected_failures, 1 / g.job_failures_per_second / sim::kSecondsPerHour, gpus,
              inputs.failures_per_gpu_day, g.restart_seconds, g.checkpoint_seconds,
              g.checkpoint_interval_seconds / 60);
}

// The first rank that runs each of the program's rank programs, by index.
std::vector<int> first_rank_of_each_program(const workloads::Program& program) {
  std::vector<int> first(program.programs.size(), -1);
  for (int rank = program.ranks - 1; rank >= 0; --rank) {
    first[static_cast<std::size_t>(program.program_of_rank[static_cast<std::size_t>(rank)])] = rank;
  }
  return first;
}

int run_step(const RunOptions& options) {
  JobInputs inputs = load_job_inputs(options.job);
  print_notes(inputs);
  workloads::StepConfig& step = inputs.step;
  if (options.breakdown_rank < 0 || options.breakdown_rank >= step.ranks()) {
    throw std::invalid_argument("--rank " + std::to_string(options.breakdown_rank) + ": the job has ranks 0 to " +
                                std::to_string(step.ranks() - 1));
  }
  const std::vector<int> record = recorded_ranks(options, step.ranks(), inputs.cluster.node.gpus);
  const double tokens = options.tokens.empty() ? 0 : parse_token_count("--tokens", options.tokens);
  const calib::Profile profile = load_job_profile(options.profile, inputs.cluster);
  check_profile_runs_job(inputs, profile);
  const topology::Cluster cluster(inputs.cluster);
  const topology::Router router(cluster);

  const workloads::Program program = workloads::compile(step);
  if (!options.program.empty()) {
    AtomicOutputFile out(options.program);
    out.stream() << workloads::program_to_json(program).dump(1) << "\n";
    out.commit();
  }
  if (!options.chakra.empty()) write_chakra_traces(options.chakra, program, profile);
  sim::StepSimulationOptions simulation;
  simulation.network = sim::parse_network_mode(options.network);
  // Timings of the ranks the trace and the HDF5 file write, and of the one
  // the breakdown is of: a pipeline step keeps half a gigabyte for all 1024.
  std::vector<int> timed{options.breakdown_rank};
  if (!options.trace.empty() || !options.h5.empty()) timed.insert(timed.end(), record.begin(), record.end());
  // And a rank of each distinct program (a pipeline's stages), for the
  // caching allocator's replay of whichever holds the most.
  const std::vector<int> programs = first_rank_of_each_program(program);
  timed.insert(timed.end(), programs.begin(), programs.end());
  simulation.timed_ranks = std::move(timed);
  const int group_ranks = sim::placement_group_ranks(step.plan, inputs.factors, step.ranks());
  simulation.gpu_of_rank =
      topology::place_ranks(cluster, step.ranks(), topology::parse_placement_policy(options.placement), group_ranks).gpu_of_rank;
  auto progress = std::make_shared<ProgressBar>("simulating " + std::to_string(program.total_ops()) + " ops", 100);
  std::size_t shown = 0;
  simulation.on_progress = [&](double fraction) {
    while (shown < static_cast<std::size_t>(fraction * 100)) {
      progress->advance();
      ++shown;
    }
  };
  const workloads::Timeline timeline = sim::simulate(program, cluster, router, profile, simulation);
  progress.reset();
  sim::StepSummary summary =
      sim::summarize_step(program, timeline, profile, inputs.cluster.node.gpu_memory_bytes, options.breakdown_rank);
  if (!timeline.out_of_memory) {
    const int peak_program = program.program_of_rank[static_cast<std::size_t>(summary.peak_memory_rank)];
    const workloads::AllocatorPeaks allocator = workloads::replay_caching_allocator(
        program, timeline, programs[static_cast<std::size_t>(peak_program)],
        {step.plan.expandable_segments, workloads::allocator_bytes(inputs.cluster.node.gpu_memory_bytes)});
    summary.reserved_memory_bytes = allocator.reserved_bytes;
    summary.allocator_out_of_memory = allocator.out_of_memory;
  }
  nlohmann::json summary_json = sim::summary_to_json(program, timeline, summary);
  summary_json["cluster"] = inputs.cluster.name;
  summary_json["profile"] = profile.name;
  summary_json["network"] = options.network;
  std::optional<sim::TrainingTime> training;
  sim::Goodput interruptions;
  if (tokens > 0 && !timeline.out_of_memory) {
    training = sim::training_time(tokens, step.training.global_batch_tokens(), summary.step_seconds, step.ranks());
    interruptions = sim::expected_goodput(options.reliability, step.ranks(),
                                          sim::training_state_bytes(step.model, step.training), training->seconds);
    summary_json["training_budget"] = {{"tokens", tokens},
                                       {"steps", training->steps},
                                       {"seconds", training->seconds},
                                       {"gpu_hours", training->gpu_hours},
                                       {"reliability", sim::reliability_to_json(options.reliability)},
                                       {"interruptions", sim::goodput_to_json(interruptions)}};
  }

  if (!options.trace.empty()) {
    AtomicOutputFile out(options.trace);
    sim::write_chrome_trace(out.stream(), program, timeline, record);
    out.commit();
  }
  if (!options.h5.empty()) sim::write_hdf5_timeline(options.h5, program, timeline, record, cluster, summary_json);
  if (options.json) {
    std::cout << summary_json.dump(2) << "\n";
  } else {
    print_step_table("shardsim run", program, timeline, summary, inputs.cluster.name);
    if (training) {
      std::printf("%-30s %12.2f days, %lld steps, %.0f GPU-hours (at this step time: no failures, restarts, "
                  "checkpoints or evaluation)\n",
                  ("training on " + options.tokens + " tokens").c_str(), training->seconds / sim::kSecondsPerDay,
                  static_cast<long long>(training->steps), training->gpu_hours);
      print_interruptions(options.reliability, interruptions, step.ranks());
    }
  }
  return timeline.out_of_memory ? 1 : 0;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand("run", "Simulate one training step: step time, MFU, memory, breakdown");
  command->footer(
      "Example:\n"
      "  shardsim run --cluster dgx-a100-1024 --model llama-7b --plan zero3\n"
      "  shardsim run --cluster a800-1024 --model llama-30b --plan amsp-llama30b \\\n"
      "               --training seq4096-mbs1-4m-tokens-full-recompute --gpus 64 --overlap ag-rs\n"
      "  shardsim run --model llama-13b --deepspeed ds_config.json --gpus 64 --trace step.json --h5 step.h5\n"
      "  shardsim run --model llama-7b --plan zero3 --gpus 16 --chakra llama7b     (for ASTRA-sim)\n"
      "Exit code 1 when the plan does not fit in GPU memory (reported, with the breakdown at\n"
      "the failing allocation), 2 on bad input. Every rank is simulated; --record-ranks picks the\n"
      "ranks --trace and --h5 write (default: the first node's).");
  add_job_options(*command, options->job);
  command->add_option("--profile", options->profile, "Calibration profile JSON or preset (default: the cluster's)");
  command->add_option("--network", options->network, "flow: shared links, max-min fair; analytical: alpha-beta; "
                                                        "table: measured curves of the profile, else alpha-beta")
      ->check(CLI::IsMember({"flow", "analytical", "table"}))
      ->capture_default_str();
  add_plan_variant_options(*command, options->job);
  command->add_option("--placement", options->placement,
                      "Which GPUs the ranks get: consecutive, leaf-aware (sharding groups under few leaf switches) "
                      "or scattered (a fragmented allocation)")
      ->check(CLI::IsMember({"consecutive", "leaf-aware", "scattered"}))
      ->capture_default_str();
  command->add_option("--rank", options->breakdown_rank, "Rank whose time breakdown is shown")->capture_default_str();
  command->add_option("--record-ranks", options->record_ranks, "Ranks written to --trace/--h5: list (0,3,8-15) or all");
  command->add_option("--trace", options->trace, "Write a Chrome trace (Perfetto) of the recorded ranks");
  command->add_option("--h5", options->h5, "Write the timeline of the recorded ranks as HDF5 (schema in the README)");
  command->add_option("--program", options->program, "Write the compiled Program as JSON");
  command->add_option("--chakra", options->chakra,
                      "Write the Program as Chakra execution traces for ASTRA-sim: PREFIX.<rank>.et for every rank "
                      "and PREFIX.json")
      ->type_name("PREFIX");
  command->add_option("--tokens", options->tokens,
                      "Price the step on a training budget, e.g. 300B, 1.4T: steps, days, GPU-hours");
  add_reliability_options(*command, options->reliability);
  command->add_flag("--json", options->json, "Print one JSON object instead of the table");
  command->callback([options, &exit_code] { exit_code = run_step(*options); });
}

}  // namespace shardsim::cli
