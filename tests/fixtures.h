// Small clusters and profiles built in code, for tests that need exact,
// hand-checkable numbers.
#pragma once

#include "calib/profile.h"
#include "sim/collective_runner.h"
#include "sim/collectives/collective_algorithm.h"
#include "topology/cluster_spec.h"
#include "topology/routing.h"
#include "workloads/ir/program.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>

namespace shardsim::test {

// A cluster JSON document with every field set; tests override what they need.
inline nlohmann::json cluster_json(int nodes = 2, int gpus = 8, int nics = 8) {
  return {
      {"name", "test-cluster"},
      {"profile", "a100"},
      {"nodes", nodes},
      {"node",
       {{"gpu", "test-gpu"},
        {"gpu_memory_bytes", 80.0 * (1LL << 30)},
        {"gpus", gpus},
        {"nvlink_bidirectional_bytes_per_second", 600e9},
        {"nvlink_latency_seconds", 0},
        {"nics", nics},
        {"nic_bits_per_second", 200e9},
        {"pcie_switches", nics < gpus ? nics : gpus},
        {"pcie_bidirectional_bytes_per_second", 64e9},
        {"pcie_latency_seconds", 0}}},
      {"fabric",
       {{"rail_optimized", true},
        {"nodes_per_leaf", 16},
        {"spines", 4},
        {"oversubscription", 1.0},
        {"switch_latency_seconds", 0},
        {"ecmp", "split"}}},
      {"sources", nlohmann::json::array()},
  };
}

// `nodes` nodes of `gpus` GPUs, one NIC per GPU, all under one leaf; NVLink,
// PCIe and NICs all at `bytes_per_second` each way: the closed-form world.
inline nlohmann::json uniform_nodes_json(int nodes, int gpus, double bytes_per_second) {
  auto doc = cluster_json(nodes, gpus, gpus);
  doc["node"]["nvlink_bidirectional_bytes_per_second"] = 2 * bytes_per_second;
  doc["node"]["pcie_bidirectional_bytes_per_second"] = 2 * bytes_per_second;
  doc["node"]["nic_bits_per_second"] = 8 * bytes_per_second;
  doc["fabric"]["nodes_per_leaf"] = nodes;
  return doc;
}

inline topology::ClusterSpec cluster_spec(const nlohmann::json& document) {
  return topology::parse_cluster_spec(document, "test-cluster.json");
}

// A profile in which every link reaches its nominal bandwidth, every protocol
// its full bandwidth, calls have no base latency and every algorithm step
// costs `hop_seconds` over any kind of hop: the textbook alpha-beta world.
// Round numbers for hand-worked kernel times: 100 TFLOP/s at full GEMM
// efficiency, 1 TB/s HBM, no launch overhead, no interference.
inline nlohmann::json uniform_compute_json() {
  const nlohmann::json dtype = {{"peak_flops_per_second", 1e14},
                                {"gemm_efficiency", {{{"flops", 1.0}, {"efficiency", 1.0}}}},
                                {"source", "test"}};
  return {{"dtypes", {{"bf16", dtype}, {"fp16", dtype}}},
          {"attention_efficiency", 1.0},
          {"attention_source", "test"},
          {"hbm_bytes_per_second", 1e12},
          {"hbm_efficiency", 1.0},
          {"hbm_source", "test"},
          {"kernel_launch_seconds", 0.0},
          {"interference_slowdown", 0.0},
          {"overheads_source", "test"}};
}

inline nlohmann::json uniform_profile_json(double hop_seconds, double message_overhead_seconds = 0) {
  nlohmann::json protocol = {{"base_latency_seconds", 0},
                             {"hop_latency_seconds", {{"nvlink", hop_seconds}, {"pcie", hop_seconds}, {"network", hop_seconds}}},
                             {"bandwidth_factor", 1.0}};
  nlohmann::json direct = protocol;
  direct["message_overhead_seconds"] = message_overhead_seconds;
  const nlohmann::json algorithm = {{"source", "test"}, {"simple", protocol}};
  const nlohmann::json direct_algorithm = {{"source", "test"}, {"simple", direct}};
  nlohmann::json link = {{"bandwidth_efficiency", 1.0}, {"source", "test"}};
  return {{"name", "uniform"},
          {"gpu", "test-gpu"},
          {"links", {{"nvlink", link}, {"pcie", link}, {"network", link}}},
          {"collectives",
           {{"all_reduce", {{"ring", algorithm}, {"tree", algorithm}}},
            {"all_gather", {{"ring", algorithm}}},
            {"reduce_scatter", {{"ring", algorithm}}},
            {"broadcast", {{"ring", algorithm}}},
            {"reduce", {{"ring", algorithm}}},
            {"all_to_all", {{"direct", direct_algorithm}}},
            {"send_recv", {{"direct", direct_algorithm}}}}},
          {"compute", uniform_compute_json()},
          {"sources", nlohmann::json::array()}};
}

inline calib::Profile uniform_profile(double hop_seconds, double message_overhead_seconds = 0) {
  return calib::parse_profile(uniform_profile_json(hop_seconds, message_overhead_seconds), "uniform-profile.json");
}

// Every (collective, algorithm) pair shardsim implements.
inline const std::vector<std::pair<workloads::CollectiveOp, workloads::Algorithm>>& implemented_collectives() {
  using workloads::Algorithm;
  using workloads::CollectiveOp;
  static const std::vector<std::pair<CollectiveOp, Algorithm>> pairs = {
      {CollectiveOp::all_reduce, Algorithm::ring},     {CollectiveOp::all_reduce, Algorithm::tree},
      {CollectiveOp::all_reduce, Algorithm::hierarchical}, {CollectiveOp::all_gather, Algorithm::ring},
      {CollectiveOp::reduce_scatter, Algorithm::ring}, {CollectiveOp::broadcast, Algorithm::ring},
      {CollectiveOp::reduce, Algorithm::ring},         {CollectiveOp::all_to_all, Algorithm::direct},
      {CollectiveOp::send_recv, Algorithm::direct},    {CollectiveOp::all_reduce, Algorithm::nvls},
      {CollectiveOp::all_reduce, Algorithm::nvls_tree},
  };
  return pairs;
}

// A cluster with its router and a profile, and the two ways of timing a
// collective on it.
class World {
 public:
  World(const topology::ClusterSpec& spec, calib::Profile profile)
      : cluster_(std::make_unique<topology::Cluster>(spec)),
        router_(std::make_unique<topology::Router>(*cluster_)),
        profile_(std::move(profile)) {}
  explicit World(const std::string& preset)
      : World(topology::load_cluster_spec(preset), calib::load_profile(topology::load_cluster_spec(preset).profile)) {}

