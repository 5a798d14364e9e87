// shardsim scenarios FILE --csv OUT: runs a bundled set of training-step
// simulations (every model x plan x GPU count x overlap level of each entry)
// and writes one CSV row per run; the rows a plan's rules refuse say why.
//
//   {"name": "...", "cluster": "a800-1024", "sources": ["..."],
//    "runs": [{"model": "llama-7b", "training": "seq4096-mbs1-4m-tokens",
//              "plans": ["zero1", "zero3"], "gpus": [8, 16, 32],
//              "overlap": ["plan"]}]}
#include "sim/cli/commands.h"
#include "workloads/import/model_file.h"

#include "calib/profile.h"
#include "sim/cli/job_inputs.h"
#include "sim/cli/progress_bar.h"
#include "sim/cli/threads_option.h"
#include "sim/report/step_report.h"
#include "sim/search/parallel_for.h"
#include "sim/step/step_simulator.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/base/text_format.h"
#include "topology/cluster.h"
#include "topology/routing.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>

namespace shardsim::cli {

namespace {

using shardsim::csv_field;

struct ScenarioRun {
  std::string model, training;
  std::vector<std::string> plans, overlaps;
  std::vector<int> gpus;
};

struct ScenarioOptions {
  std::string file;
  std::string csv;
  int threads = 0;  // 0: threads_to_use's default
};

std::vector<ScenarioRun> parse_runs(JsonObjectReader& reader) {
  std::vector<ScenarioRun> runs;
  const nlohmann::json& list = reader.value("runs");
  if (!list.is_array() || list.empty()) reader.fail("runs", "must be a non-empty array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    JsonObjectReader entry(list[i], reader.file(), reader.field_path("runs[" + std::to_string(i) + "]"));
    ScenarioRun run;
    run.model = entry.string("model");
    run.training = entry.string("training");
    run.plans = entry.string_list("plans");
    run.overlaps = entry.string_list("overlap");
    if (run.plans.empty()) entry.fail("plans", "must name at least one plan");
    if (run.overlaps.empty()) entry.fail("overlap", "must name at least one level (plan, all, ag-rs+ar, ag-rs, none)");
    for (const std::string& level : run.overlaps) {
      if (std::find(workloads::kOverlapLevels.begin(), workloads::kOverlapLevels.end(), level) ==
          workloads::kOverlapLevels.end()) {
        entry.fail("overlap", "unknown level '" + level + "' (plan, all, ag-rs+ar, ag-rs, none)");
      }
    }
    const nlohmann::json& gpus = entry.value("gpus");
    if (!gpus.is_array() || gpus.empty()) entry.fail("gpus", "must be a non-empty array of GPU counts");
    for (const auto& count : gpus) {
      if (!count.is_number_integer() || count.get<long long>() < 1 || count.get<long long>() > kMaxGpuCount) {
        entry.fail("gpus", "must hold GPU counts from 1 to " + std::to_string(kMaxGpuCount) + ", got " + count.dump());
      }
      run.gpus.push_back(count.get<int>());
    }
    // A name that resolves to nothing is a typo in this file, not a row: the
    // rows are for combinations a plan's rules refuse.
    const auto resolves = [&](const char* field, const std::string& name, const auto& load) {
      try {
        load(name);
      } catch (const InputError& e) {
        entry.fail(field, e.what());
      }
    };
    resolves("model", run.model, [](const std::string& name) { workloads::load_model(name); });
    resolves("training", run.training, [](const std::string& name) { workloads::load_training_config(name); });
    for (const std::string& plan : run.plans) {
      resolves("plans", plan, [](const std::string& name) { workloads::load_plan(name); });
    }
    entry.finish();
    runs.push_back(std::move(run));
  }
  return runs;
}

int run_scenarios(const ScenarioOptions& options) {
  const nlohmann::json document = load_json_file(options.file);
  JsonObjectReader reader(document, options.file);
  reader.string("name");
  const std::string cluster_name = reader.string("cluster");
  reader.string_list("sources");
  const std::vector<ScenarioRun> runs = parse_runs(reader);
  reader.finish();

  const topology::ClusterSpec spec = [&] {
    try {
      return topology::load_cluster_spec(cluster_name);
    } catch (const InputError& e) {
      reader.fail("cluster", e.what());
    }
  }();
  // A count the cluster cannot hold is this file's, named at its entry (not
  // a row: the rows are for what a plan's rules refuse).
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (std::size_t j = 0; j < runs[i].gpus.size(); ++j) {
      if (runs[i].gpus[j] > spec.gpu_count()) {
        throw_input_error(options.file, "runs[" + std::to_string(i) + "].gpus[" + std::to_string(j) + "]",
                          std::to_string(runs[i].gpus[j]) + " GPUs, but cluster " + cluster_name + " has " +
                              std::to_string(spec.gpu_count()));
      }
    }
  }
  const topology::Cluster cluster(spec);
  const topology::Router router(cluster);
  const calib::Profile profile = load_job_profile("", spec);

