#include "calib/nccl_tests_log.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace shardsim::calib {

namespace {

using workloads::CollectiveOp;
using nlohmann::json;

// nccl-tests binaries and the collective each measures.
const std::vector<std::pair<std::string, CollectiveOp>>& test_names() {
  static const std::vector<std::pair<std::string, CollectiveOp>> names{
      {"all_reduce", CollectiveOp::all_reduce}, {"all_gather", CollectiveOp::all_gather},
      {"reduce_scatter", CollectiveOp::reduce_scatter}, {"broadcast", CollectiveOp::broadcast},
      {"alltoall", CollectiveOp::all_to_all}, {"sendrecv", CollectiveOp::send_recv},
      {"reduce", CollectiveOp::reduce}};  // after reduce_scatter: "reduce" is a prefix of it
  return names;
}

std::optional<CollectiveOp> op_from_name(const std::string& text) {
  const std::string base = text.substr(text.find_last_of('/') == std::string::npos ? 0 : text.find_last_of('/') + 1);
  for (const auto& [name, op] : test_names()) {
    if (base.find(name + "_perf") != std::string::npos) return op;
  }
  for (const auto& [name, op] : test_names()) {
    if (base.find(name) != std::string::npos) return op;
  }
  return std::nullopt;
}

CollectiveOp resolve_op(std::optional<CollectiveOp> from_log, const std::string& file,
                        const NcclTestsImportOptions& options) {
  if (from_log) return *from_log;
  if (options.op) return *options.op;
  if (auto from_file = op_from_name(file)) return *from_file;
  throw InputError(file + ": cannot tell which collective this log measured (no 'Collective test starting' line, "
                          "and the file name names none); pass --op");
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool parse_double(const std::string& token, double& value) {
  char* end = nullptr;
  value = std::strtod(token.c_str(), &end);
  return end != token.c_str() && *end == '\0' && std::isfinite(value);
}

// A rank index as a log or a -J file gives it, from 0 (as nccl-tests numbers
// them) to below kMaxGpuCount; throws naming `where`.
int rank_index(long long rank, const std::string& where) {
  if (rank < 0 || rank >= kMaxGpuCount) {
    throw InputError(where + ": rank " + std::to_string(rank) + " is not a rank from 0 to " + std::to_string(kMaxGpuCount - 1));
  }
  return static_cast<int>(rank);
}

// `body[key]` when present, else 0; anything but a number is refused.
double optional_number(const json& body, const char* key, const std::string& where) {
  if (!body.contains(key)) return 0;
  if (!body[key].is_number()) throw InputError(where + "." + key + ": must be a number, got " + body[key].dump());
  return body[key].get<double>();
}

// The shape and the rows, as both formats give them.
struct Row {
  double bytes = 0;
  std::string type;
  bool in_place = false;
  double seconds = 0;
  double algbw = 0;
  double busbw = 0;
  std::optional<double> wrong;
  std::string where;  // "file:line" or "file: results[i]"
};

// Checks the rows (bus factor, #wrong) and turns them into measurements.
Measurements to_measurements(const std::string& file, CollectiveOp op, int ranks, const std::set<std::string>& hosts,
                             const std::string& algorithm, const std::vector<Row>& rows,
                             const NcclTestsImportOptions& options, std::string device, std::string software) {
  if (ranks < 1) throw InputError(file + ": no '#  Rank N ... on HOST device D' lines: cannot tell the group size");
  if (rows.empty()) throw InputError(file + ": no result rows");
  const double factor = workloads::bus_bandwidth_factor(op, ranks);
  std::vector<std::string> wrong_rows;
  Measurements m;
  m.machine.backend = "nccl-tests";
  m.machine.host = hosts.empty() ? "" : *hosts.begin();
  m.machine.software = std::move(software);
  m.machine.device = std::move(device);
  const int nodes = std::max<int>(1, static_cast<int>(hosts.size()));
  for (const Row& row : rows) {
    // Printed with two decimals: only a ratio of two readable values tests anything.
    if (row.algbw >= 1.0 && std::abs(row.busbw / row.algbw - factor) > 0.02 * factor + 0.01 / row.algbw) {
      throw InputError(row.where + ": busbw/algbw = " + std::to_string(row.busbw / row.algbw) + ", but " +
                       std::string(workloads::to_string(op)) + " over " + std::to_string(ranks) +
                       " ranks has bus factor " + std::to_string(factor) +
                       ": the collective (--op) or the rank lines are not what this log measured");
    }
    if (row.wrong && *row.wrong != 0) wrong_rows.push_back(row.where);
    CollectiveMeasurement c;
    c.op = op;
    c.algorithm = algorithm.empty() ? "auto" : algorithm;
    c.ranks = ranks;
    c.nodes = nodes;
    c.bytes = row.bytes;
    c.type = row.type;
    c.in_place = row.in_place;
    c.seconds = row.seconds;
    c.wrong = row.wrong;
    c.source = row.where;
    m.collectives.push_back(c);
  }
  if (!wrong_rows.empty() && !options.keep_wrong) {
    std::string where;
    for (std::size_t i = 0; i < wrong_rows.size() && i < 3; ++i) where += (i ? ", " : "") + wrong_rows[i];
    if (wrong_rows.size() > 3) where += " and " + std::to_string(wrong_rows.size() - 3) + " more";
    throw InputError(file + ": " + std::to_string(wrong_rows.size()) +
                     " row(s) report #wrong != 0 (" + where +
                     "): the collective returned wrong results, so its times say nothing; fix the run, or import "
                     "with --keep-wrong to keep them flagged (the fit skips them)");
  }
  return m;
}

}  // namespace

Measurements parse_nccl_tests_text(const std::string& text, const std::string& file,
                                   const NcclTestsImportOptions& options) {
  static const std::regex rank_line(R"(^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s*(?:\[[^\]]*\])?\s*(.*)$)");
  static const std::regex start_line(R"(^#\s*Collective test starting:\s*(\S+))");
  static const std::regex version_line(R"(^#\s*nccl-tests version\s+(.*)$)");
  // One test's part of the log. nccl-tests' run scripts and cluster
  // acceptance suites run several binaries into one file: each prints its own
  // "Collective test starting" line, rank lines, rows and footer, so a start
  // line or a footer ends the part before it.
  struct Section {
    std::optional<CollectiveOp> op;
    std::set<std::string> hosts;
    int ranks = 0;
    bool per_iteration = false;
    bool footer = false;
    std::string device;
    std::vector<Row> rows;
    int first_line = 0;
  };
  std::vector<Section> sections(1);
  std::string software;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::smatch match;
    const std::string where = file + ":" + std::to_string(number);
    const bool starts_test = std::regex_search(line, match, start_line);
    if ((starts_test && (sections.back().op || !sections.back().rows.empty())) || sections.back().footer) {
      sections.emplace_back();
      sections.back().first_line = number;
    }
    Section& section = sections.back();
    if (starts_test) {
      section.op = op_from_name(match[1]);
      if (!section.op) throw InputError(where + ": '" + std::string(match[1]) + "' is not a collective shardsim imports");
      continue;
    }
    if (std::regex_search(line, match, rank_line)) {
      // from_chars leaves `rank` as it was when the digits overflow it.
      long long rank = kMaxGpuCount;
      const char* digits = line.data() + match.position(1);
      std::from_chars(digits, digits + match.length(1), rank);
      section.ranks = std::max(section.ranks, rank_index(rank, where) + 1);
      section.hosts.insert(match[2]);
      if (section.device.empty()) section.device = match[3];
      continue;
    }
    if (std::regex_search(line, match, version_line)) {
      software = match[1];
      continue;
    }
    if (line.find("i_min") != std::string::npos) section.per_iteration = true;
    if (line.find("Avg bus bandwidth") != std::string::npos) section.footer = true;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || !std::isdigit(static_cast<unsigned char>(line[first]))) continue;

