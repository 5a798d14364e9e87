#include "calib/profile_fit.h"

#include "calib/measured_curves.h"
#include "calib/profile.h"
#include "topology/base/json_input.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

namespace shardsim::calib {

namespace {

using nlohmann::json;
using workloads::CollectiveOp;

const std::set<std::string> kProfileDtypes{"bf16", "fp16", "fp8", "fp32"};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t h = values.size() / 2;
  return values.size() % 2 ? values[h] : 0.5 * (values[h - 1] + values[h]);
}

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

std::string describe(const MachineInfo& machine) {
  std::string text = machine.device.empty() ? "unnamed device" : machine.device;
  if (!machine.host.empty()) text += " on " + machine.host;
  if (!machine.backend.empty()) text += " (" + machine.backend + (machine.software.empty() ? "" : " " + machine.software) + ")";
  return text;
}

std::size_t distinct_sizes(const std::vector<LinePoint>& points) {
  std::set<double> xs;
  for (const auto& p : points) xs.insert(p.x);
  return xs.size();
}

json skeleton(const Measurements& m) {
  const json not_measured = {{"bandwidth_efficiency", 1.0}, {"source", "not measured (no base profile)"}};
  return {{"name", "measured"},
          {"gpu", m.machine.device.empty() ? "unknown" : m.machine.device},
          {"links", {{"nvlink", not_measured}, {"pcie", not_measured}, {"network", not_measured}}},
          {"collectives", json::object()},
          {"compute",
           {{"dtypes", json::object()},
            {"attention_efficiency", 1.0},
            {"attention_source", "not measured (no base profile)"},
            {"kernel_launch_seconds", 0.0},
            {"interference_slowdown", 0.0},
            {"overheads_source", "not measured (no base profile)"}}},
          {"sources", json::array()}};
}

// GEMM efficiency table: one point per octave of FLOPs, the median of its
// measured efficiencies at the octave's geometric-mean size.
json efficiency_table(const std::vector<LinePoint>& points, double peak, const std::string& dtype,
                      std::vector<std::string>& notes) {
  std::map<int, std::vector<LinePoint>> octaves;
  for (const auto& p : points) octaves[static_cast<int>(std::floor(std::log2(p.x)))].push_back(p);
  json table = json::array();
  double clamped = 0;
  for (const auto& [octave, members] : octaves) {
    double log_sum = 0;
    std::vector<double> efficiencies;
    for (const auto& p : members) {
      log_sum += std::log(p.x);
      efficiencies.push_back(p.x / p.seconds / peak);
    }
    double efficiency = median(efficiencies);
    if (efficiency > 1) {
      clamped = std::max(clamped, efficiency);
      efficiency = 1;
    }
    table.push_back({{"flops", std::exp(log_sum / static_cast<double>(members.size()))}, {"efficiency", efficiency}});
  }
  if (clamped > 0) {
    notes.push_back("gemm " + dtype + ": measured up to " + format("%.3f", clamped) +
                    " of the nominal peak; efficiencies capped at 1 (is the nominal peak right for this device?)");
  }
  return table;
}

void fit_gemms(const Measurements& m, json& compute, MeasuredCurves& curves, FitResult& result, bool has_base,
               const std::string& machine) {
  // The curve by FLOPs is the layers' GEMMs': batched calls (attention's
  // products over heads, a head size deep) run far below layer GEMMs of the
  // same FLOPs (0.40-0.54 of peak against 0.68-0.81 on an H200), and mixed
  // into one octave's median they would price the layers' GEMMs by them.
  // They are kept by shape, as every GEMM is.
  std::map<std::string, std::vector<LinePoint>> by_dtype;
  std::map<GemmShapeKey, std::vector<double>> by_shape;
  for (const auto& g : m.gemm) {
    if (g.batch == 1) by_dtype[g.dtype].push_back({g.flops(), g.seconds});
    by_shape[{g.dtype, g.m, g.n, g.k}].push_back(g.seconds / static_cast<double>(g.batch));
  }
  for (const auto& [shape, seconds] : by_shape) curves.gemm_shapes[shape] = median(seconds);
  for (const auto& [dtype, points] : by_dtype) {
    if (distinct_sizes(points) < 2) {
      result.notes.push_back("gemm " + dtype + ": one size only, not fitted");
      continue;
    }
    const LineFit fit = fit_line(points);
    curves.gemm[dtype] = {fit, table_points(points)};
    result.lines.push_back({"gemm " + dtype, "FLOP/s", points.size(), fit});
    if (!kProfileDtypes.count(dtype)) continue;  // tf32, fp64: kept as curves only
    json& dtypes = compute["dtypes"];
    double best = 0;
    for (const auto& p : points) best = std::max(best, p.x / p.seconds);
    const bool nominal = has_base && dtypes.contains(dtype);
    const double peak = nominal ? dtypes[dtype]["peak_flops_per_second"].get<double>() : std::max(best, fit.units_per_second);
    json entry;
    entry["peak_flops_per_second"] = peak;
    entry["gemm_efficiency"] = efficiency_table(points, peak, dtype, result.notes);
    entry["source"] = "measured on " + machine + ": " + std::to_string(points.size()) +
                      " single GEMMs, median per octave of FLOPs (each shape's own time in measured.gemm_shapes); " +
                      (nominal ? "the nominal peak of the base profile, whose entry said: " +
                                     dtypes[dtype]["source"].get<std::string>()
                               : std::string("peak = the best measured rate (no nominal figure)")) +
                      "; fit t = " + format("%.3g", fit.alpha_seconds) + " s + FLOPs / " +
                      format("%.4g", fit.units_per_second) + " FLOP/s";
    dtypes[dtype] = entry;
  }
  // The CPU executor runs every dtype's kernels as these fp32 GEMMs
  // (calib/executor/cpu_kernels.h), so a bf16 or fp16 program on this
  // machine runs at the fp32 curve.
  json& dtypes = compute["dtypes"];
  if (m.machine.backend == "cpu" && dtypes.contains("fp32")) {
    for (const char* dtype : {"bf16", "fp16"}) {
      if (dtypes.contains(dtype)) continue;
      dtypes[dtype] = dtypes["fp32"];
      dtypes[dtype]["source"] = "the CPU executor runs " + std::string(dtype) + " kernels in fp32: the fp32 curve (" +
                                dtypes["fp32"]["source"].get<std::string>() + ")";
      result.notes.push_back(std::string(dtype) + ": the fp32 curve (the CPU executor computes in fp32)");
    }
  }
}

void fit_memory(const Measurements& m, json& compute, MeasuredCurves& curves, FitResult& result, bool has_base,
                const std::string& machine) {
  std::map<std::string, std::vector<LinePoint>> by_kind;
  for (const auto& c : m.copies) by_kind[c.kind].push_back({c.traffic_bytes(), c.seconds});
  for (const auto& [kind, points] : by_kind) {
    if (distinct_sizes(points) < 2) {
      result.notes.push_back("copies " + kind + ": one size only, not fitted");
      continue;
    }
    const LineFit fit = fit_line(points);
    curves.copies[kind] = {fit, table_points(points)};
    result.lines.push_back({"copy " + kind, "B/s", points.size(), fit});
  }
  const auto memory = curves.copies.count("device_copy") ? curves.copies.find("device_copy") : curves.copies.find("host_copy");
  if (memory == curves.copies.end()) return;
  // The largest copy's rate, not the line's asymptote: smaller copies run
  // from cache and bend the line.
  const LinePoint& largest = memory->second.points.back();
  const double rate = largest.x / largest.seconds;
  const bool nominal = has_base && compute.contains("hbm_bytes_per_second");
  const double peak = nominal ? compute["hbm_bytes_per_second"].get<double>() : rate;
  double efficiency = rate / peak;
  if (efficiency > 1) {
    result.notes.push_back("memory: measured " + format("%.4g", rate) + " B/s exceeds the nominal " +
                           format("%.4g", peak) + " B/s; efficiency capped at 1");
    efficiency = 1;
  }
  compute["hbm_bytes_per_second"] = peak;
  compute["hbm_efficiency"] = efficiency;
  compute["hbm_source"] = "measured on " + machine + ": " + memory->first + " of " + format("%.4g", largest.x / 2) + " B: " + format("%.4g", rate) +
                          " B/s of read + write traffic" +
                          (nominal ? " over the nominal " + format("%.4g", peak) + " B/s"
                                   : std::string(" (no nominal figure: taken as the peak)"));
}

void fit_overheads(const Measurements& m, json& compute, FitResult& result, const std::string& machine) {
  std::string source;
  if (!m.kernel_launch_seconds.empty()) {
    compute["kernel_launch_seconds"] = median(m.kernel_launch_seconds);
    source += "kernel launch: median of " + std::to_string(m.kernel_launch_seconds.size()) + " samples";
  }
  // On one GPU NCCL's collective is a local copy, which takes neither NVLink
  // nor the NICs and few SMs: the slowdown it causes says nothing of a
  // training step's collectives, so the base profile's figure stays.
  int world_ranks = 0;
  for (const auto& c : m.collectives) world_ranks = std::max(world_ranks, c.ranks);
  const bool interference_measurable = world_ranks != 1;
  if (!m.interference.empty() && !interference_measurable) {
    source += std::string(source.empty() ? "" : "; ") +
              "interference not fitted (the probe's collectives ran on one GPU, a local copy); the base profile's "
              "figure kept, whose source said: " +
              compute.value("overheads_source", std::string("none"));
    result.notes.push_back("interference not fitted: one GPU's collective is a local copy; the base's " +
                           format("%.4f", compute.value("interference_slowdown", 0.0)) + " kept");
  }
  if (!m.interference.empty() && interference_measurable) {
    std::vector<double> ratios;
    for (const auto& i : m.interference) ratios.push_back(i.with_collective_seconds / i.alone_seconds);
    const double slowdown = std::max(0.0, median(ratios) - 1.0);
    compute["interference_slowdown"] = slowdown;
    source += std::string(source.empty() ? "" : "; ") + "interference: median GEMM time with a collective beside it / alone - 1 over " +
              std::to_string(ratios.size()) + " pairs";
    result.notes.push_back("interference slowdown " + format("%.4f", slowdown));
  }
  if (!source.empty()) compute["overheads_source"] = "measured on " + machine + ": " + source;

  if (!m.attention.empty()) {
    std::vector<double> efficiencies;
    for (const auto& a : m.attention) {
      if (!compute["dtypes"].contains(a.dtype)) continue;
      efficiencies.push_back(a.flops / a.seconds / compute["dtypes"][a.dtype]["peak_flops_per_second"].get<double>());
    }
    if (!efficiencies.empty()) {
      compute["attention_efficiency"] = std::min(1.0, median(efficiencies));
      const bool any_causal = std::any_of(m.attention.begin(), m.attention.end(), [](const auto& a) { return a.causal; });
      // The probe times the forward kernel alone; the simulator prices the
      // backward's 2.5x FLOPs at the same efficiency, which the note says.
      compute["attention_source"] = "measured on " + machine + ": median of " + std::to_string(efficiencies.size()) +
                                    " fused attention forwards' FLOPs / (time x peak)" +
                                    (any_causal ? "" : ", without a causal mask") +
                                    "; the backward taken at the same efficiency";
    }
  }
}

void fit_collectives(const Measurements& m, MeasuredCurves& curves, FitResult& result, const std::string& file) {
  using Key = std::tuple<CollectiveOp, std::string, int, int>;
  std::map<Key, std::vector<LinePoint>> groups;
  std::map<Key, std::size_t> dropped;
  for (const auto& c : m.collectives) {
    const Key key{c.op, c.algorithm, c.ranks, c.nodes};
    if (c.wrong && *c.wrong != 0) {
      ++dropped[key];
      continue;
    }
    if (c.bytes > 0) groups[key].push_back({c.bytes, c.seconds});
  }
  for (const auto& [key, count] : dropped) {
    const auto& [op, algorithm, ranks, nodes] = key;
    result.notes.push_back(std::string(workloads::to_string(op)) + " " + algorithm + " " + std::to_string(ranks) +
                           " ranks: " + std::to_string(count) + " point(s) with #wrong != 0 not fitted");
    if (!groups.count(key)) {
      throw InputError(file + ": every " + std::string(workloads::to_string(op)) + " point over " +
                       std::to_string(ranks) + " ranks reports #wrong != 0: nothing to fit on");
    }
  }
  for (const auto& [key, points] : groups) {
    const auto& [op, algorithm, ranks, nodes] = key;
    const std::string what = std::string(workloads::to_string(op)) + " " + algorithm + " " + std::to_string(ranks) +
                             " ranks / " + std::to_string(nodes) + (nodes == 1 ? " node" : " nodes");
    if (distinct_sizes(points) < 2) {
      throw InputError(file + ": " + what + ": needs at least two sizes to fit alpha and beta");
    }
    MeasuredCollective measured{op, algorithm, ranks, nodes, {fit_line(points), table_points(points)}};
    result.lines.push_back({what, "B/s", points.size(), measured.curve.fit});
    curves.collectives.push_back(std::move(measured));
  }
}

// Link efficiencies from the all-reduce bus bandwidth at the largest size
// measured, as nccl-tests users quote it.
void fit_links(const MeasuredCurves& curves, const topology::ClusterSpec& cluster, json& links, FitResult& result,
               const std::string& machine) {
  const MeasuredCollective* nvlink = nullptr;   // the largest one-node group
  const MeasuredCollective* network = nullptr;  // the largest one-rank-per-node group
  for (const auto& c : curves.collectives) {
    if (c.op != CollectiveOp::all_reduce || (c.algorithm != "auto" && c.algorithm != "ring") || c.ranks < 2) continue;
    const MeasuredCollective** best = c.nodes == 1 ? &nvlink : (c.nodes == c.ranks ? &network : nullptr);
    if (best != nullptr && (*best == nullptr || c.ranks > (*best)->ranks)) *best = &c;
  }
  const auto apply = [&](const MeasuredCollective* best, const char* kind, double nominal, const std::string& nominal_name) {
    if (best == nullptr || nominal <= 0) return;
    const LinePoint& last = best->curve.points.back();
    const double busbw = last.x / last.seconds * workloads::bus_bandwidth_factor(CollectiveOp::all_reduce, best->ranks);
    const double efficiency = busbw / nominal;
    const std::string where = std::string("all_reduce ") + best->algorithm + " over " +
                              std::to_string(best->ranks) + " ranks, " + format("%.4g", last.x) + " B: busbw " +
                              format("%.2f", busbw / 1e9) + " GB/s over " + nominal_name + " " +
                              format("%.2f", nominal / 1e9) + " GB/s";
    if (efficiency > 1) {
      result.notes.push_back(std::string(kind) + ": " + where + " exceeds 1 (in-switch reduction, NVLS or SHARP?); "
                             "link efficiency left as it was");
      return;
    }
    links[kind] = {{"bandwidth_efficiency", efficiency}, {"source", "measured on " + machine + ": " + where}};
    result.notes.push_back(std::string(kind) + " efficiency " + format("%.4f", efficiency) + " (" + where + ")");
  };
  apply(nvlink, "nvlink", cluster.node.nvlink_bidirectional_bytes_per_second / 2, "NVLink per direction");
  apply(network, "network", cluster.node.nic_bits_per_second / 8, "one NIC");
}

// Without a base profile: one ring (or direct) entry per measured collective,
// its smallest measured alpha as the call latency and full bandwidth.
void minimal_collective_model(const MeasuredCurves& curves, json& collectives, const std::string& machine) {
  std::map<CollectiveOp, double> alpha;
  for (const auto& c : curves.collectives) {
    const auto it = alpha.find(c.op);
    alpha[c.op] = it == alpha.end() ? c.curve.fit.alpha_seconds : std::min(it->second, c.curve.fit.alpha_seconds);
  }
  for (const auto& [op, seconds] : alpha) {
    const bool direct = op == CollectiveOp::all_to_all || op == CollectiveOp::send_recv;
    json simple = {{"base_latency_seconds", seconds},
                   {"hop_latency_seconds", {{"nvlink", 0.0}, {"pcie", 0.0}, {"network", 0.0}}},
                   {"bandwidth_factor", 1.0}};
    if (direct) simple["message_overhead_seconds"] = 0.0;
    collectives[std::string(workloads::to_string(op))][direct ? "direct" : "ring"] = {
        {"source", "measured on " + machine + ": smallest fitted alpha of this collective, full link bandwidth "
                   "(a minimal model; --network table uses the measured curves)"},
        {"simple", simple}};
  }
}

}  // namespace

