// The closed-form cost model the collective algorithms share: the
// achievable speed of each kind of link, the latency of a hop, and the load a
// set of hops puts on the busiest link, all as closed forms over the cluster
// spec and the profile. No routes, no flows: it is an independent second
// model, and agreeing with the flow network where nothing contends is a check
// on both.
#pragma once

#include "calib/profile.h"
#include "sim/collectives/collective_algorithm.h"
#include "sim/collectives/transfer_plan.h"
#include "topology/cluster.h"

#include <vector>

namespace shardsim::sim {

// Achievable bytes per second, per direction, of one link of each kind, with
// a protocol's bandwidth factor applied.
struct EffectiveSpeeds {
  double nvlink = 0;       // GPU <-> NVSwitch
  double pcie = 0;         // GPU <-> PCIe switch, PCIe switch <-> NIC
  double nic = 0;          // NIC <-> leaf
  double leaf_uplink = 0;  // all spine uplinks of one leaf together
};

EffectiveSpeeds effective_speeds(const topology::Cluster& cluster, const calib::Profile& profile,
                                 double protocol_factor);

// Sum of the latencies of the links `hop` crosses, by the rules the Router
// follows (NVLink inside a node; PCIe, NIC, leaf and, across leaves, spine
// between nodes; an NVLink detour where a GPU is not on its NIC's PCIe switch).
TimePs physical_hop_latency(const topology::Cluster& cluster, const Hop& hop);

// One algorithm step over `hop`: the profile's alpha for its kind plus the above.
TimePs step_latency(const topology::Cluster& cluster, const calib::ProtocolParams& params, const Hop& hop);

// `lines` with a launch latency added to every alpha.
std::vector<AlphaBeta> with_launch(std::vector<AlphaBeta> lines, double launch_seconds);

// Bytes every link would carry once the hops added have run, tallied per
// link by the Router's path rules and by when the hop's transfer starts.
// A shared link is busy from the earliest start on (sharing is work
// conserving), so a phase takes at least, for every start latency L,
// L + (bytes starting at L or later on the busiest link) / its speed.
class LinkLoadCounter {
 public:
  explicit LinkLoadCounter(const topology::Cluster& cluster);

  // `bytes` per byte of buffer, for a hop whose transfer starts at `start`;
  // negative takes a hop added before back out (ring_chain.h).
  void add(const Hop& hop, double bytes, TimePs start);
  // Traffic between `gpu` and its node's NVSwitch that starts or ends in the
  // switch (NVLS reductions and multicasts), per byte of buffer.
  void add_switch_traffic(topology::GpuId gpu, double to_switch, double from_switch, TimePs start);
  // One line per distinct start latency: alpha = the latency, beta = the
  // busiest link's load from transfers starting then or later over its
  // speed. Speeds as from effective_speeds(); spine uplinks count as one
  // bundle per leaf (even ECMP).
  std::vector<AlphaBeta> cost_lines(const EffectiveSpeeds& speeds) const;

 private:
  enum Class { nvlink_out, nvlink_in, pcie_out, pcie_in, nic_out, nic_in, leaf_up, leaf_down, kClasses };
  void load(Class c, int entity, double bytes, TimePs start);

  // Per distinct start latency (few: one for a ring or a tree), a dense
  // tally over every link of every class, in the order the starts first
  // came: a large group adds thousands of hops, and a search prices
  // thousands of groups.
  struct Tier {
    TimePs start = 0;
    std::vector<double> bytes;  // by first_link_[class] + the GPU, NIC or leaf
  };

  const topology::Cluster& cluster_;
  int first_link_[kClasses + 1] = {};
  std::vector<Tier> tiers_;
};

}  // namespace shardsim::sim
