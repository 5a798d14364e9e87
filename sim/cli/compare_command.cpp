// shardsim compare: a predicted and a measured timeline of the same Program
// side by side (sim/report/timeline_comparison.h): a table, CSV, JSON, and a
// PNG of one rank's two timelines.
#include "sim/cli/commands.h"

#include "sim/report/hdf5_timeline.h"
#include "sim/report/timeline_comparison.h"
#include "sim/report/timeline_plot.h"
#include "topology/base/atomic_output.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

namespace shardsim::cli {

namespace {

struct CompareOptions {
  std::string predicted, measured;
  std::optional<int> rank;
  std::string csv, png;
  bool json = false;
};

std::string origin_of(const sim::TimelineFile& file) {
  const nlohmann::json& s = file.summary;
  if (s.contains("measured")) {
    return "measured on " + s["measured"].value("device", std::string("?")) + ", " +
           s["measured"].value("backend", std::string("?")) + " backend";
  }
  return "simulated with profile " + s.value("profile", std::string("?")) + ", " + s.value("network", std::string("?")) +
         " network";
}

std::vector<const sim::ComparedQuantity*> all_quantities(const sim::TimelineComparison& c) {
  std::vector<const sim::ComparedQuantity*> rows = {&c.step};
  for (const auto& q : c.op_classes) rows.push_back(&q);
  for (const auto& q : c.breakdown) rows.push_back(&q);
  return rows;
}

std::string section_of(const sim::TimelineComparison& c, const sim::ComparedQuantity* q) {
  if (q == &c.step) return "step";
  if (q >= c.op_classes.data() && q < c.op_classes.data() + c.op_classes.size()) return "op class (mean per rank)";
  return "breakdown of rank " + std::to_string(c.breakdown_rank);
}

void print_row(const sim::ComparedQuantity& q) {
  const double error = q.relative_error();
  std::printf("  %-34s %12.6f s %12.6f s %9s\n", q.name.c_str(), q.predicted_seconds, q.measured_seconds,
              std::isnan(error) ? "-" : (std::to_string(static_cast<int>(std::lround(100 * error))) + " %").c_str());
}

void print_table(const CompareOptions& options, const sim::TimelineFile& predicted, const sim::TimelineFile& measured,
                 const sim::TimelineComparison& c) {
  std::printf("# shardsim compare\n#   predicted: %s (%s)\n#   measured:  %s (%s)\n# %zu ranks compared\n",
              options.predicted.c_str(), origin_of(predicted).c_str(), options.measured.c_str(),
              origin_of(measured).c_str(), c.ranks.size());
  std::printf("  %-34s %14s %14s %9s\n", "", "predicted", "measured", "error");
  print_row(c.step);
  std::printf("op classes, summed per rank (mean over ranks)\n");
  for (const auto& q : c.op_classes) print_row(q);
  std::printf("time breakdown of rank %d\n", c.breakdown_rank);
  for (const auto& q : c.breakdown) print_row(q);
  std::printf("  %-34s %12.0f %% %12.0f %%\n", "communication hidden by compute", 100 * c.predicted_hidden_fraction,
              100 * c.measured_hidden_fraction);
  std::printf("largest differences on rank %d\n", c.breakdown_rank);
  for (const auto& d : c.largest_differences) {
    std::printf("  %-34s %12.6f s %12.6f s\n", (std::to_string(d.op) + " " + d.name).substr(0, 34).c_str(),
                d.predicted_seconds, d.measured_seconds);
  }
}

nlohmann::json to_json(const sim::TimelineComparison& c) {
  nlohmann::json out = {{"ranks", c.ranks},
                        {"breakdown_rank", c.breakdown_rank},
                        {"predicted_hidden_fraction", c.predicted_hidden_fraction},
                        {"measured_hidden_fraction", c.measured_hidden_fraction}};
  for (const auto* q : all_quantities(c)) {
    const double error = q->relative_error();
    out["quantities"].push_back({{"section", section_of(c, q)},
                                 {"name", q->name},
                                 {"predicted_seconds", q->predicted_seconds},
                                 {"measured_seconds", q->measured_seconds},
                                 {"relative_error", std::isnan(error) ? nlohmann::json(nullptr) : nlohmann::json(error)}});
  }
  for (const auto& d : c.largest_differences) {
    out["largest_differences"].push_back({{"op", d.op},
                                          {"name", d.name},
                                          {"predicted_seconds", d.predicted_seconds},
                                          {"measured_seconds", d.measured_seconds}});
  }
  return out;
}

void write_csv(const std::string& path, const sim::TimelineComparison& c) {
  AtomicOutputFile out(path);
  out.stream() << "section,quantity,predicted_seconds,measured_seconds,relative_error\n";
  out.stream().precision(9);
  for (const auto* q : all_quantities(c)) {
    const double error = q->relative_error();
    out.stream() << section_of(c, q) << "," << q->name << "," << q->predicted_seconds << "," << q->measured_seconds << ",";
    if (!std::isnan(error)) out.stream() << error;
    out.stream() << "\n";
  }
  out.commit();
}

int compare(const CompareOptions& options) {
  const sim::TimelineFile predicted = sim::read_hdf5_timeline(options.predicted);
  const sim::TimelineFile measured = sim::read_hdf5_timeline(options.measured);
  const sim::TimelineComparison comparison = sim::compare_timelines(predicted, measured, options.rank);
  if (!options.csv.empty()) write_csv(options.csv, comparison);
  if (!options.png.empty()) {
    AtomicOutputFile png(options.png);
    png.stream() << sim::timeline_png({{"predicted: " + origin_of(predicted), &predicted},
                                       {"measured: " + origin_of(measured), &measured}},
                                      comparison.breakdown_rank);
    png.commit();
  }
  if (options.json) {
    std::cout << to_json(comparison).dump(2) << "\n";
  } else {
    print_table(options, predicted, measured, comparison);
  }
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CompareOptions>();
  CLI::App* command = app.add_subcommand("compare", "Compare a predicted and a measured timeline of one Program");
  command->footer(
      "Example:\n"
      "  shardsim run --cluster cpu-4rank --model llama-7b --plan zero3 --scale layers=2,hidden=256 \\\n"
      "      --profile fitted.json --network table --record-ranks all --h5 predicted.h5\n"
      "  mpirun -np 4 shardsim exec --cluster cpu-4rank --model llama-7b --plan zero3 \\\n"
      "      --scale layers=2,hidden=256 --h5 measured.h5\n"
      "  shardsim compare predicted.h5 measured.h5 --csv comparison.csv --png timelines.png\n"
      "Error = (predicted - measured) / measured. Exit code 2 when the files hold different programs.");
  command->add_option("predicted", options->predicted, "Timeline from shardsim run --h5")->required();
  command->add_option("measured", options->measured, "Timeline from shardsim exec --h5")->required();
  command->add_option("--rank", options->rank, "Rank for the breakdown and the plot (default: the first in both)");
  command->add_option("--csv", options->csv, "Write the comparison table as CSV");
  command->add_option("--png", options->png, "Plot both timelines of the rank as PNG");
  command->add_flag("--json", options->json, "Print the comparison as JSON");
  command->callback([options, &exit_code] { exit_code = compare(*options); });
}

}  // namespace shardsim::cli
