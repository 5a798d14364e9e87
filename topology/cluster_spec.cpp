#include "topology/cluster_spec.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"

#include <climits>

namespace shardsim::topology {

namespace {

int small_positive_integer(JsonObjectReader& reader, const std::string& key) {
  const auto value = reader.positive_integer(key);
  if (value > INT_MAX / 1024) reader.fail(key, "is implausibly large (" + std::to_string(value) + ")");
  return static_cast<int>(value);
}

NodeSpec parse_node(JsonObjectReader reader) {
  NodeSpec node;
  node.gpu_model = reader.string("gpu");
  node.gpu_memory_bytes = reader.positive_number("gpu_memory_bytes");
  node.gpus = small_positive_integer(reader, "gpus");
  node.nvlink_bidirectional_bytes_per_second = reader.positive_number("nvlink_bidirectional_bytes_per_second");
  node.nvlink_latency_seconds = reader.latency_seconds("nvlink_latency_seconds");
  node.nics = small_positive_integer(reader, "nics");
  node.nic_bits_per_second = reader.positive_number("nic_bits_per_second");
  node.pcie_switches = small_positive_integer(reader, "pcie_switches");
  node.pcie_bidirectional_bytes_per_second = reader.positive_number("pcie_bidirectional_bytes_per_second");
  node.pcie_latency_seconds = reader.latency_seconds("pcie_latency_seconds");
  reader.finish();

  if (node.gpus % node.pcie_switches != 0) {
    reader.fail("pcie_switches", "must divide gpus (" + std::to_string(node.gpus) +
                                     ") so that every PCIe switch holds the same number of GPUs");
  }
  if (node.nics % node.pcie_switches != 0) {
    reader.fail("pcie_switches", "must divide nics (" + std::to_string(node.nics) +
                                     ") so that every GPU has a NIC on its PCIe switch");
  }
  return node;
}

FabricSpec parse_fabric(JsonObjectReader reader) {
  FabricSpec fabric;
  fabric.rail_optimized = reader.boolean("rail_optimized");
  fabric.nodes_per_leaf = small_positive_integer(reader, "nodes_per_leaf");
  fabric.spines = small_positive_integer(reader, "spines");
  fabric.oversubscription = reader.number_at_least("oversubscription", 1.0);
  fabric.switch_latency_seconds = reader.latency_seconds("switch_latency_seconds");
  fabric.ecmp = reader.choice("ecmp", {"split", "hash"}) == "split" ? EcmpMode::split : EcmpMode::hash;
  reader.finish();
  return fabric;
}

}  // namespace

ClusterSpec parse_cluster_spec(const nlohmann::json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  ClusterSpec spec;
  spec.name = reader.string("name");
  spec.file = file;
  spec.profile = reader.string("profile");
  spec.nodes = small_positive_integer(reader, "nodes");
  spec.node = parse_node(reader.object("node"));
  spec.fabric = parse_fabric(reader.object("fabric"));
  spec.sources = reader.string_list("sources");
  reader.finish();
  if (static_cast<long long>(spec.nodes) * spec.node.gpus > 1'000'000) {
    reader.fail("nodes", "gives more than a million GPUs");
  }
  return spec;
}

ClusterSpec load_cluster_spec(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "topology/clusters", "cluster");
  return parse_cluster_spec(load_json_file(file), file);
}

}  // namespace shardsim::topology
