#include "calib/profile.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/ir/algorithm_support.h"

#include <algorithm>
#include <cmath>

namespace shardsim::calib {

namespace {

using workloads::parse_algorithm;
using workloads::parse_collective_op;
using workloads::parse_protocol;

constexpr std::array<LinkKind, topology::kLinkKindCount> kLinkKinds{LinkKind::nvlink, LinkKind::pcie,
                                                                    LinkKind::network};

double fraction(JsonObjectReader& reader, const std::string& key) {
  const double x = reader.positive_number(key);
  if (x > 1.0) reader.fail(key, "must be a fraction in (0, 1], got " + std::to_string(x));
  return x;
}

// A non-empty table, sizes strictly increasing, factors fractions.
std::vector<SizeStep> parse_size_steps(JsonObjectReader& reader, const std::string& key) {
  const nlohmann::json& steps = reader.value(key);
  if (!steps.is_array() || steps.empty()) reader.fail(key, "must be a non-empty array of {from_bytes, factor}");
  std::vector<SizeStep> table;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::string element = key + "[" + std::to_string(i) + "]";
    JsonObjectReader step(steps[i], reader.file(), reader.field_path(element));
    SizeStep parsed;
    parsed.from_bytes = step.non_negative_number("from_bytes");
    parsed.factor = fraction(step, "factor");
    step.finish();
    if (!table.empty() && parsed.from_bytes <= table.back().from_bytes) {
      reader.fail(element, "from_bytes must increase along the table");
    }
    table.push_back(parsed);
  }
  return table;
}

ProtocolParams parse_protocol_params(JsonObjectReader reader, CollectiveOp op, Algorithm algorithm) {
  ProtocolParams params;
  params.base_latency_seconds = reader.latency_seconds("base_latency_seconds");
  auto hops = reader.object("hop_latency_seconds");
  for (LinkKind kind : kLinkKinds) {
    params.hop_latency_seconds[static_cast<std::size_t>(kind)] = hops.latency_seconds(topology::to_string(kind));
  }
  hops.finish();
  params.bandwidth_factor = fraction(reader, "bandwidth_factor");
  const auto has_ring_or_tree_field = [&](const char* key) {
    if (!reader.has(key)) return false;
    if (algorithm != Algorithm::ring && algorithm != Algorithm::tree) reader.fail(key, "only rings and trees have it");
    return true;
  };
  for (auto [key, factor] :
       {std::pair{"single_node_bandwidth_factor", &params.single_node_bandwidth_factor},
        std::pair{"one_rank_per_node_bandwidth_factor", &params.one_rank_per_node_bandwidth_factor}}) {
    if (has_ring_or_tree_field(key)) *factor = fraction(reader, key);
  }
  if (has_ring_or_tree_field("channel_cap_bytes_per_second")) {
    params.channel_cap_bytes_per_second = reader.positive_number("channel_cap_bytes_per_second");
  }
  if (algorithm == Algorithm::direct) {
    params.message_overhead_seconds = reader.latency_seconds("message_overhead_seconds");
  }
  if (reader.has("multi_node_step_floor_seconds")) {
    if (algorithm != Algorithm::ring || workloads::is_rooted(op)) {  // rooted rings are chains
      reader.fail("multi_node_step_floor_seconds", "only rings of all_reduce, all_gather and reduce_scatter have it");
    }
    params.multi_node_step_floor_seconds = reader.latency_seconds("multi_node_step_floor_seconds");
  }
  if (reader.has("multi_node_plateau")) {
    if (algorithm != Algorithm::ring || op != CollectiveOp::all_reduce) {
      reader.fail("multi_node_plateau", "only ring all_reduce has it");
    }
    auto plateau = reader.object("multi_node_plateau");
    params.multi_node_plateau.latency_factor = plateau.number_at_least("latency_factor", 1.0);
    params.multi_node_plateau.from_bytes_per_rank_and_channel =
        plateau.non_negative_number("from_bytes_per_rank_and_channel");
    plateau.finish();
  }
  if (reader.has("bandwidth_correction")) {
    if (algorithm != Algorithm::tree) reader.fail("bandwidth_correction", "only trees have it");
    params.bandwidth_correction = parse_size_steps(reader, "bandwidth_correction");
  }
  if (reader.has("chunk_pipeline")) {
    if (algorithm != Algorithm::nvls && algorithm != Algorithm::nvls_tree) {
      reader.fail("chunk_pipeline", "only nvls and nvls_tree have it (their chunking is NCCL's, see nccl_chunking.h)");
    }
    auto pipeline = reader.object("chunk_pipeline");
    ChunkPipeline parsed;
    parsed.channels = pipeline.positive_int("channels");
    if (parsed.channels > 64) pipeline.fail("channels", "must be at most 64 (NCCL's MAXCHANNELS)");
    parsed.base_latency_seconds = pipeline.latency_seconds("base_latency_seconds");
    parsed.fill_chunks = pipeline.non_negative_number("fill_chunks");
    parsed.chunk_overhead_seconds = pipeline.latency_seconds("chunk_overhead_seconds");
    pipeline.finish();
    params.chunk_pipeline = parsed;
  }
  reader.finish();
  return params;
}

ComputeCalibration parse_compute(JsonObjectReader reader) {
  ComputeCalibration compute;
  auto dtypes = reader.object("dtypes");
  for (const auto& name : dtypes.take_all_keys()) {
    if (name != "bf16" && name != "fp16" && name != "fp8" && name != "fp32") {
      dtypes.fail(name, "unknown dtype (bf16, fp16, fp8, fp32)");
    }
    auto entry = dtypes.object(name);
    DtypeCompute dtype;
    dtype.peak_flops_per_second = entry.positive_number("peak_flops_per_second");
    dtype.source = entry.string("source");
    const nlohmann::json& points = entry.value("gemm_efficiency");
    if (!points.is_array() || points.empty()) entry.fail("gemm_efficiency", "must be a non-empty array of {flops, efficiency}");
    for (std::size_t i = 0; i < points.size(); ++i) {
      const std::string key = "gemm_efficiency[" + std::to_string(i) + "]";
      JsonObjectReader point(points[i], reader.file(), entry.field_path(key));
      EfficiencyPoint parsed;
      parsed.flops = point.positive_number("flops");
      parsed.efficiency = fraction(point, "efficiency");
      if (point.has("record")) point.non_negative_integer("record");  // provenance, for readers
      point.finish();
      if (!dtype.gemm_efficiency.empty() && parsed.flops <= dtype.gemm_efficiency.back().flops) {
        entry.fail(key, "flops must increase along the table");
      }
      dtype.gemm_efficiency.push_back(parsed);
    }
    entry.finish();
    compute.dtypes.emplace(name, std::move(dtype));
  }
  dtypes.finish();
  if (compute.dtypes.empty()) reader.fail("dtypes", "must list at least one dtype");
  compute.attention_efficiency = fraction(reader, "attention_efficiency");
  compute.attention_source = reader.string("attention_source");
  if (reader.has("attention_kernels")) {
    auto kernels = reader.object("attention_kernels");
    for (const auto& name : kernels.take_all_keys()) {
      const std::optional<workloads::AttentionKernel> kernel = workloads::find_flash_attention(name);
      if (!kernel) {
        kernels.fail(name, "unknown attention kernel (" + std::string(workloads::kFlashAttentionNames) + ")");
      }
      auto entry = kernels.object(name);
      AttentionKernelCalibration calibration;
      calibration.efficiency = fraction(entry, "efficiency");
      calibration.source = entry.string("source");
      entry.finish();
      compute.attention_kernels.emplace(*kernel, std::move(calibration));
    }
    kernels.finish();
  }
  compute.hbm_bytes_per_second = reader.positive_number("hbm_bytes_per_second");
  compute.hbm_efficiency = fraction(reader, "hbm_efficiency");
  compute.hbm_source = reader.string("hbm_source");
  compute.kernel_launch_seconds = reader.non_negative_number("kernel_launch_seconds");
  compute.interference_slowdown = reader.non_negative_number("interference_slowdown");
  compute.overheads_source = reader.string("overheads_source");
  if (reader.has("kernel_time_factor")) {
    compute.kernel_time_factor = reader.positive_number("kernel_time_factor");
    // A factor below 1/2 or above 2 says the curves are wrong, not the step.
    if (compute.kernel_time_factor < 0.5 || compute.kernel_time_factor > 2) {
      reader.fail("kernel_time_factor", "must be between 0.5 and 2");
    }
    compute.kernel_time_factor_source = reader.string("kernel_time_factor_source");
  }
  reader.finish();
  return compute;
}

}  // namespace

