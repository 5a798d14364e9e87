#include "sim/collectives/nvls_pipeline_fit.h"

#include "sim/collectives/group.h"
#include "sim/collectives/nvls.h"
#include "topology/routing.h"

#include <cmath>
#include <numeric>

namespace shardsim::sim {

namespace {

constexpr int kMinSizes = 4;

// The largest one-node all-reduce curve NCCL chose for, or pinned to NVLS.
const calib::MeasuredCollective* nvls_curve(const calib::MeasuredCurves& curves, int gpus_per_node) {
  const calib::MeasuredCollective* best = nullptr;
  for (const auto& c : curves.collectives) {
    if (c.op != workloads::CollectiveOp::all_reduce || c.nodes != 1 || c.ranks < 2 || c.ranks > gpus_per_node) continue;
    if (c.algorithm != "auto" && c.algorithm != "nvls") continue;
    int sizes = 0;
    for (const auto& p : c.curve.points) sizes += p.x >= kNvlsFitFromBytes;
    if (sizes >= kMinSizes && (best == nullptr || c.ranks > best->ranks)) best = &c;
  }
  return best;
}

// The pipeline's time for a buffer, with the plan's per-byte cost fixed and
// the fill and per-chunk overhead of one candidate.
struct Model {
  double seconds_per_byte = 0;  // the NVLS cost line's, at the link-limited rate
  SizeCorrection correction;    // NCCL's chunking for the group

  SizeCorrection with(double fill, double overhead) const {
    SizeCorrection c = correction;
    c.pipeline.fill_chunks = fill;
    c.pipeline.chunk_overhead_seconds = overhead;
    return c;
  }
  double seconds(const SizeCorrection& c, double bytes, double base) const {
    return base + seconds_per_byte * c.wire_scale(bytes) + c.added_seconds(bytes);
  }
};

}  // namespace

std::optional<NvlsPipelineFit> fit_nvls_pipeline(const topology::Cluster& cluster, const calib::Profile& profile,
                                                 const calib::MeasuredCurves& curves) {
  using workloads::Algorithm;
  using workloads::CollectiveOp;
  using workloads::Protocol;
  const calib::ProtocolParams* params = profile.find(CollectiveOp::all_reduce, Algorithm::nvls, Protocol::simple);
  if (params == nullptr || !params->chunk_pipeline) return std::nullopt;
  const calib::MeasuredCollective* curve = nvls_curve(curves, cluster.gpus_per_node());
  if (curve == nullptr) return std::nullopt;

  std::vector<topology::GpuId> gpus(static_cast<std::size_t>(curve->ranks));
  std::iota(gpus.begin(), gpus.end(), 0);
  const GroupLayout group = make_group_layout(cluster, gpus);
  const topology::Router router(cluster);
  const CollectiveContext context{cluster, router, profile, group};
  const CollectiveCost cost = collective_algorithm(Algorithm::nvls).cost(context, {CollectiveOp::all_reduce, 0},
                                                                         Protocol::simple);
  const Model model{cost.phases.front().front().seconds_per_byte, cost.size_correction};

  std::vector<calib::LinePoint> points;
  for (const auto& p : curve->curve.points) {
    if (p.x >= kNvlsFitFromBytes) points.push_back(p);
  }
  const auto loss = [&](double base, double fill, double overhead) {
    const SizeCorrection candidate = model.with(fill, overhead);
    double sum = 0;
    for (const auto& p : points) {
      const double error = std::log(model.seconds(candidate, p.x, base) / p.seconds);
      sum += error * error;
    }
    return sum;
  };
  // Axes: base latency (s), fill (chunks), overhead (s per chunk): start, step, count.
  struct Axis {
    double start, step;
    int count;
  };
  Axis axes[3] = {{0, 1e-6, 41}, {0, 0.25, 33}, {0, 0.25e-6, 33}};
  double best[3] = {0, 0, 0};
  double best_loss = loss(0, 0, 0);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < axes[0].count; ++i) {
      for (int j = 0; j < axes[1].count; ++j) {
        for (int k = 0; k < axes[2].count; ++k) {
          const double candidate[3] = {axes[0].start + i * axes[0].step, axes[1].start + j * axes[1].step,
                                       axes[2].start + k * axes[2].step};
          const double value = loss(candidate[0], candidate[1], candidate[2]);
          if (value < best_loss) {
            best_loss = value;
            std::copy(candidate, candidate + 3, best);
          }
        }
      }
    }
    for (int a = 0; a < 3; ++a) {
      const double step = axes[a].step;
      axes[a] = {std::max(0.0, best[a] - 2 * step), step / 5, 21};
    }
  }

  NvlsPipelineFit fit;
  fit.pipeline = {params->chunk_pipeline->channels, best[0], best[1], best[2]};
  fit.ranks = curve->ranks;
  fit.points = points.size();
  const SizeCorrection fitted = model.with(best[1], best[2]);
  double log_sum = 0;
  for (const auto& p : points) {
    const double ratio = p.seconds / model.seconds(fitted, p.x, best[0]);  // busbw simulated / measured
    log_sum += std::log(ratio);
    if (std::abs(std::log(ratio)) > std::abs(std::log(fit.worst_ratio))) fit.worst_ratio = ratio;
  }
  fit.geomean_ratio = std::exp(log_sum / static_cast<double>(points.size()));
  fit.what = "all_reduce " + curve->algorithm + " over " + std::to_string(curve->ranks) + " ranks on one node, " +
             std::to_string(points.size()) + " sizes from 1 MiB";
  return fit;
}

}  // namespace shardsim::sim
