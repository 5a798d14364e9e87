// Profile: the calibrated numbers a simulation runs on (calib/profiles/*.json).
//
// A cluster JSON describes what is cabled (nominal link speeds); a profile
// says what software achieves on it: the fraction of each link kind's
// bandwidth reached, each collective's alpha-beta parameters per algorithm
// and protocol (the latency of a call and of a hop, the bandwidth fraction a
// protocol reaches, and the corrections NCCL's own tuning applies), the
// compute model (peak FLOPs and GEMM efficiency per dtype, attention, HBM,
// launch cost, the slowdown beside communication) and, for a fitted
// profile, what the fit measured (measured_curves.h). Every entry carries a
// "source" saying where its numbers come from; a protocol missing from an
// algorithm is not available there. The file's keys, one by one, are in
// the README's "Files" section.
#pragma once

#include "calib/measured_curves.h"
#include "topology/link_kind.h"
#include "workloads/ir/collective_kind.h"
#include "workloads/ir/program.h"

#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardsim::calib {

using topology::LinkKind;
using workloads::Algorithm;
using workloads::CollectiveOp;
using workloads::Protocol;

// One step of a table over buffer sizes: `factor` holds from `from_bytes` up
// to the next step's; the first step also holds below its own.
struct SizeStep {
  double from_bytes = 0;
  double factor = 1;
};

// NCCL's "plateau effect of ring" (ncclTopoGetAlgoTime): a ring all-reduce
// across nodes takes its latency times `latency_factor` once the call carries
// at least `from_bytes_per_rank_and_channel` per rank and channel.
struct LatencyPlateau {
  double latency_factor = 1;
  double from_bytes_per_rank_and_channel = 0;
};

// How NCCL's NVLS kernels move a buffer, as a pipeline of chunks
// (enqueue.cc calcCollChunking; sim/collectives/nccl_chunking.h): every one
// of the channels x heads concurrent operations carries its share in chunks
// whose size NCCL picks by the buffer's size; a chunk passes a few stages
// (into the switch, the reduction, the multicast back), so a call takes the
// time of its chunks plus `fill_chunks` more to fill and drain the
// pipeline, and each chunk costs `chunk_overhead_seconds` of synchronisation
// on top of its bytes. `base_latency_seconds` is then what is left of the
// call's latency: NCCL's tuning model lumps the fill into its latency, which
// the algorithm still uses to choose, as NCCL does.
struct ChunkPipeline {
  int channels = 0;  // NCCL's NVLS channels for the GPU (nvls.cc: 16 on SM90)
  double base_latency_seconds = 0;
  double fill_chunks = 0;
  double chunk_overhead_seconds = 0;
};

struct ProtocolParams {
  double base_latency_seconds = 0;
  std::array<double, topology::kLinkKindCount> hop_latency_seconds{};  // by LinkKind
  double bandwidth_factor = 1;
  // NCCL's protocol refinements by group shape (ncclTopoTuneModel): a
  // protocol's reach differs inside one node, and with fewer than two ranks
  // per node, where "we are sending/receiving at the same GPU through the NIC".
  // Unset: bandwidth_factor.
  std::optional<double> single_node_bandwidth_factor;
  std::optional<double> one_rank_per_node_bandwidth_factor;
  // NCCL's per-channel caps (perChMaxRingLL128Bw, perChMaxTreeBw,
  // perChMaxTreeLL128Bw), which bind where a channel's NIC is fast. NCCL
  // applies them to nChannels x the network speed of a channel from three
  // nodes up, its channels there being one per NIC at the NIC's speed, as
  // the simulator's are (group.h). On one or two nodes NCCL caps the NVLink
  // side of its channels instead, which the simulator does not model.
  std::optional<double> channel_cap_bytes_per_second;
  double message_overhead_seconds = 0;
  // NCCL's tuning model: "inter-node rings still have to launch nsteps * net
  // overhead", so a step inside a node costs no less than a network post.
  double multi_node_step_floor_seconds = 0;
  LatencyPlateau multi_node_plateau;
  // NCCL's treeCorrectionFactor: "trees are not perfectly sticking to the
  // model for medium sizes", so their bandwidth is scaled by size. Empty: 1.
  std::vector<SizeStep> bandwidth_correction;
  // NVLS and NVLS tree: the chunk pipeline the call's time follows. Unset:
  // the tuning model's alpha-beta line.
  std::optional<ChunkPipeline> chunk_pipeline;