double ProtocolParams::bandwidth_factor_for(int ranks, int nodes, double nic_bytes_per_second) const {
  if (nodes <= 1) return single_node_bandwidth_factor.value_or(bandwidth_factor);
  const double factor =
      ranks < 2 * nodes ? one_rank_per_node_bandwidth_factor.value_or(bandwidth_factor) : bandwidth_factor;
  if (nodes <= 2 || !channel_cap_bytes_per_second) return factor;
  return std::min(factor, *channel_cap_bytes_per_second / nic_bytes_per_second);  // no NIC: inf, no cap
}

double DtypeCompute::gemm_efficiency_at(double flops) const {
  const auto& table = gemm_efficiency;
  if (flops <= table.front().flops) return table.front().efficiency;
  if (flops >= table.back().flops) return table.back().efficiency;
  const auto upper = std::upper_bound(table.begin(), table.end(), flops,
                                      [](double x, const EfficiencyPoint& p) { return x < p.flops; });
  const auto lower = upper - 1;
  const double t = std::log(flops / lower->flops) / std::log(upper->flops / lower->flops);
  return lower->efficiency + t * (upper->efficiency - lower->efficiency);
}

const DtypeCompute* ComputeCalibration::find(std::string_view dtype) const {
  const auto it = dtypes.find(dtype);
  return it == dtypes.end() ? nullptr : &it->second;
}

