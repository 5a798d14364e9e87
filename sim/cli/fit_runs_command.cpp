// shardsim calib fit-runs RUNS.json [-o DIR] [--csv FILE]: the profile's
// kernel_time_factor (calib/run_fit.h) fitted to published end-to-end runs,
// each simulated as `shardsim run` would run it, with the errors of runs
// left out of the fit printed beside the in-sample ones.
//
// RUNS.json: {"source": "...", "runs": [{"name": "...", "family": "...",
//   "measured_step_seconds": 12.3, "role": "fit", "arguments": ["--cluster", "...", ...]}]}
// role "fit" (the default) runs are fitted to; "check" runs are only
// predicted under the fitted factor: the half of the data kept out.
// where arguments are `shardsim run`'s job options (--cluster, --model,
// --plan or --megatron or --deepspeed, --training, --gpus, --overlap, ...,
// --profile, --network, --placement), relative paths taken from the current
// directory.
#include "sim/cli/commands.h"

#include "calib/profile.h"
#include "calib/run_fit.h"
#include "sim/cli/job_inputs.h"
#include "sim/cli/threads_option.h"
#include "sim/report/step_report.h"
#include "sim/search/plan_space.h"
#include "sim/step/step_simulator.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/base/text_format.h"
#include "topology/cluster.h"
#include "topology/placement.h"
#include "topology/routing.h"
#include "workloads/compile/step_compiler.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <thread>

namespace shardsim::cli {

namespace {

using nlohmann::json;

struct FitRunsOptions {
  std::string runs;
  std::string output_dir;
  std::string csv;
  double probe_factor = 1.25;
  int threads = 0;
};

struct RunSpec {
  std::string name;
  std::string family;
  double measured_seconds = 0;
  bool check = false;  // kept out of the fit
  std::vector<std::string> arguments;
};

// One run, compiled, placed and routed once, simulated at any kernel time
// factor (a 16,384-GPU cluster's routes take a while to build).
struct CompiledRun {
  JobInputs inputs;
  calib::Profile profile;
  json profile_document;
  workloads::Program program;
  std::string network = "flow";
  std::unique_ptr<const topology::Cluster> cluster;
  std::unique_ptr<const topology::Router> router;  // on *cluster
  std::vector<topology::GpuId> gpu_of_rank;
};

std::vector<RunSpec> load_runs(const std::string& file) {
  const json document = load_json_file(file);
  JsonObjectReader reader(document, file);
  reader.string("source");
  const json& runs = reader.value("runs");
  if (!runs.is_array() || runs.empty()) reader.fail("runs", "must be a non-empty array of runs");
  reader.finish();
  std::vector<RunSpec> specs;
  std::set<std::string> names;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    JsonObjectReader run(runs[i], file, "runs[" + std::to_string(i) + "]");
    RunSpec spec;
    spec.name = run.string("name");
    spec.family = run.string("family");
    spec.measured_seconds = run.positive_number("measured_step_seconds");
    spec.arguments = run.string_list("arguments");
    if (run.has("role")) spec.check = run.choice("role", {"fit", "check"}) == "check";
    run.finish();
    if (!names.insert(spec.name).second) run.fail("name", "'" + spec.name + "' names two runs");
    specs.push_back(std::move(spec));
  }
  return specs;
}

CompiledRun compile_run(const RunSpec& spec, const std::string& file) {
  CLI::App app("run");
  JobOptions job;
  std::string profile;
  std::string placement = "consecutive";
  CompiledRun run;
  add_job_options(app, job);
  add_plan_variant_options(app, job);
  app.add_option("--profile", profile);
  app.add_option("--network", run.network)->check(CLI::IsMember({"flow", "analytical", "table"}));
  app.add_option("--placement", placement);
  std::vector<std::string> arguments(spec.arguments.rbegin(), spec.arguments.rend());
  try {
    app.parse(arguments);
  } catch (const CLI::ParseError& e) {
    throw_input_error(file, "runs." + spec.name + ".arguments", e.what());
  }
  run.inputs = load_job_inputs(job);
  run.profile = load_job_profile(profile, run.inputs.cluster);
  check_profile_runs_job(run.inputs, run.profile);
  if (run.profile.compute.kernel_time_factor != 1) {
    throw_input_error(file, "runs." + spec.name + ".arguments",
                      "its profile " + run.profile.file + " already has a fitted kernel_time_factor: fit from the profile it was fitted from");
  }
  run.profile_document = load_json_file(run.profile.file);
  run.program = workloads::compile(run.inputs.step);
  run.cluster = std::make_unique<const topology::Cluster>(run.inputs.cluster);
  run.router = std::make_unique<const topology::Router>(*run.cluster);
  const int group_ranks = sim::placement_group_ranks(run.inputs.step.plan, run.inputs.factors, run.inputs.step.ranks());
  run.gpu_of_rank = topology::place_ranks(*run.cluster, run.inputs.step.ranks(),
                                          topology::parse_placement_policy(placement), group_ranks)
                        .gpu_of_rank;
  return run;
}

double simulate_step_seconds(const CompiledRun& run, double factor, const RunSpec& spec, const std::string& file) {
  calib::Profile profile = run.profile;
  profile.compute.kernel_time_factor = factor;
  sim::StepSimulationOptions options;
  options.network = sim::parse_network_mode(run.network);
  options.gpu_of_rank = run.gpu_of_rank;
  options.timed_ranks = std::vector<int>{0};
  const workloads::Timeline timeline = sim::simulate(run.program, *run.cluster, *run.router, profile, options);
  if (timeline.out_of_memory) {
    throw_input_error(file, "runs." + spec.name,
                      "runs out of memory in the simulation, so it is not the published run it stands for (check its "
                      "GPUs, batch, recompute and the cluster's memory)");
  }
  return sim::summarize_step(run.program, timeline, profile, run.inputs.cluster.node.gpu_memory_bytes, 0).step_seconds;
}

// Runs `work(i)` for i in [0, n) on `threads` threads. If any throw, the
// exception of the lowest i is rethrown, whatever the threads' timing.
template <typename Work>
void parallel_for(std::size_t n, int threads, Work work) {
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> failures(n);
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) {
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < n; i = next++) {
        try {
          work(i);
        } catch (...) {
          failures[i] = std::current_exception();
        }
      }
    });
  }
  for (auto& thread : pool) thread.join();
  for (const auto& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / values.size();
}

