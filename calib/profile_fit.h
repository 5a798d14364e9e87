// The fit: raw measurements (calib/measurements.h) -> a calibration profile.
//
// What each measurement becomes:
//   GEMMs         per dtype, t = t0 + FLOPs / R by relative least squares
//                 (calib/line_fit.h); compute.dtypes.<d>.gemm_efficiency is
//                 the measured curve itself, one point per octave of FLOPs
//                 (the median of that octave's FLOPs / (t * peak)). The peak
//                 stays the base profile's nominal one, so MFU keeps its
//                 meaning; with no nominal figure it is the best measured rate.
//   copies        t = t0 + traffic / B per kind, kept as curves;
//                 hbm_efficiency = the largest copy's traffic rate over the
//                 nominal HBM bandwidth (smaller copies run from cache);
//                 host_copy stands in where a CPU has no HBM.
//   launch        kernel_launch_seconds = the median sample.
//   attention     attention_efficiency = median FLOPs / (t * peak) of the
//                 fused attention forwards (FLOPs counted as
//                 workloads::flash_attention_flops does); the simulator
//                 prices the backward at the same efficiency.
//   interference  interference_slowdown = median(with / alone) - 1.
//   collectives   one alpha-beta line per (collective, algorithm, ranks,
//                 nodes), points with #wrong != 0 dropped; all kept as
//                 measured curves for table mode. With a cluster, the
//                 asymptotic all-reduce bus bandwidth of a group inside one
//                 node sets the NVLink efficiency (over the per-direction
//                 NVLink bandwidth), and of a group of one rank per node the
//                 network efficiency (over one NIC).
//   NVLS          with a cluster, `shardsim calib fit` also fits the NVLS
//                 chunk pipeline to a one-node all-reduce
//                 (sim/collectives/nvls_pipeline_fit.h: it needs the
//                 simulator's NVLS plan, so the CLI does it after this fit).
// Whatever was not measured comes from the base profile. Without a base the
// profile still loads: links at efficiency 1 and a minimal collective model
// (the smallest measured alpha, full bandwidth), each marked "not measured".
#pragma once

#include "calib/line_fit.h"
#include "calib/measurements.h"
#include "topology/cluster_spec.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace shardsim::calib {

struct FitOptions {
  std::optional<nlohmann::json> base;         // a profile document
  const topology::ClusterSpec* cluster = nullptr;  // nominal link speeds
  std::string name;                           // of the new profile
};

// One fitted line, for the quality table.
struct FitLine {
  std::string what;  // "gemm bf16", "all_reduce auto 8 ranks / 1 node", ...
  std::string unit;  // "FLOP/s" or "B/s"
  std::size_t points = 0;
  LineFit fit;
};

struct FitResult {
  nlohmann::json profile;
  std::vector<FitLine> lines;
  std::vector<std::string> notes;  // points dropped, values clamped, ...
};

// Throws InputError when a group of points cannot be fitted (fewer than two
// sizes, every point wrong). `measurements_file` names the input in messages.
FitResult fit_profile(const Measurements& measurements, const FitOptions& options,
                      const std::string& measurements_file);

}  // namespace shardsim::calib