  double hop_latency(LinkKind kind) const { return hop_latency_seconds[static_cast<std::size_t>(kind)]; }
  // The bandwidth factor of a group of `ranks` GPUs on `nodes` nodes whose
  // channels each cross NICs that carry `nic_bytes_per_second` (nominal times
  // the network's efficiency): the factor for the group's shape, no more than
  // the channel cap allows on such a NIC.
  double bandwidth_factor_for(int ranks, int nodes, double nic_bytes_per_second) const;
};

struct AlgorithmParams {
  std::string source;
  std::map<Protocol, ProtocolParams> protocols;
};

struct LinkCalibration {
  double bandwidth_efficiency = 1;
  std::string source;
};

// GEMM efficiency as a function of the GEMM's size, 2 m n k FLOPs.
struct EfficiencyPoint {
  double flops = 0;
  double efficiency = 0;
};

struct AttentionKernelCalibration {
  double efficiency = 1;
  std::string source;
};

struct DtypeCompute {
  double peak_flops_per_second = 0;
  std::vector<EfficiencyPoint> gemm_efficiency;  // ascending flops
  std::string source;

  // Interpolated linearly in log(flops) between the table's points, and
  // clamped to the first and last point outside them.
  double gemm_efficiency_at(double flops) const;
};

struct ComputeCalibration {
  std::map<std::string, DtypeCompute, std::less<>> dtypes;  // "bf16", "fp16", "fp8", "fp32"
  double attention_efficiency = 1;  // the profile's own fused kernel
  std::string attention_source;
  std::map<workloads::AttentionKernel, AttentionKernelCalibration> attention_kernels;  // named generations only
  double hbm_bytes_per_second = 0;
  double hbm_efficiency = 1;
  std::string hbm_source;
  double kernel_launch_seconds = 0;
  double interference_slowdown = 0;
  std::string overheads_source;
  // A kernel inside a training step takes this many times what the curves
  // above, single-GPU benchmarks, give it: the cost of running among a
  // step's other kernels on a fully loaded node (shared heat, caches, the
  // framework's shapes) that no benchmark here isolates. 1 unless fitted to
  // published end-to-end runs (shardsim calib fit-runs), which the source
  // and the profile's fitted_to name.
  double kernel_time_factor = 1;
  std::string kernel_time_factor_source;

  // nullptr when the profile has no entry for the dtype.
  const DtypeCompute* find(std::string_view dtype) const;
  double achievable_hbm_bytes_per_second() const { return hbm_bytes_per_second * hbm_efficiency; }
};

struct Profile {
  std::string name;
  std::string gpu;
  std::string file;
  std::array<LinkCalibration, topology::kLinkKindCount> links{};
  std::map<std::pair<CollectiveOp, Algorithm>, AlgorithmParams> collectives;
  ComputeCalibration compute;
  MeasuredCurves measured;  // empty for a datasheet profile
  std::vector<std::string> sources;
  // What a fitted kernel_time_factor was fitted to (calib/run_fit.h): the
  // runs file, its runs by name and the fit's errors. Empty otherwise.
  nlohmann::json fitted_to;

  double bandwidth_efficiency(LinkKind kind) const {
    return links[static_cast<std::size_t>(kind)].bandwidth_efficiency;
  }
  // The efficiency attention ops of `kernel` run at. Throws InputError
  // naming compute.attention_kernels.<name> when the profile has none.
  double attention_efficiency(workloads::AttentionKernel kernel) const;
  // nullptr when the profile has no entry for this collective and algorithm.
  const AlgorithmParams* find(CollectiveOp op, Algorithm algorithm) const;
  const ProtocolParams* find(CollectiveOp op, Algorithm algorithm, Protocol protocol) const;
};

// Parses and validates; throws InputError naming `file` and the field.
Profile parse_profile(const nlohmann::json& document, const std::string& file);

// Loads a profile from a JSON file path or a bundled preset name
// (calib/profiles/<name>.json).
Profile load_profile(const std::string& file_or_preset);

}  // namespace shardsim::calib
