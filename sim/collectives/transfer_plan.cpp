#include "sim/collectives/transfer_plan.h"

#include <algorithm>

namespace shardsim::sim {

TransferBuilder::TransferBuilder(const topology::Router& router, const calib::ProtocolParams& protocol)
    : router_(router), protocol_(protocol), weight_by_link_(router.cluster().links().size(), 0.0) {}

TimePs TransferBuilder::add_hop(const Hop& hop) { return add_hop(hop, hops_); }

TimePs TransferBuilder::add_hop(const Hop& hop, std::uint64_t flow_key) {
  const topology::Route route = router_.route({hop.src, hop.dst, hop.src_nic, hop.dst_nic, flow_key});
  const double wire_bytes_per_payload_byte = 1.0 / protocol_.bandwidth_factor;
  for (const LinkUse& use : route.links) {
    auto& weight = weight_by_link_[static_cast<std::size_t>(use.link)];
    if (weight == 0) touched_.push_back(use.link);
    weight += use.weight * wire_bytes_per_payload_byte;
  }
  ++hops_;
  const auto kind = crosses_nodes(router_.cluster(), hop) ? topology::LinkKind::network : topology::LinkKind::nvlink;
  return picoseconds_from_seconds(protocol_.hop_latency(kind)) + route.latency;
}

void TransferBuilder::add_switch_traffic(topology::GpuId gpu, double to_switch, double from_switch) {
  const auto& cluster = router_.cluster();
  const int nvswitch = cluster.nvswitch_vertex(cluster.node_of(gpu));
  const double wire_bytes_per_payload_byte = 1.0 / protocol_.bandwidth_factor;
  for (const auto& [link, bytes] : {std::pair{cluster.link_between(cluster.gpu_vertex(gpu), nvswitch), to_switch},
                                    std::pair{cluster.link_between(nvswitch, cluster.gpu_vertex(gpu)), from_switch}}) {
    if (bytes == 0) continue;
    auto& weight = weight_by_link_[static_cast<std::size_t>(link)];
    if (weight == 0) touched_.push_back(link);
    weight += bytes * wire_bytes_per_payload_byte;
  }
}

Transfer TransferBuilder::take(double bytes_per_hop, TimePs latency) {
  Transfer transfer;
  hops_ = 0;
  std::sort(touched_.begin(), touched_.end());
  transfer.links.reserve(touched_.size());
  for (topology::LinkId link : touched_) {
    transfer.links.push_back({link, weight_by_link_[static_cast<std::size_t>(link)]});
    weight_by_link_[static_cast<std::size_t>(link)] = 0;
  }
  touched_.clear();
  transfer.bytes_per_hop = bytes_per_hop;
  transfer.latency = latency;
  transfer.payload_fraction = protocol_.bandwidth_factor;
  return transfer;
}

void TransferPlan::add_link_bytes(double buffer_bytes, double calls, std::vector<double>& link_bytes) const {
  for_each_link_payload([&](topology::LinkId link, double payload_per_byte) {
    link_bytes[static_cast<std::size_t>(link)] += payload_per_byte * buffer_bytes * calls;
  });
}

}  // namespace shardsim::sim
