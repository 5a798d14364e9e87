// TransferPlan: a collective decomposed into data movements on the cluster.
//
// A Hop is one GPU sending to another (through named NICs where the
// algorithm picks them). A Transfer is a set of hops that move in lockstep:
// NCCL pipelines a ring or tree channel in chunks and forwards a chunk only
// once it has arrived, so in steady state every hop of the channel runs at the
// pace of its slowest link. A Transfer becomes one flow in the FlowNetwork
// over the union of its hops' routes, weighted by how many of its hops cross
// each link. A single point-to-point send is a Transfer of one hop.
// Phases run one after another; the transfers of a phase run side by side.
#pragma once

#include "calib/profile.h"
#include "sim/collectives/size_correction.h"
#include "topology/routing.h"
#include "workloads/ir/collective_kind.h"

#include <vector>

namespace shardsim::sim {

using topology::LinkUse;
using workloads::Algorithm;
using workloads::CollectiveOp;
using workloads::Protocol;

struct Hop {
  topology::GpuId src = 0;
  topology::GpuId dst = 0;
  topology::NicId src_nic = topology::kHomeNic;
  topology::NicId dst_nic = topology::kHomeNic;
};

struct Transfer {
  std::vector<LinkUse> links;  // link bytes per byte moved by one hop, sorted by link
  double bytes_per_hop = 0;    // per byte of the collective's buffer
  TimePs latency = 0;          // before the first byte moves
  // Payload per weighted link byte: the protocol's bandwidth factor, which
  // the weights hold each link 1/factor as long for (TransferBuilder). Bytes
  // reported as crossing a link are weight x bytes x this.
  double payload_fraction = 1;
};

struct Phase {
  std::vector<Transfer> transfers;
};

struct TransferPlan {
  CollectiveOp op = CollectiveOp::all_reduce;
  Algorithm algorithm = Algorithm::ring;
  Protocol protocol = Protocol::simple;
  TimePs launch_latency = 0;  // once per call, before the first phase
  std::vector<Phase> phases;
  // Applied when the plan runs on a buffer of known size: weights scaled by
  // wire_scale(bytes), the launch and every transfer's latency corrected.
  SizeCorrection size_correction;

  // visit(link, payload) for every link use of every transfer: the payload
  // bytes it puts on the link per byte of the call's buffer.
  template <class Visit>
  void for_each_link_payload(Visit&& visit) const {
    for (const Phase& phase : phases) {
      for (const Transfer& transfer : phase.transfers) {
        const double payload = transfer.bytes_per_hop * transfer.payload_fraction;
        for (const LinkUse& use : transfer.links) visit(use.link, use.weight * payload);
      }
    }
  }

  // Payload bytes that one call on `buffer_bytes` puts on each link, added
  // into `link_bytes` (indexed by LinkId) `calls` times over. What the flow
  // network tallies for the plan when nothing slows it down.
  void add_link_bytes(double buffer_bytes, double calls, std::vector<double>& link_bytes) const;
};

// Builds one Transfer: routes each hop, accumulates its links, and reports
// each hop's step latency (the profile's alpha for the hop's kind plus the
// latency of the links it crosses). Protocol overhead is folded into the link
// weights: a protocol reaching a fraction f of link bandwidth puts 1/f link
// bytes on the wire per payload byte.
class TransferBuilder {
 public:
  TransferBuilder(const topology::Router& router, const calib::ProtocolParams& protocol);

  // Returns the hop's step latency. `flow_key` picks among equal-cost paths
  // in hash ECMP mode; by default the hop's index in the transfer.
  TimePs add_hop(const Hop& hop);
  TimePs add_hop(const Hop& hop, std::uint64_t flow_key);
  // Traffic between `gpu` and its node's NVSwitch that starts or ends in the
  // switch (NVLS reductions and multicasts), per byte moved by one hop.
  void add_switch_traffic(topology::GpuId gpu, double to_switch, double from_switch);
  // The Transfer of all hops added since the last take().
  Transfer take(double bytes_per_hop, TimePs latency);

  static bool crosses_nodes(const topology::Cluster& cluster, const Hop& hop) {
    return cluster.node_of(hop.src) != cluster.node_of(hop.dst);
  }

 private:
  const topology::Router& router_;
  const calib::ProtocolParams& protocol_;
  std::size_t hops_ = 0;  // added since the last take()
  std::vector<double> weight_by_link_;  // dense accumulator, reset through touched_
  std::vector<topology::LinkId> touched_;
};

}  // namespace shardsim::sim