  const topology::Cluster& cluster() const { return *cluster_; }
  const calib::Profile& profile() const { return profile_; }
  const topology::Router& router() const { return *router_; }

  sim::GroupLayout group(std::vector<topology::GpuId> gpus) const { return sim::make_group_layout(*cluster_, std::move(gpus)); }
  sim::GroupLayout all() const {
    std::vector<topology::GpuId> gpus(static_cast<std::size_t>(cluster_->gpu_count()));
    std::iota(gpus.begin(), gpus.end(), 0);
    return group(gpus);
  }
  sim::CollectiveContext context(const sim::GroupLayout& group) const { return {*cluster_, *router_, profile_, group}; }
  // Whether the algorithm runs `op` on `group` and the profile has it (the
  // hierarchical scheme runs on the ring's parameters).
  bool runs(const sim::GroupLayout& group, workloads::CollectiveOp op, workloads::Algorithm algorithm) const {
    using workloads::Algorithm;
    const bool listed = algorithm == Algorithm::hierarchical
                            ? profile_.find(workloads::CollectiveOp::all_reduce, Algorithm::ring) != nullptr
                            : profile_.find(op, algorithm) != nullptr;
    return listed && sim::collective_algorithm(algorithm).unsupported_reason(op, group).empty();
  }

  sim::CollectiveRun run(const sim::GroupLayout& group, workloads::CollectiveOp op, workloads::Algorithm algorithm,
                         workloads::Protocol protocol, double bytes, int root = 0) const {
    auto plan = std::make_shared<const sim::TransferPlan>(
        sim::collective_algorithm(algorithm).plan(context(group), {op, root}, protocol));
    return sim::simulate_collective(*cluster_, profile_, plan, bytes, true);
  }
  double flow_seconds(const sim::GroupLayout& group, workloads::CollectiveOp op, workloads::Algorithm algorithm,
                      workloads::Protocol protocol, double bytes, int root = 0) const {
    return seconds_from_picoseconds(run(group, op, algorithm, protocol, bytes, root).duration);
  }
  double analytical_seconds(const sim::GroupLayout& group, workloads::CollectiveOp op, workloads::Algorithm algorithm,
                            workloads::Protocol protocol, double bytes, int root = 0) const {
    return sim::collective_algorithm(algorithm).cost(context(group), {op, root}, protocol).seconds(bytes);
  }

 private:
  std::unique_ptr<topology::Cluster> cluster_;
  std::unique_ptr<topology::Router> router_;
  calib::Profile profile_;
};

// The program's communicator called `name`.
inline const workloads::Communicator& communicator_named(const workloads::Program& program, const std::string& name) {
  for (const workloads::Communicator& c : program.communicators) {
    if (c.name == name) return c;
  }
  throw std::invalid_argument("the program has no communicator " + name);
}

}  // namespace shardsim::test
