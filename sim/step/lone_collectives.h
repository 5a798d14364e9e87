// LoneCollectives: the communicator groups of a Program whose collectives
// never share a link with anyone, and what such a call takes.
//
// On the flow network a collective's flows share each link with whatever
// else crosses it. Some groups never meet anyone: a tensor-parallel group
// inside a node, say, when no other group's traffic crosses that node's
// NVLinks. Each call of such a group takes exactly the time it takes alone,
// so it is simulated alone once per (plan, size), on a private network, and
// every later call is one event of that duration instead of its flows: a
// 1024-GPU Megatron step makes a million of them.
//
// A group is lone when
//   - every rank issues its communicator's calls on one stream, so two calls
//     of the group never overlap (a call holds each member's stream until it
//     has landed for all of them), and
//   - no link any of its calls uses is used by a call of another group (of
//     its own communicator or another), over every call the Program makes.
// Broadcast and reduce are never lone: their plans are built per root. Their
// footprint is their whole ring (any root's chain is the ring less one hop;
// ring_chain.h), which the chains from two different roots cover.
#pragma once

#include "calib/profile.h"
#include "sim/collectives/transfer_plan.h"
#include "topology/cluster.h"
#include "workloads/ir/program.h"

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace shardsim::sim {

class LoneCollectives {
 public:
  // The plan the flow network runs for a call of `group` of `communicator`.
  using PlanOf = std::function<std::shared_ptr<const TransferPlan>(int communicator, int group, CollectiveOp kind,
                                                                  int root, double bytes)>;

  // Asks plan_of for every kind of call each group makes (once per kind,
  // root and size).
  LoneCollectives(const workloads::Program& program, const topology::Cluster& cluster, const calib::Profile& profile,
                  const PlanOf& plan_of);

  bool lone(int communicator, int group) const {
    return lone_[static_cast<std::size_t>(communicator)][static_cast<std::size_t>(group)] != 0;
  }

  // One (plan, size) of call, simulated alone once. The reference stays
  // valid for the object's life: a caller that repeats the call keeps it.
  struct Alone {
    std::shared_ptr<const TransferPlan> plan;
    TimePs duration = 0;  // from the call's issue to its last byte: launch latency, phases and all
    std::uint64_t calls = 0;
  };
  Alone& alone(const std::shared_ptr<const TransferPlan>& plan, double bytes);

  // The call's time alone on the flow network; counts the call for
  // add_link_bytes().
  TimePs duration(Alone& call) {
    ++call.calls;
    return call.duration;
  }

  // What the calls counted by duration() put on each link, added to
  // `link_bytes` (by LinkId).
  void add_link_bytes(std::vector<double>& link_bytes) const;

 private:
  const topology::Cluster& cluster_;
  const calib::Profile& profile_;
  std::vector<std::vector<char>> lone_;  // [communicator][group]
  std::map<std::pair<const TransferPlan*, double>, Alone> alone_;
};

}  // namespace shardsim::sim