    // size count type redop root | time algbw busbw #wrong [i_min i_max i_p99 i_cv%] | same in-place
    std::istringstream fields(line);
    std::vector<std::string> tokens;
    for (std::string token; fields >> token;) tokens.push_back(token);
    const std::size_t side = section.per_iteration ? 8 : 4;
    if (tokens.size() < 5 + 2 * side) {
      throw InputError(where + ": a result row with " + std::to_string(tokens.size()) + " of " +
                       std::to_string(5 + 2 * side) + " columns (a truncated log?)");
    }
    double bytes = 0;
    if (!parse_double(tokens[0], bytes) || bytes < 0) throw InputError(where + ": size '" + tokens[0] + "' is not a byte count");
    for (int s = 0; s < 2; ++s) {
      const std::size_t base = 5 + static_cast<std::size_t>(s) * side;
      Row row;
      row.bytes = bytes;
      row.type = tokens[2];
      row.in_place = s == 1;
      row.where = where;
      double micros = 0;
      if (!parse_double(tokens[base], micros) || micros <= 0 || !parse_double(tokens[base + 1], row.algbw) ||
          !parse_double(tokens[base + 2], row.busbw)) {
        throw InputError(where + ": " + (s ? "in-place" : "out-of-place") + " time/algbw/busbw '" + tokens[base] + " " +
                         tokens[base + 1] + " " + tokens[base + 2] + "' are not numbers (a truncated log?)");
      }
      row.seconds = micros * 1e-6;
      double wrong = 0;
      if (tokens[base + 3] == "N/A") {
        row.wrong.reset();
      } else if (parse_double(tokens[base + 3], wrong) && wrong >= 0) {
        row.wrong = wrong;
      } else {
        throw InputError(where + ": #wrong '" + tokens[base + 3] + "' is neither a count nor N/A");
      }
      section.rows.push_back(row);
    }
  }
  // Text after the last footer (a shell prompt, a blank line) is no test.
  if (sections.size() > 1 && !sections.back().op && sections.back().rows.empty()) sections.pop_back();
  Measurements all;
  for (std::size_t i = 0; i < sections.size(); ++i) {
    const Section& section = sections[i];
    // The part's own name, in messages about it, when the log has several.
    const std::string part =
        sections.size() == 1 ? file
                             : file + " (test " + std::to_string(i + 1) + " of " + std::to_string(sections.size()) +
                                   ", from line " + std::to_string(std::max(section.first_line, 1)) + ")";
    if (!section.footer) {
      throw InputError(part + ": ends before nccl-tests' '# Avg bus bandwidth' line (a truncated log?)");
    }
    all.merge(to_measurements(part, resolve_op(section.op, file, options), section.ranks, section.hosts,
                              options.algorithm, section.rows, options, section.device, software));
  }
  return all;
}

