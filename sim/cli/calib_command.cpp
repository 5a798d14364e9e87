// shardsim calib: turn measurements into a profile (fit-runs:
// fit_runs_command.cpp).
//   import-nccl-tests LOG... -o raw.json   nccl-tests output (text or -J JSON)
//   fit RAW... -o profile.json             least squares into a profile
//   report PROFILE [--png F]               what a profile says and how well it fits
#include "sim/cli/commands.h"

#include "calib/measurements.h"
#include "calib/nccl_tests_log.h"
#include "calib/profile.h"
#include "calib/profile_fit.h"
#include "sim/collectives/nvls_pipeline_fit.h"
#include "sim/report/curve_plot.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "topology/cluster.h"
#include "topology/cluster_spec.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <tuple>

namespace shardsim::cli {

namespace {

using nlohmann::json;

struct ImportOptions {
  std::vector<std::string> logs;
  std::string output;
  std::string op;
  std::string algorithm;
  bool keep_wrong = false;
};

struct FitCommandOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::string base;
  std::string cluster;
  std::string name;
};

struct ReportOptions {
  std::string profile;
  std::string png;
};

void write_json_file(const std::string& path, const json& document) {
  AtomicOutputFile file(path);
  // Text read from a log (a device name) may hold bytes that are not UTF-8,
  // which JSON cannot carry: each becomes U+FFFD rather than an error.
  file.stream() << document.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  file.commit();
}

int run_import(const ImportOptions& options) {
  calib::NcclTestsImportOptions parse;
  if (!options.op.empty()) {
    parse.op = workloads::parse_collective_op(options.op);
    if (!parse.op) throw InputError("--op: unknown collective '" + options.op + "'");
  }
  parse.algorithm = options.algorithm;
  parse.keep_wrong = options.keep_wrong;
  calib::Measurements all;
  std::printf("# %-40s %-15s %-8s %6s %6s %6s %7s\n", "log", "collective", "algo", "ranks", "nodes", "rows", "#wrong");
  for (const auto& log : options.logs) {
    const calib::Measurements m = calib::import_nccl_tests(log, parse);
    // One line per test the log holds (a run script's log holds several), in the log's order.
    std::size_t begin = 0;
    while (begin < m.collectives.size()) {
      const auto& first = m.collectives[begin];
      std::size_t end = begin;
      std::size_t wrong = 0;
      for (; end < m.collectives.size(); ++end) {
        const auto& c = m.collectives[end];
        if (c.op != first.op || c.algorithm != first.algorithm || c.ranks != first.ranks || c.nodes != first.nodes) break;
        wrong += c.wrong && *c.wrong != 0;
      }
      std::printf("  %-40s %-15s %-8s %6d %6d %6zu %7zu\n", log.c_str(), std::string(workloads::to_string(first.op)).c_str(),
                  first.algorithm.c_str(), first.ranks, first.nodes, end - begin, wrong);
      begin = end;
    }
    all.merge(m);
  }
  write_json_file(options.output, calib::measurements_to_json(all));
  std::printf("# wrote %zu points to %s\n", all.collectives.size(), options.output.c_str());
  return 0;
}

int run_fit(const FitCommandOptions& options) {
  calib::Measurements all;
  std::string names;
  for (const auto& input : options.inputs) {
    all.merge(calib::load_measurements(input));
    names += (names.empty() ? "" : ", ") + input;
  }
  calib::FitOptions fit;
  if (!options.base.empty()) {
    const std::string file = resolve_preset(options.base, "calib/profiles", "profile");
    fit.base = load_json_file(file);
    calib::parse_profile(*fit.base, file);  // a broken base fails here, under its own name
  }
  std::unique_ptr<topology::ClusterSpec> cluster;
  if (!options.cluster.empty()) {
    cluster = std::make_unique<topology::ClusterSpec>(topology::load_cluster_spec(options.cluster));
    fit.cluster = cluster.get();
  }
  fit.name = options.name;
  calib::FitResult result = calib::fit_profile(all, fit, names);
  std::optional<sim::NvlsPipelineFit> nvls;
  if (cluster) {
    // The chunk pipeline needs the simulator's NVLS plan, so it is fitted here, above calib.
    const calib::Profile fitted = calib::parse_profile(result.profile, options.output);
    nvls = sim::fit_nvls_pipeline(topology::Cluster(*cluster), fitted, fitted.measured);
    if (nvls) {
      json& entry = result.profile["collectives"]["all_reduce"]["nvls"];
      entry["simple"]["chunk_pipeline"] = {{"channels", nvls->pipeline.channels},
                                           {"base_latency_seconds", nvls->pipeline.base_latency_seconds},
                                           {"fill_chunks", nvls->pipeline.fill_chunks},
                                           {"chunk_overhead_seconds", nvls->pipeline.chunk_overhead_seconds}};
      entry["source"] = entry.value("source", std::string()) + "; chunk_pipeline fitted by shardsim calib fit on " +
                        fitted.measured.machine + ": " + nvls->what;
    }
  }

  std::printf("# shardsim calib fit: %s -> %s\n", names.c_str(), options.output.c_str());
  std::printf("# t = alpha + x / rate, relative least squares\n");
  std::printf("%-44s %6s %12s %14s %8s %10s\n", "fit", "points", "alpha (us)", "rate", "R^2", "worst err");
  for (const auto& line : result.lines) {
    std::printf("%-44s %6zu %12.3f %10.4g %-3s %8.5f %9.2f%%\n", line.what.c_str(), line.points,
                line.fit.alpha_seconds * 1e6, line.fit.units_per_second, line.unit.c_str(), line.fit.r_squared,
                100 * line.fit.worst_relative_error);
  }
  if (nvls) {
    std::printf("# NVLS chunk pipeline (%s): base %.2f us, %.2f fill chunks, %.3f us a chunk; simulated/measured busbw "
                "geomean %.3f, worst %.3f\n",
                nvls->what.c_str(), nvls->pipeline.base_latency_seconds * 1e6, nvls->pipeline.fill_chunks,
                nvls->pipeline.chunk_overhead_seconds * 1e6, nvls->geomean_ratio, nvls->worst_ratio);
  }
  for (const auto& note : result.notes) std::printf("# note: %s\n", note.c_str());
  write_json_file(options.output, result.profile);
  std::printf("# wrote profile %s to %s\n", result.profile["name"].get<std::string>().c_str(), options.output.c_str());
  return 0;
}

int run_report(const ReportOptions& options) {
  const calib::Profile profile = calib::load_profile(options.profile);
  std::printf("# profile %s (%s), %s\n", profile.name.c_str(), profile.gpu.c_str(), profile.file.c_str());
  std::printf("\n## compute\n");
  for (const auto& [dtype, entry] : profile.compute.dtypes) {
    std::printf("%-5s peak %8.2f TFLOP/s; GEMM efficiency by size:", dtype.c_str(), entry.peak_flops_per_second / 1e12);
    for (const auto& point : entry.gemm_efficiency) std::printf(" %.3g:%.3f", point.flops, point.efficiency);
    std::printf("\n      %s\n", entry.source.c_str());
  }
  const auto& c = profile.compute;
  std::printf("HBM   %.1f GB/s x %.3f = %.1f GB/s achievable\n      %s\n", c.hbm_bytes_per_second / 1e9, c.hbm_efficiency,
              c.achievable_hbm_bytes_per_second() / 1e9, c.hbm_source.c_str());
  std::printf("attention efficiency %.3f\n      %s\n", c.attention_efficiency, c.attention_source.c_str());
  for (const auto& [kernel, calibration] : c.attention_kernels) {
    std::printf("  %s %.3f\n      %s\n", std::string(workloads::to_string(kernel)).c_str(), calibration.efficiency,
                calibration.source.c_str());
  }
  std::printf("kernel launch %.2f us, interference slowdown %.3f\n      %s\n", c.kernel_launch_seconds * 1e6,
              c.interference_slowdown, c.overheads_source.c_str());
  if (!c.kernel_time_factor_source.empty()) {
    std::printf("kernel time factor %.4f\n      %s\n", c.kernel_time_factor, c.kernel_time_factor_source.c_str());
  }
  std::printf("\n## links\n");
  for (const auto kind : {topology::LinkKind::nvlink, topology::LinkKind::pcie, topology::LinkKind::network}) {
    const auto& link = profile.links[static_cast<std::size_t>(kind)];
    std::printf("%-8s efficiency %.4f  %s\n", std::string(topology::to_string(kind)).c_str(), link.bandwidth_efficiency,
                link.source.c_str());
  }
  std::printf("\n## collective models\n");
  for (const auto& [key, params] : profile.collectives) {
    std::printf("%-15s %-6s", std::string(workloads::to_string(key.first)).c_str(),
                std::string(workloads::to_string(key.second)).c_str());
    for (const auto& [protocol, p] : params.protocols) {
      std::printf("  %s: base %.2f us, factor %.3f", std::string(workloads::to_string(protocol)).c_str(),
                  p.base_latency_seconds * 1e6, p.bandwidth_factor);
      if (p.single_node_bandwidth_factor) std::printf(" (%.3f inside one node)", *p.single_node_bandwidth_factor);
      if (p.one_rank_per_node_bandwidth_factor) {
        std::printf(" (%.3f under 2 ranks per node)", *p.one_rank_per_node_bandwidth_factor);
      }
      if (p.channel_cap_bytes_per_second) {
        std::printf(", at most %.2f GB/s a channel beyond 2 nodes", *p.channel_cap_bytes_per_second / 1e9);
      }
      if (p.multi_node_step_floor_seconds > 0) {
        std::printf(", step >= %.2f us across nodes", p.multi_node_step_floor_seconds * 1e6);
      }
      if (p.multi_node_plateau.latency_factor != 1) {
        std::printf(", latency x%.2f across nodes from %.0f B per rank and channel", p.multi_node_plateau.latency_factor,
                    p.multi_node_plateau.from_bytes_per_rank_and_channel);
      }
      if (!p.bandwidth_correction.empty()) {
        const auto [low, high] = std::minmax_element(
            p.bandwidth_correction.begin(), p.bandwidth_correction.end(),
            [](const calib::SizeStep& a, const calib::SizeStep& b) { return a.factor < b.factor; });
        std::printf(", bandwidth x%.2f-%.2f by size", low->factor, high->factor);
      }
      if (p.chunk_pipeline) {
        std::printf(", chunk pipeline: %.2f us + %.2f fill chunks, %.2f us a chunk", p.chunk_pipeline->base_latency_seconds * 1e6,
                    p.chunk_pipeline->fill_chunks, p.chunk_pipeline->chunk_overhead_seconds * 1e6);
      }
    }
    std::printf("\n");
  }
  if (profile.measured.empty()) {
    if (!options.png.empty()) {
      throw InputError("--png: " + profile.file + " has no measured curves to plot (a datasheet profile)");
    }
    std::printf("\n# no measured curves: a datasheet profile (fit one with 'shardsim calib fit')\n");
    return 0;
  }
  std::printf("\n## measured curves (%s)\n", profile.measured.machine.c_str());
  std::printf("%-40s %6s %12s %12s %8s %9s\n", "curve", "points", "alpha (us)", "rate", "R^2", "worst");
  const auto row = [](const std::string& what, const calib::MeasuredCurve& curve, const char* unit) {
    std::printf("%-40s %6zu %12.3f %8.4g %-3s %8.5f %8.2f%%\n", what.c_str(), curve.points.size(),
                curve.fit.alpha_seconds * 1e6, curve.fit.units_per_second, unit, curve.fit.r_squared,
                100 * curve.fit.worst_relative_error);
  };
  std::vector<sim::CurvePanel> panels;
  for (const auto& [dtype, curve] : profile.measured.gemm) {
    row("gemm " + dtype, curve, "F/s");
    panels.push_back({"gemm " + dtype, "FLOP", "FLOP/s", &curve});
  }
  for (const auto& [kind, curve] : profile.measured.copies) {
    row("copy " + kind, curve, "B/s");
    panels.push_back({"copy " + kind, "B", "B/s", &curve});
  }
  for (const auto& m : profile.measured.collectives) {
    const std::string what = std::string(workloads::to_string(m.op)) + " " + m.algorithm + " " +
                             std::to_string(m.ranks) + "r/" + std::to_string(m.nodes) + "n";
    row(what, m.curve, "B/s");
    panels.push_back({what, "B", "B/s", &m.curve});
  }
  if (!options.png.empty()) {
    AtomicOutputFile png(options.png);
    png.stream() << sim::curves_png(
        "profile " + profile.name + ": measured against fitted (" + profile.measured.machine + ")", panels);
    png.commit();
    std::printf("# wrote %zu curves to %s\n", panels.size(), options.png.c_str());
  }
  return 0;
}

}  // namespace