double Profile::attention_efficiency(workloads::AttentionKernel kernel) const {
  if (kernel == workloads::AttentionKernel::profile) return compute.attention_efficiency;
  const auto it = compute.attention_kernels.find(kernel);
  if (it == compute.attention_kernels.end()) {
    const std::string name(workloads::to_string(kernel));
    throw_input_error(file, "compute.attention_kernels." + name,
                      "missing: the training config runs " + name +
                          " (attention_kernel), and this profile gives no efficiency for it");
  }
  return it->second.efficiency;
}

const AlgorithmParams* Profile::find(CollectiveOp op, Algorithm algorithm) const {
  // nccl-tests has no one-way send; its sendrecv runs the same point-to-point
  // path, one send each way at once.
  if (op == CollectiveOp::send && collectives.count({op, algorithm}) == 0) op = CollectiveOp::send_recv;
  const auto it = collectives.find({op, algorithm});
  return it == collectives.end() ? nullptr : &it->second;
}

const ProtocolParams* Profile::find(CollectiveOp op, Algorithm algorithm, Protocol protocol) const {
  const AlgorithmParams* params = find(op, algorithm);
  if (params == nullptr) return nullptr;
  const auto it = params->protocols.find(protocol);
  return it == params->protocols.end() ? nullptr : &it->second;
}

Profile parse_profile(const nlohmann::json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  Profile profile;
  profile.file = file;
  profile.name = reader.string("name");
  profile.gpu = reader.string("gpu");

  auto links = reader.object("links");
  for (LinkKind kind : kLinkKinds) {
    auto link = links.object(topology::to_string(kind));
    auto& calibration = profile.links[static_cast<std::size_t>(kind)];
    calibration.bandwidth_efficiency = fraction(link, "bandwidth_efficiency");
    calibration.source = link.string("source");
    link.finish();
  }
  links.finish();

  auto collectives = reader.object("collectives");
  for (const auto& op_name : collectives.take_all_keys()) {
    const auto op = parse_collective_op(op_name);
    if (!op) collectives.fail(op_name, "unknown collective");
    auto algorithms = collectives.object(op_name);
    for (const auto& algorithm_name : algorithms.take_all_keys()) {
      const auto algorithm = parse_algorithm(algorithm_name);
      if (!algorithm || !workloads::profile_calibrates(*op, *algorithm)) {
        algorithms.fail(algorithm_name, "is not an algorithm of " + op_name);
      }
      auto entry = algorithms.object(algorithm_name);
      AlgorithmParams params;
      params.source = entry.string("source");
      for (const auto& key : entry.take_all_keys()) {
        if (key == "source") continue;
        const auto protocol = parse_protocol(key);
        if (!protocol) entry.fail(key, "unknown protocol (ll, ll128, simple)");
        params.protocols[*protocol] = parse_protocol_params(entry.object(key), *op, *algorithm);
      }
      if (params.protocols.empty()) entry.fail("simple", "missing: give at least one protocol");
      profile.collectives[{*op, *algorithm}] = std::move(params);
    }
  }

  profile.compute = parse_compute(reader.object("compute"));
  if (reader.has("measured")) profile.measured = parse_measured_curves(reader.object("measured"));
  profile.sources = reader.string_list("sources");
  if (reader.has("fitted_to")) {
    profile.fitted_to = reader.value("fitted_to");
    if (!profile.fitted_to.is_object()) reader.fail("fitted_to", "must be an object: the runs the profile was fitted to");
  }
  reader.finish();
  return profile;
}

Profile load_profile(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "calib/profiles", "profile");
  return parse_profile(load_json_file(file), file);
}

}  // namespace shardsim::calib