FitResult fit_profile(const Measurements& m, const FitOptions& options, const std::string& measurements_file) {
  FitResult result;
  const bool has_base = options.base.has_value();
  result.profile = has_base ? *options.base : skeleton(m);
  json& profile = result.profile;
  profile.erase("measured");
  if (!options.name.empty()) {
    profile["name"] = options.name;
  } else if (has_base) {
    profile["name"] = profile.value("name", std::string("profile")) + "-measured";
  }
  const std::string machine = describe(m.machine);
  MeasuredCurves curves;
  curves.machine = machine;
  try {
    fit_gemms(m, profile["compute"], curves, result, has_base, machine);
    fit_memory(m, profile["compute"], curves, result, has_base, machine);
    fit_overheads(m, profile["compute"], result, machine);
    fit_collectives(m, curves, result, measurements_file);
  } catch (const std::invalid_argument& e) {
    throw InputError(measurements_file + ": " + e.what());
  }
  if (options.cluster != nullptr) fit_links(curves, *options.cluster, profile["links"], result, machine);
  if (!has_base) minimal_collective_model(curves, profile["collectives"], machine);
  if (curves.empty()) throw InputError(measurements_file + ": no GEMMs, copies or collectives to fit");
  profile["measured"] = measured_curves_to_json(curves);
  profile["sources"].push_back("measured: " + machine + ", fitted by shardsim calib fit from " + measurements_file);

  try {
    parse_profile(profile, "the fitted profile");
  } catch (const InputError& e) {
    throw InputError(std::string(e.what()) + " (measure it, or give --base PROFILE for what was not measured)");
  }
  return result;
}

}  // namespace shardsim::calib
