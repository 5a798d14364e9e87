#include "sim/collectives/cost_model.h"

#include <algorithm>

namespace shardsim::sim {

using topology::LinkKind;

EffectiveSpeeds effective_speeds(const topology::Cluster& cluster, const calib::Profile& profile,
                                 double protocol_factor) {
  const auto& node = cluster.spec().node;
  const auto& fabric = cluster.spec().fabric;
  const double network = profile.bandwidth_efficiency(LinkKind::network) * protocol_factor;
  EffectiveSpeeds speeds;
  speeds.nvlink = per_direction_from_bidirectional(node.nvlink_bidirectional_bytes_per_second) *
                  profile.bandwidth_efficiency(LinkKind::nvlink) * protocol_factor;
  speeds.pcie = per_direction_from_bidirectional(node.pcie_bidirectional_bytes_per_second) *
                profile.bandwidth_efficiency(LinkKind::pcie) * protocol_factor;
  speeds.nic = bytes_per_second_from_bits_per_second(node.nic_bits_per_second) * network;
  const int downlinks = fabric.rail_optimized ? fabric.nodes_per_leaf : fabric.nodes_per_leaf * node.nics;
  speeds.leaf_uplink =
      downlinks * bytes_per_second_from_bits_per_second(node.nic_bits_per_second) / fabric.oversubscription * network;
  return speeds;
}

namespace {

topology::NicId nic_or_home(const topology::Cluster& cluster, topology::NicId nic, topology::GpuId gpu) {
  return nic == topology::kHomeNic ? cluster.home_nic(gpu) : nic;
}

}  // namespace

TimePs physical_hop_latency(const topology::Cluster& cluster, const Hop& hop) {
  const auto& node = cluster.spec().node;
  const TimePs nvlink = picoseconds_from_seconds(node.nvlink_latency_seconds);
  const TimePs pcie = picoseconds_from_seconds(node.pcie_latency_seconds);
  const TimePs fabric_switch = picoseconds_from_seconds(cluster.spec().fabric.switch_latency_seconds);
  if (hop.src == hop.dst) return 0;
  if (!TransferBuilder::crosses_nodes(cluster, hop)) return 2 * nvlink;

  const topology::NicId src_nic = nic_or_home(cluster, hop.src_nic, hop.src);
  const topology::NicId dst_nic = nic_or_home(cluster, hop.dst_nic, hop.dst);
  TimePs latency = 4 * pcie + fabric_switch;  // PCIe both sides, the leaf switch
  if (cluster.leaf_of(src_nic) != cluster.leaf_of(dst_nic)) latency += 2 * fabric_switch;  // spine, far leaf
  if (!cluster.is_attached(hop.src, src_nic)) latency += 2 * nvlink;
  if (!cluster.is_attached(hop.dst, dst_nic)) latency += 2 * nvlink;
  return latency;
}

TimePs step_latency(const topology::Cluster& cluster, const calib::ProtocolParams& params, const Hop& hop) {
  const LinkKind kind = TransferBuilder::crosses_nodes(cluster, hop) ? LinkKind::network : LinkKind::nvlink;
  return picoseconds_from_seconds(params.hop_latency(kind)) + physical_hop_latency(cluster, hop);
}

std::vector<AlphaBeta> with_launch(std::vector<AlphaBeta> lines, double launch_seconds) {
  for (AlphaBeta& line : lines) line.alpha_seconds += launch_seconds;
  return lines;
}

LinkLoadCounter::LinkLoadCounter(const topology::Cluster& cluster) : cluster_(cluster) {
  const int gpus = cluster.gpu_count();
  const int nics = cluster.nodes() * cluster.nics_per_node();
  const int leaves = cluster.leaf_count();
  const int entities[kClasses] = {gpus, gpus, gpus, gpus, nics, nics, leaves, leaves};
  for (int c = 0; c < kClasses; ++c) first_link_[c + 1] = first_link_[c] + entities[c];
}

void LinkLoadCounter::load(Class c, int entity, double bytes, TimePs start) {
  auto tier = std::find_if(tiers_.begin(), tiers_.end(), [&](const Tier& t) { return t.start == start; });
  if (tier == tiers_.end()) {
    tiers_.push_back({start, std::vector<double>(static_cast<std::size_t>(first_link_[kClasses]), 0.0)});
    tier = tiers_.end() - 1;
  }
  tier->bytes[static_cast<std::size_t>(first_link_[c] + entity)] += bytes;
}

void LinkLoadCounter::add(const Hop& hop, double bytes, TimePs start) {
  if (hop.src == hop.dst) return;
  if (!TransferBuilder::crosses_nodes(cluster_, hop)) {
    load(nvlink_out, hop.src, bytes, start);
    load(nvlink_in, hop.dst, bytes, start);
    return;
  }
  const topology::NicId src_nic = nic_or_home(cluster_, hop.src_nic, hop.src);
  const topology::NicId dst_nic = nic_or_home(cluster_, hop.dst_nic, hop.dst);
  topology::GpuId sender = hop.src;
  if (!cluster_.is_attached(hop.src, src_nic)) {
    sender = cluster_.relay_gpu(src_nic);
    load(nvlink_out, hop.src, bytes, start);
    load(nvlink_in, sender, bytes, start);
  }
  load(pcie_out, sender, bytes, start);
  load(nic_out, src_nic, bytes, start);
  const int src_leaf = cluster_.leaf_of(src_nic);
  const int dst_leaf = cluster_.leaf_of(dst_nic);
  if (src_leaf != dst_leaf) {
    load(leaf_up, src_leaf, bytes, start);
    load(leaf_down, dst_leaf, bytes, start);
  }
  load(nic_in, dst_nic, bytes, start);
  topology::GpuId receiver = hop.dst;
  if (!cluster_.is_attached(hop.dst, dst_nic)) {
    receiver = cluster_.relay_gpu(dst_nic);
    load(nvlink_out, receiver, bytes, start);
    load(nvlink_in, hop.dst, bytes, start);
  }
  load(pcie_in, receiver, bytes, start);
}

void LinkLoadCounter::add_switch_traffic(topology::GpuId gpu, double to_switch, double from_switch, TimePs start) {
  load(nvlink_out, gpu, to_switch, start);
  load(nvlink_in, gpu, from_switch, start);
}

std::vector<AlphaBeta> LinkLoadCounter::cost_lines(const EffectiveSpeeds& speeds) const {
  // A NIC's traffic also crosses the PCIe link between its switch and it.
  const double nic_speed = std::min(speeds.nic, speeds.pcie);
  const double speed[kClasses] = {speeds.nvlink, speeds.nvlink, speeds.pcie, speeds.pcie,
                                  nic_speed,     nic_speed,     speeds.leaf_uplink, speeds.leaf_uplink};
  std::vector<TimePs> starts;
  for (const Tier& tier : tiers_) starts.push_back(tier.start);
  std::sort(starts.begin(), starts.end());

  std::vector<AlphaBeta> lines;
  for (TimePs start : starts) {
    double slowest = 0;  // seconds per byte of buffer on the busiest link
    for (int c = 0; c < kClasses; ++c) {
      for (int link = first_link_[c]; link < first_link_[c + 1]; ++link) {
        double later = 0;
        for (const Tier& tier : tiers_) later += tier.start >= start ? tier.bytes[static_cast<std::size_t>(link)] : 0.0;
        slowest = std::max(slowest, later / speed[c]);
      }
    }
    lines.push_back({seconds_from_picoseconds(start), slowest});
  }
  if (lines.empty()) lines.push_back({});
  return lines;
}

}  // namespace shardsim::sim
