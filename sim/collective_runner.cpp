#include "sim/collective_runner.h"

#include "topology/base/json_input.h"

#include <stdexcept>

namespace shardsim::sim {

NetworkMode parse_network_mode(const std::string& name) {
  if (name == "flow") return NetworkMode::flow;
  if (name == "analytical") return NetworkMode::analytical;
  if (name == "table") return NetworkMode::table;
  throw InputError("--network: '" + name + "' is not a network mode (flow, analytical, table)");
}

double measured_collective_seconds(const calib::Profile& profile, workloads::CollectiveOp op, int ranks, int nodes,
                                   double bytes) {
  const calib::MeasuredCollective* measured = profile.measured.find(op, ranks, nodes);
  return measured == nullptr ? -1.0 : measured->curve.seconds_at(bytes);
}

std::vector<double> achievable_link_capacities(const topology::Cluster& cluster, const calib::Profile& profile) {
  std::vector<double> capacity;
  capacity.reserve(cluster.links().size());
  for (const topology::Link& link : cluster.links()) {
    capacity.push_back(link.bytes_per_second * profile.bandwidth_efficiency(link.kind));
  }
  return capacity;
}

namespace {

// One plan in flight. It owns itself (self) from launch until its last
// phase ends, so callbacks can hold a plain pointer.
struct PlanRun {
  FlowNetwork& network;
  std::shared_ptr<const TransferPlan> plan;
  double buffer_bytes;
  double wire_scale;  // plan->size_correction.wire_scale(buffer_bytes)
  double payload_per_wire_byte;  // plan->size_correction.payload_per_wire_byte(buffer_bytes)
  std::function<void()> on_done;
  std::size_t phase = 0;
  std::size_t outstanding = 0;
  std::shared_ptr<PlanRun> self;

  void start_phase() {
    while (phase < plan->phases.size() && plan->phases[phase].transfers.empty()) ++phase;
    if (phase == plan->phases.size()) {
      auto keep_alive = std::move(self);  // released when this call returns
      on_done();
      return;
    }
    const Phase& current = plan->phases[phase];
    outstanding = current.transfers.size();
    network.reserve(current.transfers.size());
    for (const Transfer& transfer : current.transfers) {
      const TimePs latency = plan->size_correction.latency(transfer.latency, buffer_bytes);
      network.start(
          transfer.links, transfer.bytes_per_hop * wire_scale, latency,
          [this] {
            if (--outstanding == 0) {
              ++phase;
              start_phase();
            }
          },
          transfer.payload_fraction * payload_per_wire_byte);
    }
  }
};

}  // namespace

void run_transfer_plan(EventEngine& engine, FlowNetwork& network, std::shared_ptr<const TransferPlan> plan,
                       double buffer_bytes, std::function<void()> on_done) {
  if (!(buffer_bytes >= 0)) throw std::invalid_argument("negative buffer size");
  const double wire_scale = plan->size_correction.wire_scale(buffer_bytes);
  const double payload_per_wire_byte = plan->size_correction.payload_per_wire_byte(buffer_bytes);
  auto run = std::make_shared<PlanRun>(PlanRun{network, std::move(plan), buffer_bytes, wire_scale,
                                               payload_per_wire_byte, std::move(on_done), 0, 0, nullptr});
  run->self = run;
  PlanRun* raw = run.get();
  const TimePs start = raw->plan->size_correction.latency(raw->plan->launch_latency, buffer_bytes) +
                       picoseconds_from_seconds(raw->plan->size_correction.added_seconds(buffer_bytes));
  engine.schedule_after(start, [raw] { raw->start_phase(); });
}

CollectiveRun simulate_collective(const topology::Cluster& cluster, const calib::Profile& profile,
                                  std::shared_ptr<const TransferPlan> plan, double buffer_bytes,
                                  bool record_link_bytes) {
  EventEngine engine;
  FlowNetwork network(engine, achievable_link_capacities(cluster, profile));
  CollectiveRun result;
  bool done = false;
  run_transfer_plan(engine, network, std::move(plan), buffer_bytes, [&] {
    done = true;
    result.duration = engine.now();
  });
  engine.run();
  if (!done) throw std::logic_error("collective did not complete: the event queue ran dry");
  if (record_link_bytes) result.link_bytes = network.link_bytes();
  result.events = engine.fired();
  result.recomputations = network.recomputations();
  return result;
}

}  // namespace shardsim::sim
