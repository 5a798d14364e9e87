// FlowNetwork: transfers as fluid flows sharing link bandwidth max-min fairly.
//
// A flow moves `bytes` over a set of links (a routed path, or the union of
// the paths of a pipelined ring channel, with weights as in max_min.h). It
// first waits `latency` (link latencies plus per-message overhead), then
// competes for bandwidth until its bytes are through, and then calls its
// completion callback.
//
// Rates are recomputed whenever a flow starts or ends, but only for the flows
// that can be affected: those connected to the change through shared links
// (a connected component of the flow-link graph). All starts and ends at one
// instant are folded into one recomputation. Completions are kept in a heap,
// and the network holds a single engine event for the earliest one. A
// finished flow's slot, and its id, go to the next flow started: a training
// step runs millions of flows, a few hundred at a time.
#pragma once

#include "sim/event_engine.h"
#include "sim/max_min.h"

#include <algorithm>
#include <functional>
#include <map>
#include <span>
#include <vector>

namespace shardsim::sim {

using FlowId = std::uint32_t;

class FlowNetwork {
 public:
  using Completion = std::function<void()>;

  // `capacity_bytes_per_second` is indexed by LinkId; every entry must be > 0.
  FlowNetwork(EventEngine& engine, std::vector<double> capacity_bytes_per_second);

  // Room for this many more flows without reallocating (a plan knows its
  // count). Grows geometrically, so calling it before every phase stays cheap.
  void reserve(std::size_t more_flows) {
    const std::size_t needed = flows_.size() + more_flows;
    if (needed > flows_.capacity()) flows_.reserve(std::max(needed, 2 * flows_.capacity()));
  }

  // Entries of `usage` naming the same link are merged. The id names the
  // flow until its completion callback has returned. `payload_fraction` is
  // the share of the weighted bytes that is data: a caller that models a
  // slower protocol as extra link weight passes the inverse of that weight,
  // so that link_bytes() counts what the flow carries, not how long it held
  // the links.
  FlowId start(std::span<const LinkUse> usage, double bytes, TimePs latency, Completion on_complete,
               double payload_fraction = 1.0);

  // Current rate in bytes per second (0 while waiting out its latency).
  double rate(FlowId flow) const;
  // Payload bytes that have crossed each link so far (indexed by LinkId),
  // running flows included: finished flows' bytes as tallied when they
  // ended, plus the unfinished flows' progress; each weighted by its link
  // weight and its payload fraction.
  std::vector<double> link_bytes() const;
  double link_capacity(LinkId link) const { return capacity_[static_cast<std::size_t>(link)]; }
  std::size_t link_count() const { return capacity_.size(); }

  std::size_t active_flows() const { return active_count_; }
  std::uint64_t recomputations() const { return recomputations_; }
  // Flows whose rates were recomputed, summed over recomputations: the work
  // the incremental updates actually did.
  std::uint64_t resolved_flows() const { return resolved_flows_; }

 private:
  enum class State { waiting, active, done };
  struct Flow {
    std::vector<LinkUse> usage;  // emptied, its capacity kept, when the flow ends
    double bytes = 0;
    double payload_fraction = 1;
    double remaining = 0;
    double rate = 0;
    TimePs last_update = 0;
    std::uint64_t serial = 0;   // start order: ties between completions break by it
    std::uint32_t version = 0;  // invalidates stale completion-heap entries, across reuses of the slot
    std::uint32_t visit_mark = 0;
    State state = State::waiting;
    bool on_links = false;  // listed in link_flows_ (a flow with links and bytes to move)
    Completion on_complete;
  };
  struct Due {
    TimePs when;
    std::uint64_t serial;
    FlowId flow;
    std::uint32_t version;
    bool operator>(const Due& other) const { return when != other.when ? when > other.when : serial > other.serial; }
  };

  void activate(FlowId flow);
  void request_recompute();
  void recompute();
  void advance(Flow& flow, TimePs now);
  void schedule_completion(FlowId flow);
  void arm_wakeup();
  void complete_due_flows();
  // Drops finished flows from the member lists of `links` in one pass per link.
  void detach_finished(const std::vector<LinkId>& links);
  void push_due(Due due);
  void drop_stale_dues();

  EventEngine& engine_;
  std::vector<double> capacity_;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_slots_;  // of flows whose completion has been delivered
  std::uint64_t started_ = 0;
  std::vector<double> finished_link_bytes_;  // by LinkId
  std::vector<std::vector<FlowId>> link_flows_;  // active flows per link
  // Marks for "seen in this pass", by epoch so they never need clearing. One
  // counter serves recompute() and complete_due_flows(): each starts a fresh
  // epoch, and neither runs inside the other.
  std::vector<std::uint32_t> link_visit_mark_;
  std::uint32_t visit_epoch_ = 0;

  std::vector<FlowId> dirty_flows_;   // activated since the last recomputation
  std::vector<LinkId> dirty_links_;   // freed by completions since then
  bool recompute_pending_ = false;
  bool completing_ = false;

  std::map<TimePs, std::vector<FlowId>> activations_;  // flows waiting out their latency
  std::vector<Due> due_;  // min-heap on (when, flow); entries of older versions are stale
  EventId wakeup_ = kNoEvent;
  TimePs wakeup_time_ = kTimeNever;

  std::size_t active_count_ = 0;
  std::uint64_t recomputations_ = 0;
  std::uint64_t resolved_flows_ = 0;
  MaxMinSolver solver_;
  std::vector<std::span<const LinkUse>> solve_input_;
  std::vector<FlowId> solve_flows_;
  std::vector<double> solve_rates_;
};

}  // namespace shardsim::sim