  // One row per model x plan x GPU count x overlap, each simulated apart
  // (on the threads) and written in this order.
  struct Row {
    const ScenarioRun* run;
    std::string plan;
    int gpus;
    std::string overlap;
  };
  std::vector<Row> rows;
  for (const ScenarioRun& run : runs) {
    for (const std::string& plan : run.plans) {
      for (int gpus : run.gpus) {
        for (const std::string& overlap : run.overlaps) rows.push_back({&run, plan, gpus, overlap});
      }
    }
  }
  ProgressBar progress("scenarios", rows.size());
  std::vector<std::string> lines(rows.size());
  sim::parallel_for(rows.size(), threads_to_use(options.threads, 1), [&](int, std::size_t k) {
    const Row& row = rows[k];
    std::ostringstream out;
    out << std::setprecision(6);
    out << row.run->model << "," << row.plan << ",";
    JobOptions job;
    job.cluster = cluster_name;
    job.model = row.run->model;
    job.plan = row.plan;
    job.training = row.run->training;
    job.gpus = row.gpus;
    try {
      JobInputs inputs = load_job_inputs(job);
      workloads::apply_overlap_level(inputs.step.plan, row.overlap);
      const workloads::Program program = workloads::compile(inputs.step);
      sim::StepSimulationOptions simulation;
      simulation.timed_ranks = std::vector<int>{0};  // the breakdown's rank
      const workloads::Timeline timeline = sim::simulate(program, cluster, router, profile, simulation);
      const sim::StepSummary summary = sim::summarize_step(program, timeline, profile, spec.node.gpu_memory_bytes);
      const nlohmann::json& d = program.description;
      out << d["system"].get<std::string>() << "," << row.gpus << "," << row.overlap << ","
          << d["factors"]["parameters"] << "," << d["factors"]["gradients"] << "," << d["factors"]["optimizer"] << ","
          << d["gradient_accumulation_steps"] << ",";
      if (timeline.out_of_memory) {
        out << ",,,,no,,out of memory at " << csv_field(timeline.out_of_memory->op) << "\n";
      } else {
        out << summary.step_seconds << "," << summary.mfu << "," << summary.tokens_per_gpu_per_second << ","
            << summary.peak_memory.total_bytes / (1024.0 * 1024.0 * 1024.0) << ",yes,"
            << summary.breakdown.exposed_total() << ",\n";
      }
    } catch (const InputError& e) {
      // A combination the plan's rules refuse (factors that do not divide
      // the GPU count, say) is a row that says why, not a failed run.
      out << "," << row.gpus << "," << row.overlap << ",,,,,,,,,,," << csv_field(e.what()) << "\n";
    }
    lines[k] = out.str();
    progress.advance();
  });
  std::string csv =
      "model,plan,system,gpus,overlap,f_p,f_g,f_os,micro_batches,step_seconds,mfu,tokens_per_gpu_per_second,"
      "peak_memory_gib,fits,exposed_communication_seconds,note\n";
  for (const std::string& line : lines) csv += line;
  if (options.csv.empty()) {
    std::fputs(csv.c_str(), stdout);
  } else {
    AtomicOutputFile file(options.csv);
    file.stream() << csv;
    file.commit();
  }
  return 0;
}

}  // namespace

void add_scenarios_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<ScenarioOptions>();
  CLI::App* command = app.add_subcommand("scenarios", "Run a bundled set of training-step simulations into a CSV");
  command->footer(
      "Example (regenerates results/amsp/predictions.csv):\n"
      "  shardsim scenarios results/amsp/scenarios.json --csv results/amsp/predictions.csv");
  command->add_option("file", options->file, "Scenario JSON (cluster, and runs of models x plans x GPUs x overlaps)")
      ->required();
  command->add_option("--csv", options->csv, "Write the CSV here instead of stdout");
  add_threads_option(*command, options->threads);
  command->callback([options, &exit_code] { exit_code = run_scenarios(*options); });
}

}  // namespace shardsim::cli
