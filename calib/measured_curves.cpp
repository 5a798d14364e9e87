#include "calib/measured_curves.h"

#include <algorithm>

namespace shardsim::calib {

namespace {

using nlohmann::json;

json curve_to_json(const MeasuredCurve& curve, const char* rate_key) {
  json points = json::array();
  for (const auto& p : curve.points) points.push_back({p.x, p.seconds});
  return {{"alpha_seconds", curve.fit.alpha_seconds},
          {rate_key, curve.fit.units_per_second},
          {"r_squared", curve.fit.r_squared},
          {"worst_relative_error", curve.fit.worst_relative_error},
          {"points", points}};
}

MeasuredCurve parse_curve(JsonObjectReader& reader, const char* rate_key) {
  MeasuredCurve curve;
  curve.fit.alpha_seconds = reader.non_negative_number("alpha_seconds");
  curve.fit.units_per_second = reader.non_negative_number(rate_key);
  curve.fit.r_squared = reader.number_at_least("r_squared", -1e300);
  curve.fit.worst_relative_error = reader.non_negative_number("worst_relative_error");
  const json& points = reader.value("points");
  if (!points.is_array() || points.empty()) reader.fail("points", "must be a non-empty array of [x, seconds]");
  for (std::size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number() || p[0].get<double>() < 0 ||
        p[1].get<double>() <= 0) {
      reader.fail("points[" + std::to_string(i) + "]", "must be [x >= 0, seconds > 0]");
    }
    if (!curve.points.empty() && p[0].get<double>() <= curve.points.back().x) {
      reader.fail("points[" + std::to_string(i) + "]", "x must increase along the table");
    }
    curve.points.push_back({p[0].get<double>(), p[1].get<double>()});
  }
  return curve;
}

// An object of curves keyed by dtype or copy kind.
std::map<std::string, MeasuredCurve> parse_curve_map(JsonObjectReader reader, const char* rate_key) {
  std::map<std::string, MeasuredCurve> curves;
  for (const auto& key : reader.take_all_keys()) {
    auto entry = reader.object(key);
    curves[key] = parse_curve(entry, rate_key);
    entry.finish();
  }
  reader.finish();
  return curves;
}

}  // namespace

std::vector<LinePoint> table_points(std::vector<LinePoint> points) {
  std::stable_sort(points.begin(), points.end(), [](const LinePoint& a, const LinePoint& b) { return a.x < b.x; });
  std::vector<LinePoint> table;
  for (std::size_t i = 0; i < points.size();) {
    std::size_t j = i;
    std::vector<double> times;
    while (j < points.size() && points[j].x == points[i].x) times.push_back(points[j++].seconds);
    std::sort(times.begin(), times.end());
    const std::size_t h = times.size() / 2;
    table.push_back({points[i].x, times.size() % 2 ? times[h] : 0.5 * (times[h - 1] + times[h])});
    i = j;
  }
  return table;
}

const MeasuredCollective* MeasuredCurves::find(workloads::CollectiveOp op, int ranks, int nodes) const {
  const MeasuredCollective* found = nullptr;
  for (const auto& c : collectives) {
    if (c.op != op || c.ranks != ranks || c.nodes != nodes) continue;
    if (c.algorithm == "auto") return &c;
    if (found == nullptr) found = &c;
  }
  return found;
}

const double* MeasuredCurves::gemm_seconds(const GemmShapeKey& shape) const {
  const auto it = gemm_shapes.find(shape);
  return it == gemm_shapes.end() ? nullptr : &it->second;
}

json measured_curves_to_json(const MeasuredCurves& curves) {
  json out;
  out["machine"] = curves.machine;
  out["collectives"] = json::array();
  for (const auto& c : curves.collectives) {
    json entry = curve_to_json(c.curve, "bytes_per_second");
    entry["op"] = workloads::to_string(c.op);
    entry["algorithm"] = c.algorithm;
    entry["ranks"] = c.ranks;
    entry["nodes"] = c.nodes;
    out["collectives"].push_back(entry);
  }
  out["gemm"] = json::object();
  for (const auto& [dtype, curve] : curves.gemm) out["gemm"][dtype] = curve_to_json(curve, "flops_per_second");
  out["copies"] = json::object();
  for (const auto& [kind, curve] : curves.copies) out["copies"][kind] = curve_to_json(curve, "bytes_per_second");
  out["gemm_shapes"] = json::array();
  for (const auto& [shape, seconds] : curves.gemm_shapes) {
    out["gemm_shapes"].push_back(
        {{"dtype", shape.dtype}, {"m", shape.m}, {"n", shape.n}, {"k", shape.k}, {"seconds", seconds}});
  }
  return out;
}

MeasuredCurves parse_measured_curves(JsonObjectReader reader) {
  MeasuredCurves curves;
  curves.machine = reader.string("machine");
  const json& list = reader.value("collectives");
  if (!list.is_array()) reader.fail("collectives", "must be an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    JsonObjectReader entry(list[i], reader.file(), reader.field_path("collectives[" + std::to_string(i) + "]"));
    MeasuredCollective c;
    const std::string op = entry.string("op");
    const auto parsed = workloads::parse_collective_op(op);
    if (!parsed) entry.fail("op", "unknown collective '" + op + "'");
    c.op = *parsed;
    c.algorithm = entry.string("algorithm");
    c.ranks = entry.positive_int("ranks");
    c.nodes = entry.positive_int("nodes");
    c.curve = parse_curve(entry, "bytes_per_second");
    entry.finish();
    curves.collectives.push_back(std::move(c));
  }
  curves.gemm = parse_curve_map(reader.object("gemm"), "flops_per_second");
  curves.copies = parse_curve_map(reader.object("copies"), "bytes_per_second");
  // Profiles fitted before shapes were kept have none; their GEMMs take the
  // efficiency table.
  if (reader.has("gemm_shapes")) {
    const json& shapes = reader.value("gemm_shapes");
    if (!shapes.is_array()) reader.fail("gemm_shapes", "must be an array of {dtype, m, n, k, seconds}");
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      JsonObjectReader entry(shapes[i], reader.file(), reader.field_path("gemm_shapes[" + std::to_string(i) + "]"));
      GemmShapeKey shape{entry.string("dtype"), entry.positive_integer("m"), entry.positive_integer("n"),
                         entry.positive_integer("k")};
      const double seconds = entry.positive_number("seconds");
      entry.finish();
      if (!curves.gemm_shapes.emplace(std::move(shape), seconds).second) {
        reader.fail("gemm_shapes[" + std::to_string(i) + "]", "repeats an earlier entry's dtype, m, n and k");
      }
    }
  }
  reader.finish();
  return curves;
}

}  // namespace shardsim::calib
