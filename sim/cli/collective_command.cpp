#include "sim/cli/commands.h"

#include "calib/profile.h"
#include "sim/cli/byte_size.h"
#include "sim/cli/index_list.h"
#include "sim/cli/job_inputs.h"
#include "sim/cli/progress_bar.h"
#include "sim/collective_sweep.h"
#include "topology/base/atomic_output.h"
#include "topology/base/json_input.h"
#include "topology/routing.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <iostream>
#include <numeric>
#include <stdexcept>

namespace shardsim::cli {

namespace {

struct CollectiveOptions {
  std::string cluster = "dgx-a100-1024";
  std::string profile;
  std::string op = "all_reduce";
  int gpus = 0;
  std::string group = "all";
  std::string ranks;  // explicit GPU list, overrides group and gpus
  std::string min_bytes = "8";
  std::string max_bytes = "8G";
  long long step_factor = 2;
  std::string network = "flow";
  std::string algo = "auto";
  std::string proto = "auto";
  std::string type = "float";
  int root = 0;
  std::string csv;
};

sim::GroupLayout make_group(const topology::Cluster& cluster, const std::string& shape, int gpus) {
  const int available = shape == "intra" ? cluster.gpus_per_node() : shape == "inter" ? cluster.nodes()
                                                                                        : cluster.gpu_count();
  const int size = gpus == 0 ? available : gpus;
  if (size < 1 || size > available) {
    throw std::invalid_argument("--gpus " + std::to_string(gpus) + ": a group '" + shape + "' on cluster " +
                                cluster.spec().name + " holds 1 to " + std::to_string(available) + " GPUs");
  }
  std::vector<topology::GpuId> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(shape == "intra" ? cluster.gpu_at(0, r) : shape == "inter" ? cluster.gpu_at(r, 0) : r);
  }
  return sim::make_group_layout(cluster, std::move(ranks));
}

template <typename Parsed>
auto parse_or_auto(const std::string& option, const std::string& text, Parsed parse) {
  using Result = decltype(parse(text));
  if (text == "auto") return Result{};
  Result value = parse(text);
  if (!value) throw std::invalid_argument(option + ": unknown value '" + text + "'");
  return value;
}

int run_collective(const CollectiveOptions& options) {
  const topology::ClusterSpec spec = topology::load_cluster_spec(options.cluster);
  const topology::Cluster cluster(spec);
  const topology::Router router(cluster);
  const calib::Profile profile = load_job_profile(options.profile, spec);
  const auto explicit_group = [&] {
    try {
      return sim::make_group_layout(cluster, parse_index_list("--ranks", options.ranks));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--ranks: " + std::string(e.what()));
    }
  };
  const sim::GroupLayout group = options.ranks.empty() ? make_group(cluster, options.group, options.gpus) : explicit_group();

  std::vector<workloads::CollectiveOp> ops;
  if (options.op == "all") {
    ops = workloads::nccl_tests_collective_ops();
  } else {
    const auto op = workloads::parse_collective_op(options.op);
    if (!op) throw std::invalid_argument("--op: unknown collective '" + options.op + "'");
    ops = {*op};
  }
  sim::CollectiveSweep sweep;
  const long long min_bytes = parse_byte_size("--min-bytes", options.min_bytes);
  const long long max_bytes = parse_byte_size("--max-bytes", options.max_bytes);
  if (max_bytes < min_bytes) {
    throw std::invalid_argument("-b/--min-bytes " + options.min_bytes + " is above -e/--max-bytes " + options.max_bytes);
  }
  if (options.step_factor < 2) {
    throw std::invalid_argument("-f/--step-factor must be at least 2, got " + std::to_string(options.step_factor));
  }
  sweep.sizes = sim::geometric_sizes(min_bytes, max_bytes, options.step_factor);
  const auto type = calib::parse_data_type(options.type);
  if (!type) throw std::invalid_argument("--type: unknown data type '" + options.type + "'");
  sweep.type = *type;
  sweep.root = options.root;
  sweep.mode = sim::parse_network_mode(options.network);
  sweep.algorithm = parse_or_auto("--algo", options.algo, workloads::parse_algorithm);
  sweep.protocol = parse_or_auto("--proto", options.proto, workloads::parse_protocol);

  std::cout << "# shardsim collective: cluster " << spec.name << " (" << cluster.gpu_count() << " GPUs), profile "
            << profile.name << "\n"
            << "# group " << (options.ranks.empty() ? options.group : options.ranks) << ": " << group.size()
            << " ranks on " << group.node_count()
            << " nodes; network " << options.network << "; algo " << options.algo << "; proto " << options.proto
            << "\n";

  ProgressBar progress("simulating", sweep.sizes.size() * ops.size());
  std::vector<calib::NcclTestsRow> all_rows;
  for (workloads::CollectiveOp op : ops) {
    sweep.op = op;
    const auto rows = sim::run_collective_sweep(cluster, router, profile, group, sweep, [&] { progress.advance(); });
    std::cout << "#\n# Collective test: " << workloads::to_string(op) << "\n";
    calib::write_nccl_tests_header(std::cout);
    for (const auto& row : rows) calib::write_nccl_tests_row(std::cout, row);
    calib::write_nccl_tests_footer(std::cout, rows);
    all_rows.insert(all_rows.end(), rows.begin(), rows.end());
  }

  if (!options.csv.empty()) {
    AtomicOutputFile csv(options.csv);
    calib::write_csv_header(csv.stream());
    for (const auto& row : all_rows) calib::write_csv_row(csv.stream(), row);
    csv.commit();
  }
  return 0;
}

}  // namespace

