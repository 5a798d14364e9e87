// Playing collectives on the flow network.
//
// run_transfer_plan() is the building block a training-step simulation uses:
// it starts a plan on an engine and network that other traffic may share,
// phase after phase, and calls back when the last transfer is through.
// simulate_collective() runs one plan alone on a fresh network, which is what
// `shardsim collective` (simulated nccl-tests) does for each size.
#pragma once

#include "calib/profile.h"
#include "sim/collectives/transfer_plan.h"
#include "sim/event_engine.h"
#include "sim/flow_network.h"
#include "topology/cluster.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace shardsim::sim {

// flow: transfers share links max-min fairly on the flow network;
// analytical: each collective takes its alpha-beta cost (no contention);
// table: a collective whose (op, ranks, nodes) the profile measured takes the
// measured time, interpolated between measured sizes (TECHNIQUES §2's
// "table mode"); any other falls back to analytical.
enum class NetworkMode { flow, analytical, table };

// "flow", "analytical" or "table"; throws InputError for anything else.
NetworkMode parse_network_mode(const std::string& name);

// The measured time of a collective in table mode, or -1 when the profile
// has no curve for its shape.
double measured_collective_seconds(const calib::Profile& profile, workloads::CollectiveOp op, int ranks, int nodes,
                                   double bytes);

// What each link can carry: nominal bandwidth times the profile's efficiency
// for its kind.
std::vector<double> achievable_link_capacities(const topology::Cluster& cluster, const calib::Profile& profile);

// `plan` must outlive the run. Its transfers are scaled from one byte of
// buffer to `buffer_bytes`, and corrected for that size (size_correction.h).
void run_transfer_plan(EventEngine& engine, FlowNetwork& network, std::shared_ptr<const TransferPlan> plan,
                       double buffer_bytes, std::function<void()> on_done);

struct CollectiveRun {
  TimePs duration = 0;
  std::vector<double> link_bytes;  // payload bytes per LinkId, when asked for
  std::uint64_t events = 0;
  std::uint64_t recomputations = 0;
};

CollectiveRun simulate_collective(const topology::Cluster& cluster, const calib::Profile& profile,
                                  std::shared_ptr<const TransferPlan> plan, double buffer_bytes,
                                  bool record_link_bytes = false);

}  // namespace shardsim::sim