void print_family_means(const std::vector<RunSpec>& specs, const std::vector<std::size_t>& members_of_half,
                        const std::vector<double>& before, const std::vector<double>& after,
                        const std::vector<double>* family_out) {
  std::map<std::string, std::vector<std::size_t>> by_family;
  for (std::size_t i : members_of_half) by_family[specs[i].family].push_back(i);
  for (const auto& [family, members] : by_family) {
    std::vector<double> b, a, f;
    for (std::size_t i : members) {
      b.push_back(before[i]);
      a.push_back(after[i]);
      if (family_out != nullptr) f.push_back((*family_out)[i]);
    }
    std::printf("  %-30s %6zu %+11.1f%% %+11.1f%%", family.c_str(), members.size(), 100 * mean(b), 100 * mean(a));
    if (family_out != nullptr) std::printf(" %+11.1f%%", 100 * mean(f));
    std::printf("\n");
  }
}

int run_fit_runs(const FitRunsOptions& options) {
  const std::vector<RunSpec> specs = load_runs(options.runs);
  const std::size_t n = specs.size();
  std::vector<std::size_t> fit_half, check_half;
  for (std::size_t i = 0; i < n; ++i) (specs[i].check ? check_half : fit_half).push_back(i);
  if (fit_half.empty()) throw_input_error(options.runs, "runs", "every run is a check run: none to fit to");
  std::vector<std::unique_ptr<CompiledRun>> runs(n);
  std::vector<double> at_one(n), at_probe(n), at_fit(n);
  const int threads = threads_to_use(options.threads, 1);
  parallel_for(n, threads, [&](std::size_t i) {
    runs[i] = std::make_unique<CompiledRun>(compile_run(specs[i], options.runs));
    at_one[i] = simulate_step_seconds(*runs[i], 1.0, specs[i], options.runs);
    if (!specs[i].check) at_probe[i] = simulate_step_seconds(*runs[i], options.probe_factor, specs[i], options.runs);
  });
  std::vector<calib::RunResponse> responses;
  for (std::size_t i : fit_half) {
    responses.push_back(calib::linear_response(specs[i].name, specs[i].family, specs[i].measured_seconds, 1.0, at_one[i],
                                               options.probe_factor, at_probe[i]));
  }
  const calib::RunFitResult fit = calib::fit_runs(responses);
  // The line is exact only where the kernels stay on the critical path;
  // the fitted factor's own simulation says how far it held.
  parallel_for(n, threads, [&](std::size_t i) {
    at_fit[i] = simulate_step_seconds(*runs[i], fit.factor, specs[i], options.runs);
  });

  // Per run, in the runs file's order; the left-out errors of fit runs only.
  std::vector<double> before(n), after(n), leave_one_out(n, NAN), leave_family_out(n, NAN);
  double worst_line_error = 0;
  for (std::size_t k = 0; k < fit_half.size(); ++k) {
    const std::size_t i = fit_half[k];
    leave_one_out[i] = fit.leave_one_out_errors.empty() ? NAN : fit.leave_one_out_errors[k];
    leave_family_out[i] = fit.leave_one_family_out_errors.empty() ? NAN : fit.leave_one_family_out_errors[k];
    worst_line_error = std::max(worst_line_error, std::abs(responses[k].predicted_seconds(fit.factor) / at_fit[i] - 1));
  }
  for (std::size_t i = 0; i < n; ++i) {
    before[i] = at_one[i] / specs[i].measured_seconds - 1;
    after[i] = at_fit[i] / specs[i].measured_seconds - 1;
  }
  const bool families = !fit.leave_one_family_out_errors.empty();
  const auto percent = [](double x) { return std::isnan(x) ? std::string("      -") : printf_string("%+7.1f%%", 100 * x); };
  std::printf("# %-44s %-18s %-5s %10s %10s %8s %8s %8s %8s\n", "run", "family", "role", "measured", "fitted", "before",
              "after", "loo", "lofo");
  for (std::size_t i = 0; i < n; ++i) {
    std::printf("  %-44s %-18s %-5s %10.4g %10.4g %s %s %s %s\n", specs[i].name.c_str(), specs[i].family.c_str(),
                specs[i].check ? "check" : "fit", specs[i].measured_seconds, at_fit[i], percent(before[i]).c_str(),
                percent(after[i]).c_str(), percent(leave_one_out[i]).c_str(), percent(leave_family_out[i]).c_str());
  }
  const auto pick = [](const std::vector<double>& values, const std::vector<std::size_t>& half) {
    std::vector<double> picked;
    for (std::size_t i : half) picked.push_back(values[i]);
    return picked;
  };
  std::printf("\nkernel_time_factor %.4f, fitted to %zu runs (the line through factors 1 and %.2f held to %.2f %%)\n",
              fit.factor, fit_half.size(), options.probe_factor, 100 * worst_line_error);
  std::printf("fit half, median |step error|: %.1f %% at factor 1, %.1f %% in sample",
              100 * calib::median_absolute(pick(before, fit_half)), 100 * calib::median_absolute(pick(after, fit_half)));
  if (!fit.leave_one_out_errors.empty()) {
    std::printf(", %.1f %% leave one out", 100 * calib::median_absolute(fit.leave_one_out_errors));
  }
  if (families) std::printf(", %.1f %% leave one family out", 100 * calib::median_absolute(fit.leave_one_family_out_errors));
  std::printf("\n");
  if (!check_half.empty()) {
    std::printf("check half (%zu runs kept out), median |step error|: %.1f %% at factor 1, %.1f %% at the fitted factor\n",
                check_half.size(), 100 * calib::median_absolute(pick(before, check_half)),
                100 * calib::median_absolute(pick(after, check_half)));
  }
  std::printf("\n# %-30s %6s %12s %12s %12s\n", "fit half: mean step error", "runs", "factor 1", "fitted",
              families ? "family out" : "");
  print_family_means(specs, fit_half, before, after, families ? &leave_family_out : nullptr);
  if (!check_half.empty()) {
    std::printf("# %-30s %6s %12s %12s\n", "check half: mean step error", "runs", "factor 1", "fitted");
    print_family_means(specs, check_half, before, after, nullptr);
  }

  if (!options.csv.empty()) {
    AtomicOutputFile out(options.csv);
    out.stream() << "run,family,role,measured_step_seconds,step_seconds_at_factor_1,step_seconds_fitted,error_at_factor_1,"
                    "error_fitted,error_leave_one_out,error_leave_one_family_out\n";
    const auto cell = [](double x) { return std::isnan(x) ? std::string() : json(x).dump(); };
    for (std::size_t i = 0; i < n; ++i) {
      out.stream() << csv_field(specs[i].name) << "," << csv_field(specs[i].family) << ","
                   << (specs[i].check ? "check" : "fit") << ","
                   << cell(specs[i].measured_seconds) << "," << cell(at_one[i]) << "," << cell(at_fit[i]) << ","
                   << cell(before[i]) << "," << cell(after[i]) << "," << cell(leave_one_out[i]) << ","
                   << cell(leave_family_out[i]) << "\n";
    }
    out.commit();
  }
  if (!options.output_dir.empty()) {
    std::set<std::string> families_fitted;
    json fitted_names = json::array();
    json checked_names = json::array();
    for (const auto& spec : specs) {
      if (spec.check) {
        checked_names.push_back(spec.name);
      } else {
        families_fitted.insert(spec.family);
        fitted_names.push_back(spec.name);
      }
    }
    std::string family_list;
    for (const auto& family : families_fitted) family_list += (family_list.empty() ? "" : ", ") + family;
    const double in_sample = calib::median_absolute(pick(after, fit_half));
    const double loo = calib::median_absolute(fit.leave_one_out_errors);
    const double lofo = calib::median_absolute(fit.leave_one_family_out_errors);
    const double checked = calib::median_absolute(pick(after, check_half));
    const json record = {{"file", options.runs},
                         {"runs", fitted_names},
                         {"check_runs", checked_names},
                         {"kernel_time_factor", fit.factor},
                         {"median_abs_step_error_at_factor_1", calib::median_absolute(pick(before, fit_half))},
                         {"median_abs_step_error_in_sample", in_sample},
                         {"median_abs_step_error_leave_one_out", loo},
                         {"median_abs_step_error_leave_one_family_out", lofo},
                         {"median_abs_step_error_check_half", checked}};
    std::filesystem::create_directories(options.output_dir);
    std::map<std::string, const CompiledRun*> by_profile;
    for (const auto& run : runs) by_profile.emplace(run->profile.file, run.get());
    for (const auto& [file, run] : by_profile) {
      json document = run->profile_document;
      const std::string name = run->profile.name + "-fitted";
      document["name"] = name;
      document["compute"]["kernel_time_factor"] = fit.factor;
      document["compute"]["kernel_time_factor_source"] =
          "fitted by shardsim calib fit-runs to the " + std::to_string(fit_half.size()) + " fit runs of " + options.runs +
          " (families: " + family_list + "; fitted_to lists them): median |step error| " + printf_string("%.1f", 100 * in_sample) +
          " % in sample, " + printf_string("%.1f", 100 * loo) + " % leave one out, " + printf_string("%.1f", 100 * lofo) +
          " % leave one family out, " + printf_string("%.1f", 100 * checked) + " % on the " +
          std::to_string(check_half.size()) + " check runs kept out";
      document["fitted_to"] = record;
      const std::string path = (std::filesystem::path(options.output_dir) / (name + ".json")).string();
      AtomicOutputFile out(path);
      out.stream() << document.dump(2) << "\n";
      out.commit();
      std::printf("wrote %s\n", path.c_str());
    }
  }
  return 0;
}

}  // namespace

void add_fit_runs_command(CLI::App& calib, int& exit_code) {
  auto options = std::make_shared<FitRunsOptions>();
  CLI::App* command = calib.add_subcommand(
      "fit-runs", "published end-to-end runs -> the profile's kernel time factor, with leave-one-out errors");
  command->add_option("runs", options->runs, "Runs JSON: name, family, measured_step_seconds, run arguments")
      ->required();
  command->add_option("-o,--output-dir", options->output_dir,
                      "Write each run's profile with the fitted factor here, as <profile>-fitted.json");
  command->add_option("--csv", options->csv, "Each run's measured, simulated and left-out errors as CSV");
  command->add_option("--probe-factor", options->probe_factor,
                      "The second factor each run is simulated at, to draw its line")
      ->check(CLI::Range(1.05, 2.0))
      ->capture_default_str();
  add_threads_option(*command, options->threads);
  command->callback([options, &exit_code] { exit_code = run_fit_runs(*options); });
}

}  // namespace shardsim::cli