void add_collective_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<CollectiveOptions>();
  CLI::App* command = app.add_subcommand(
      "collective", "Simulate NCCL collectives over a size sweep, printed like nccl-tests");
  command->footer(
      "Example:\n"
      "  shardsim collective --cluster dgx-a100-1024 --op all_reduce --min-bytes 8 --max-bytes 8G\n"
      "  shardsim collective --cluster a800-1024 --op all_gather --gpus 8 --group inter --csv ag.csv\n"
      "Sizes take K, M, G suffixes (powers of 1024). Clusters and profiles are JSON files or bundled\n"
      "presets (shardsim presets).");
  command->add_option("--cluster", options->cluster, "Cluster JSON file or preset name")->capture_default_str();
  command->add_option("--profile", options->profile,
                      "Calibration profile JSON file or preset (default: the cluster's own)");
  command->add_option("--op", options->op, "Collective, or 'all' for every one")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
                             "send_recv", "send", "all"}))
      ->capture_default_str();
  command->add_option("-g,--gpus", options->gpus, "Ranks in the group (default: all the group shape allows)");
  command->add_option("--group", options->group,
                      "Group shape: intra (GPUs of one node), inter (GPU 0 of each node), all (GPUs 0..N-1)")
      ->check(CLI::IsMember({"intra", "inter", "all"}))
      ->capture_default_str();
  command->add_option("--ranks", options->ranks,
                      "Any group: GPU indices and ranges, rank i on the i-th listed (e.g. 0,3,8-15); overrides --group");
  command->add_option("-b,--min-bytes", options->min_bytes, "Smallest size, bytes")->capture_default_str();
  command->add_option("-e,--max-bytes", options->max_bytes, "Largest size, bytes")->capture_default_str();
  command->add_option("-f,--step-factor", options->step_factor, "Multiply the size by this between rows")
      ->check(CLI::Range(2LL, 1LL << 20))
      ->capture_default_str();
  command->add_option("--network", options->network,
                      "flow: max-min fair flows on the routed fabric; analytical: alpha-beta closed forms; "
                      "table: the profile's measured curves where it has them")
      ->check(CLI::IsMember({"flow", "analytical", "table"}))
      ->capture_default_str();
  std::vector<std::string> algorithms = {"auto"};
  for (workloads::Algorithm a : workloads::all_algorithms()) algorithms.emplace_back(workloads::to_string(a));
  command->add_option("--algo", options->algo, "Algorithm: auto (NCCL's choice) or one of them")
      ->check(CLI::IsMember(algorithms))
      ->capture_default_str();
  command->add_option("--proto", options->proto, "Protocol: auto, ll, ll128, simple")
      ->check(CLI::IsMember({"auto", "ll", "ll128", "simple"}))
      ->capture_default_str();
  command->add_option("-d,--type", options->type, "Element type, as nccl-tests names it")
      ->check(CLI::IsMember(calib::data_type_names()))
      ->capture_default_str();
  command->add_option("-r,--root", options->root, "Root rank of broadcast, reduce and send")->capture_default_str();
  command->add_option("--csv", options->csv, "Also write the rows as CSV to this file");
  command->callback([options, &exit_code] { exit_code = run_collective(*options); });
}

}  // namespace shardsim::cli