Measurements parse_nccl_tests_json(const std::string& text, const std::string& file,
                                   const NcclTestsImportOptions& options) {
  json document;
  try {
    document = parse_json_text(text, file);
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (a truncated -J file?)");
  }
  if (!document.is_object()) throw InputError(file + ": the top level must be an object");
  std::optional<CollectiveOp> op;
  if (document.contains("args") && document["args"].is_array() && !document["args"].empty() &&
      document["args"][0].is_string()) {
    op = op_from_name(document["args"][0].get<std::string>());
  }
  std::string algorithm = options.algorithm;
  if (document.contains("env") && document["env"].is_array()) {
    for (const auto& entry : document["env"]) {
      if (entry.is_string() && entry.get<std::string>().rfind("NCCL_ALGO=", 0) == 0 && algorithm.empty()) {
        algorithm = lower(entry.get<std::string>().substr(10));
      }
    }
  }
  std::set<std::string> hosts;
  std::string device_name;
  int ranks = 0;
  if (document.contains("config") && document["config"].contains("devices")) {
    for (const auto& device : document["config"]["devices"]) {
      if (!device.contains("rank") || !device["rank"].is_number_integer()) {
        throw InputError(file + ": config.devices: an entry without an integer rank");
      }
      ranks = std::max(ranks, rank_index(device["rank"].get<long long>(), file + ": config.devices") + 1);
      if (device.contains("hostname") && device["hostname"].is_string()) hosts.insert(device["hostname"].get<std::string>());
      if (device_name.empty() && device.contains("device_info") && device["device_info"].is_string()) {
        device_name = device["device_info"].get<std::string>();
      }
    }
  }
  if (!document.contains("results") || !document["results"].is_array()) {
    throw InputError(file + ": results: missing (the run ended before its first result?)");
  }
  if (!document.contains("average_bus_bandwidth")) {
    throw InputError(file + ": average_bus_bandwidth: missing (the run did not finish?)");
  }
  std::vector<Row> rows;
  const json& results = document["results"];
  for (std::size_t i = 0; i < results.size(); ++i) {
    const json& result = results[i];
    const std::string where = file + ": results[" + std::to_string(i) + "]";
    if (!result.contains("size") || !result["size"].is_number()) throw InputError(where + ".size: missing");
    for (const char* side : {"out_of_place", "in_place"}) {
      if (!result.contains(side) || result[side].is_null()) continue;
      const json& body = result[side];
      const char* time_key = body.contains("time") ? "time" : "cpu_time";
      Row row;
      row.bytes = result["size"].get<double>();
      if (result.contains("type") && !result["type"].is_string()) {
        throw InputError(where + ".type: must be a string, got " + result["type"].dump());
      }
      row.type = result.value("type", std::string("unknown"));
      row.in_place = std::string(side) == "in_place";
      row.where = where + "." + side;
      if (!body.contains(time_key) || !body[time_key].is_number() || body[time_key].get<double>() <= 0) {
        throw InputError(row.where + ".time: missing or not a positive number");
      }
      row.seconds = body[time_key].get<double>() * 1e-6;
      row.algbw = optional_number(body, "alg_bw", row.where);
      row.busbw = optional_number(body, "bus_bw", row.where);
      // nccl-tests writes null when it did not check the results (-c 0).
      if (body.contains("nwrong") && !body["nwrong"].is_null()) {
        const json& wrong = body["nwrong"];
        if (!wrong.is_number() || wrong.get<double>() < 0) {
          throw InputError(row.where + ".nwrong: must be a count of wrong elements or null, got " + wrong.dump());
        }
        row.wrong = wrong.get<double>();
      }
      rows.push_back(row);
    }
  }
  std::string software;
  if (document.contains("nccl_version") && document["nccl_version"].is_number()) {
    software = "NCCL " + std::to_string(document["nccl_version"].get<long long>());
  }
  return to_measurements(file, resolve_op(op, file, options), ranks, hosts, algorithm, rows, options, device_name,
                         software);
}

Measurements import_nccl_tests(const std::string& file, const NcclTestsImportOptions& options) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(file + ": cannot open");
  std::ostringstream content;
  content << in.rdbuf();
  const std::string text = content.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_nccl_tests_json(text, file, options);
  return parse_nccl_tests_text(text, file, options);
}

}  // namespace shardsim::calib
