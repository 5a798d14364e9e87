// The measured curves a fitted profile keeps next to its model parameters
// (the "measured" section of a profile): for every collective and group
// shape, every GEMM dtype and every kind of copy, the alpha-beta line the fit
// found, its quality, and the measured points themselves.
//
// The points serve "table mode" (TECHNIQUES §2): a collective of a measured
// shape takes the time interpolated between measured sizes rather than the
// model's, so a profile built from nccl-tests logs reproduces them exactly.
#pragma once

#include "calib/line_fit.h"
#include "topology/base/json_input.h"
#include "workloads/ir/collective_kind.h"

#include <nlohmann/json.hpp>

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace shardsim::calib {

struct MeasuredCurve {
  LineFit fit;
  std::vector<LinePoint> points;  // ascending x, one per x

  double seconds_at(double x) const { return interpolate_seconds(points, fit, x); }
};

// x: bytes, nccl-tests' size (the whole array for all-gather and reduce-scatter).
struct MeasuredCollective {
  workloads::CollectiveOp op = workloads::CollectiveOp::all_reduce;
  std::string algorithm = "auto";
  int ranks = 1;
  int nodes = 1;
  MeasuredCurve curve;
};

// A GEMM shape as the probe times it and a Program's op names it.
struct GemmShapeKey {
  std::string dtype;
  std::int64_t m = 0, n = 0, k = 0;
  auto operator<=>(const GemmShapeKey&) const = default;
};

struct MeasuredCurves {
  std::string machine;
  std::vector<MeasuredCollective> collectives;
  std::map<std::string, MeasuredCurve> gemm;    // by dtype; x: FLOPs (2 m n k)
  std::map<std::string, MeasuredCurve> copies;  // by copy kind; x: bytes of traffic
  // Seconds of one GEMM of each measured shape (a batched call's time over
  // its batch; the median where a shape was timed more than once). Shapes of
  // the same FLOPs run up to 15 % apart, which the efficiency table by
  // FLOPs averages away; an op of a measured shape takes its own time.
  std::map<GemmShapeKey, double> gemm_shapes;

  bool empty() const { return collectives.empty() && gemm.empty() && copies.empty() && gemm_shapes.empty(); }
  // The curve of a collective on `ranks` ranks over `nodes` nodes, NCCL's own
  // choice ("auto") first; nullptr when none was measured.
  const MeasuredCollective* find(workloads::CollectiveOp op, int ranks, int nodes) const;
  // Seconds of one GEMM of exactly this shape; nullptr when it was not measured.
  const double* gemm_seconds(const GemmShapeKey& shape) const;
};

// Points sorted by x, equal x merged into their median.
std::vector<LinePoint> table_points(std::vector<LinePoint> points);

nlohmann::json measured_curves_to_json(const MeasuredCurves& curves);
MeasuredCurves parse_measured_curves(JsonObjectReader reader);

}  // namespace shardsim::calib
