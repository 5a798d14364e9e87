// ClusterSpec: the cluster JSON a user writes, parsed strictly.
//
// A cluster is `nodes` identical nodes under a two-tier leaf-spine fabric.
// Inside a node, GPUs hang off one non-blocking NVSwitch (NVLink bandwidth
// per GPU), and GPUs and NICs are spread evenly over `pcie_switches`: a GPU is
// attached to the NICs on its own PCIe switch (DGX-A100: 4 switches, each with
// 2 GPUs and 2 NICs; DGX-H100: 8 switches of 1 GPU + 1 NIC).
//
// Fabric: with `rail_optimized`, NIC r of every node goes to a leaf of rail r
// (`nodes_per_leaf` nodes per leaf and rail); otherwise all NICs of a node go
// to the same leaf. Every leaf has one link to every spine; a leaf's uplink
// capacity is its downlink capacity divided by `oversubscription`, spread
// evenly over the spines. As in a real fabric, choose as many spines as a leaf
// has uplink ports, so that each leaf-spine link runs at port speed: it
// matters for "hash" ECMP, where a flow is held to the one link it hashes to. `ecmp` says how a flow uses equal-cost spine paths:
// "split" spreads it evenly (adaptive routing, packet spraying), "hash" pins
// it to one path chosen by a deterministic hash (static ECMP, collisions and all).
//
// Example (topology/clusters/dgx-a100-1024.json):
//   {"name": "dgx-a100-1024", "profile": "a100", "nodes": 128,
//    "node": {"gpu": "A100-SXM4-80GB", "gpu_memory_bytes": 85899345920, "gpus": 8,
//             "nvlink_bidirectional_bytes_per_second": 600e9, "nvlink_latency_seconds": 0,
//             "nics": 8, "nic_bits_per_second": 200e9, "pcie_switches": 4,
//             "pcie_bidirectional_bytes_per_second": 64e9, "pcie_latency_seconds": 0},
//    "fabric": {"rail_optimized": true, "nodes_per_leaf": 16, "spines": 16,
//               "oversubscription": 1, "switch_latency_seconds": 150e-9, "ecmp": "split"},
//    "sources": ["..."]}
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace shardsim::topology {

enum class EcmpMode { split, hash };

struct NodeSpec {
  std::string gpu_model;
  double gpu_memory_bytes = 0;  // what one GPU can hold (HBM as the driver reports it)
  int gpus = 0;
  double nvlink_bidirectional_bytes_per_second = 0;
  double nvlink_latency_seconds = 0;
  int nics = 0;
  double nic_bits_per_second = 0;
  int pcie_switches = 0;
  double pcie_bidirectional_bytes_per_second = 0;
  double pcie_latency_seconds = 0;
};

struct FabricSpec {
  bool rail_optimized = true;
  int nodes_per_leaf = 0;
  int spines = 0;
  double oversubscription = 1.0;  // leaf downlink : uplink capacity
  double switch_latency_seconds = 0;
  EcmpMode ecmp = EcmpMode::split;
};

struct ClusterSpec {
  std::string name;
  std::string file;     // what it was read from, for messages about its fields
  std::string profile;  // default calibration profile (calib/profiles/<profile>.json)
  int nodes = 0;
  NodeSpec node;
  FabricSpec fabric;
  std::vector<std::string> sources;

  int gpu_count() const { return nodes * node.gpus; }
};

// Parses and validates; throws InputError naming `file` and the field.
ClusterSpec parse_cluster_spec(const nlohmann::json& document, const std::string& file);

// Loads a cluster from a JSON file path, or from a bundled preset name
// (topology/clusters/<name>.json).
ClusterSpec load_cluster_spec(const std::string& file_or_preset);

}  // namespace shardsim::topology
