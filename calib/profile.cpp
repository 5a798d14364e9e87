#include "calib/profile.h"

#include "topology/json_input.h"
#include "topology/presets.h"

namespace shardsim::calib {

namespace {

using workloads::parse_algorithm;
using workloads::parse_collective_op;
using workloads::parse_protocol;

constexpr std::array<LinkKind, topology::kLinkKindCount> kLinkKinds{LinkKind::nvlink, LinkKind::pcie,
                                                                    LinkKind::network};

// Which algorithms NCCL (and shardsim) run for each collective. The
// hierarchical scheme has no entry of its own: it is built from ring phases.
bool algorithm_allowed(CollectiveOp op, Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::ring:
      return op != CollectiveOp::all_to_all && op != CollectiveOp::send_recv;
    case Algorithm::tree: return op == CollectiveOp::all_reduce;
    case Algorithm::direct: return op == CollectiveOp::all_to_all || op == CollectiveOp::send_recv;
    case Algorithm::hierarchical: return false;
  }
  return false;
}

double fraction(JsonObjectReader& reader, const std::string& key) {
  const double x = reader.positive_number(key);
  if (x > 1.0) reader.fail(key, "must be a fraction in (0, 1], got " + std::to_string(x));
  return x;
}

ProtocolParams parse_protocol_params(JsonObjectReader reader, Algorithm algorithm) {
  ProtocolParams params;
  params.base_latency_seconds = reader.non_negative_number("base_latency_seconds");
  auto hops = reader.object("hop_latency_seconds");
  for (LinkKind kind : kLinkKinds) {
    params.hop_latency_seconds[static_cast<std::size_t>(kind)] = hops.non_negative_number(topology::to_string(kind));
  }
  hops.finish();
  params.bandwidth_factor = fraction(reader, "bandwidth_factor");
  if (algorithm == Algorithm::direct) {
    params.message_overhead_seconds = reader.non_negative_number("message_overhead_seconds");
  }
  reader.finish();
  return params;
}

}  // namespace

const AlgorithmParams* Profile::find(CollectiveOp op, Algorithm algorithm) const {
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
      if (!algorithm || !algorithm_allowed(*op, *algorithm)) {
        algorithms.fail(algorithm_name, "is not an algorithm of " + op_name);
      }
      auto entry = algorithms.object(algorithm_name);
      AlgorithmParams params;
      params.source = entry.string("source");
      for (const auto& key : entry.take_all_keys()) {
        if (key == "source") continue;
        const auto protocol = parse_protocol(key);
        if (!protocol) entry.fail(key, "unknown protocol (ll, ll128, simple)");
        params.protocols[*protocol] = parse_protocol_params(entry.object(key), *algorithm);
      }
      if (params.protocols.empty()) entry.fail("simple", "missing: give at least one protocol");
      profile.collectives[{*op, *algorithm}] = std::move(params);
    }
  }

  profile.compute = document.contains("compute") ? document.at("compute") : nlohmann::json::object();
  if (reader.has("compute")) reader.object("compute").take_all_keys();
  profile.sources = reader.string_list("sources");
  reader.finish();
  return profile;
}

Profile load_profile(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "calib/profiles", "profile");
  return parse_profile(load_json_file(file), file);
}

}  // namespace shardsim::calib