void add_calib_command(CLI::App& app, int& exit_code) {
  auto* calib = app.add_subcommand("calib", "Calibration: import nccl-tests logs, fit profiles, report them");
  calib->require_subcommand(1);
  calib->footer(
      "Examples:\n"
      "  shardsim calib import-nccl-tests all_reduce.log all_gather.json -o raw.json\n"
      "  shardsim-probe --out probe.json                       (GPU: cuBLASLt, copies, NCCL)\n"
      "  mpirun -np 2 shardsim-probe --backend cpu --out cpu.json   (CPU: Eigen, copies, MPI)\n"
      "  shardsim calib fit probe.json raw.json --base h200 --cluster h200-1024 -o h200-measured.json\n"
      "  shardsim calib report h200-measured.json --png h200-measured.png\n"
      "  shardsim calib fit-runs results/fit_runs/runs.json -o fitted/   (from the repository root)");

  auto import = std::make_shared<ImportOptions>();
  auto* import_command = calib->add_subcommand("import-nccl-tests", "nccl-tests logs (text or -J JSON) -> raw measurements");
  import_command->add_option("logs", import->logs, "nccl-tests outputs")->required()->check(CLI::ExistingFile);
  import_command->add_option("-o,--output", import->output, "raw measurements JSON to write")->required();
  import_command->add_option("--op", import->op, "the collective, when the log does not say (all_reduce, ...)");
  import_command->add_option("--algorithm", import->algorithm, "NCCL_ALGO the run forced (ring, tree, ...); default auto");
  import_command->add_flag("--keep-wrong", import->keep_wrong, "import rows with #wrong != 0, flagged (the fit skips them)");
  import_command->callback([import, &exit_code] { exit_code = run_import(*import); });

  auto fit = std::make_shared<FitCommandOptions>();
  auto* fit_command = calib->add_subcommand("fit", "raw measurements -> a calibration profile (least squares)");
  fit_command->add_option("inputs", fit->inputs, "raw measurement files (probe output, imports)")->required()->check(CLI::ExistingFile);
  fit_command->add_option("-o,--output", fit->output, "profile JSON to write")->required();
  fit_command->add_option("--base", fit->base, "profile (file or preset) supplying what was not measured");
  fit_command->add_option("--cluster", fit->cluster, "cluster (file or preset) whose nominal links set link efficiencies");
  fit_command->add_option("--name", fit->name, "name of the new profile (default: the base's name + -measured)");
  fit_command->callback([fit, &exit_code] { exit_code = run_fit(*fit); });

  auto report = std::make_shared<ReportOptions>();
  auto* report_command = calib->add_subcommand("report", "what a profile says, and how well its measured curves fit");
  report_command->add_option("profile", report->profile, "profile file or preset")->required();
  report_command->add_option("--png", report->png, "PNG of every measured curve against its fit");
  report_command->callback([report, &exit_code] { exit_code = run_report(*report); });

  add_fit_runs_command(*calib, exit_code);
}

}  // namespace shardsim::cli
