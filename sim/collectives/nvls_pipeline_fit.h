// Fitting an NVLS chunk pipeline (calib::ChunkPipeline) to a machine's own
// nccl-tests log: what `shardsim calib fit --cluster C` does with a one-node
// all-reduce when the profile runs NVLS there.
//
// The pipeline's three numbers (base latency, fill chunks, per-chunk
// overhead) are global to the machine; the chunk sizes and the number of
// operations are NCCL's rules for each group (nccl_chunking.h), so a fit on
// one node's 8 GPUs prices 4 GPUs, or any buffer size, by the same rules.
// The link-limited rate stays the profile's: the fit explains the curve's
// approach to it, not the rate itself.
#pragma once

#include "calib/measured_curves.h"
#include "calib/profile.h"
#include "topology/cluster.h"

#include <optional>
#include <string>

namespace shardsim::sim {

struct NvlsPipelineFit {
  calib::ChunkPipeline pipeline;
  int ranks = 0;
  std::size_t points = 0;
  // Simulated / measured bus bandwidth over the fitted points under the fit.
  double geomean_ratio = 1;
  double worst_ratio = 1;  // furthest from 1
  std::string what;        // the curve fitted, for messages and the profile's source
};

// The buffer sizes from which NCCL runs NVLS in the fit: below, a one-node
// all-reduce runs ring LL and says nothing of NVLS.
inline constexpr double kNvlsFitFromBytes = 1 << 20;

// Empty when there is nothing to fit: the profile has no NVLS chunk pipeline
// to start from, or `curves` no one-node all-reduce (auto or nvls) with at
// least four sizes from kNvlsFitFromBytes. Deterministic (a grid search
// refined twice, least squares of the log time).
std::optional<NvlsPipelineFit> fit_nvls_pipeline(const topology::Cluster& cluster, const calib::Profile& profile,
                                                 const calib::MeasuredCurves& curves);

}  // namespace shardsim::sim
