#include "fixtures.h"
#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "topology/cluster_spec.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

using shardsim::InputError;
using shardsim::test::cluster_json;
using shardsim::test::cluster_spec;
using shardsim::topology::load_cluster_spec;

namespace {

// The InputError message a malformed document produces.
std::string error_for(const nlohmann::json& document) {
  try {
    cluster_spec(document);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("every bundled cluster preset loads", "[cluster_spec]") {
  const auto names = shardsim::list_presets("topology/clusters");
  REQUIRE(names.size() >= 7);
  for (const auto& name : names) {
    INFO(name);
    const auto spec = load_cluster_spec(name);
    REQUIRE(spec.name == name);
    REQUIRE_FALSE(spec.sources.empty());
  }
}

TEST_CASE("the cluster files the results compare on load and cite their sources", "[cluster_spec]") {
  // results/ describes machines no preset does (Selene, Meta's RoCE pods,
  // the machines of published nccl-tests runs); a cluster file has a fabric.
  int clusters = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(shardsim::data_directory() + "/results")) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json document = shardsim::load_json_file(entry.path().string());
    if (!document.is_object() || !document.contains("fabric")) continue;
    INFO(entry.path().string());
    const auto spec = load_cluster_spec(entry.path().string());
    REQUIRE_FALSE(spec.sources.empty());
    ++clusters;
  }
  REQUIRE(clusters >= 5);  // selene, two Meta pods, p4de, 248 H200 nodes
}

TEST_CASE("the reference presets hold the published shapes", "[cluster_spec]") {
  const auto a100 = load_cluster_spec("dgx-a100-1024");
  REQUIRE(a100.gpu_count() == 1024);
  REQUIRE(a100.node.nvlink_bidirectional_bytes_per_second == 600e9);
  REQUIRE(a100.node.nics == 8);
  REQUIRE(a100.node.nic_bits_per_second == 200e9);
  REQUIRE(a100.fabric.rail_optimized);

  const auto a800 = load_cluster_spec("a800-1024");
  REQUIRE(a800.gpu_count() == 1024);
  REQUIRE(a800.node.nvlink_bidirectional_bytes_per_second == 400e9);
  REQUIRE(a800.node.nics == 4);

  const auto h100 = load_cluster_spec("h100-1024");
  REQUIRE(h100.node.nvlink_bidirectional_bytes_per_second == 900e9);
  REQUIRE(h100.node.nic_bits_per_second == 400e9);

  REQUIRE(load_cluster_spec("dgx-a100-2node").nodes == 2);
  REQUIRE(load_cluster_spec("dgx-a100-8node").nodes == 8);
  REQUIRE(load_cluster_spec("dgx-a100-1024-oversub2").fabric.oversubscription == 2.0);
}

TEST_CASE("an unknown field is refused with its path", "[cluster_spec]") {
  auto doc = cluster_json();
  doc["fabric"]["oversubscribtion"] = 2;
  REQUIRE(error_for(doc) == "test-cluster.json: fabric.oversubscribtion: unknown field");
}

TEST_CASE("a missing field is refused with its path", "[cluster_spec]") {
  auto doc = cluster_json();
  doc["node"].erase("nics");
  REQUIRE(error_for(doc) == "test-cluster.json: node.nics: missing required field");
  auto top = cluster_json();
  top.erase("fabric");
  REQUIRE(error_for(top) == "test-cluster.json: fabric: missing required field");
}

TEST_CASE("a latency of a second or more is refused naming the field, not wrapped on the clock", "[cluster_spec]") {
  // 1e7 s overflowed the conversion to picoseconds and read as 0 s; 9e6 s stopped a run unnamed.
  for (double seconds : {1e7, 9e6, 1.0}) {
    auto doc = cluster_json();
    doc["fabric"]["switch_latency_seconds"] = seconds;
    REQUIRE_THAT(error_for(doc), Catch::StartsWith("test-cluster.json: fabric.switch_latency_seconds: must be a "
                                                   "latency under 1 s"));
  }
  auto node = cluster_json();
  node["node"]["nvlink_latency_seconds"] = 2.0;
  REQUIRE_THAT(error_for(node), Catch::StartsWith("test-cluster.json: node.nvlink_latency_seconds: must be a latency"));
  auto fine = cluster_json();
  fine["fabric"]["switch_latency_seconds"] = 0.5;
  REQUIRE(error_for(fine) == "no error");
}

TEST_CASE("zero and negative bandwidths are refused", "[cluster_spec]") {
  auto zero = cluster_json();
  zero["node"]["nic_bits_per_second"] = 0;
  REQUIRE(error_for(zero) == "test-cluster.json: node.nic_bits_per_second: must be a positive number, got 0");
  auto negative = cluster_json();
  negative["node"]["nvlink_bidirectional_bytes_per_second"] = -600e9;
  REQUIRE_THAT(error_for(negative), Catch::Contains("node.nvlink_bidirectional_bytes_per_second: must be a positive number"));
}

TEST_CASE("wrong types and values are refused", "[cluster_spec]") {
  auto text = cluster_json();
  text["nodes"] = "128";
  REQUIRE(error_for(text) == "test-cluster.json: nodes: must be a positive integer, got \"128\"");
  auto fraction = cluster_json();
  fraction["node"]["gpus"] = 7.5;
  REQUIRE_THAT(error_for(fraction), Catch::Contains("node.gpus: must be a positive integer"));
  auto oversub = cluster_json();
  oversub["fabric"]["oversubscription"] = 0.5;
  REQUIRE_THAT(error_for(oversub), Catch::Contains("fabric.oversubscription: must be a number >= 1"));
  auto ecmp = cluster_json();
  ecmp["fabric"]["ecmp"] = "random";
  REQUIRE(error_for(ecmp) == "test-cluster.json: fabric.ecmp: must be one of split, hash, got \"random\"");
  auto uneven = cluster_json(2, 8, 8);
  uneven["node"]["pcie_switches"] = 3;
  REQUIRE_THAT(error_for(uneven), Catch::Contains("node.pcie_switches: must divide gpus"));
  REQUIRE_THAT(error_for(nlohmann::json::array()), Catch::Contains("must be a JSON object"));
}

TEST_CASE("malformed JSON and missing files are input errors naming the file", "[cluster_spec]") {
  const std::string path = "malformed-cluster.json";
  {
    std::ofstream out(path);
    out << "{\"name\": \"broken\", \"nodes\": 2,";
  }
  REQUIRE_THROWS_WITH(load_cluster_spec(path), Catch::StartsWith(path + ": malformed JSON: parse error at line 1"));
  {
    std::ofstream out(path);
    out << "{\"name\": \"broken\", \"nodes\": 1e999}";
  }
  REQUIRE_THROWS_WITH(load_cluster_spec(path), path + ": malformed JSON: number overflow parsing '1e999'");
  std::remove(path.c_str());
  REQUIRE_THROWS_WITH(load_cluster_spec("no-such-cluster"), Catch::Contains("no such cluster file or preset"));
}

TEST_CASE("JSON nested past any input's depth is refused while parsing, not quoted into a stack overflow",
          "[cluster_spec]") {
  // 60,000 levels overflowed the stack in nlohmann's dump() when an error quoted the value.
  const std::string deep = "{\"name\": " + std::string(60000, '[') + std::string(60000, ']') + "}";
  REQUIRE_THROWS_WITH(shardsim::parse_json_text(deep, "deep.json"),
                      Catch::StartsWith("deep.json: malformed JSON: nested more than 256 levels deep"));
  const auto path = std::filesystem::temp_directory_path() / "shardsim-deep.json";
  std::ofstream(path) << deep;
  REQUIRE_THROWS_WITH(shardsim::topology::load_cluster_spec(path.string()), Catch::Contains("nested more than 256"));
  std::filesystem::remove(path);
  // 256 levels still parse.
  const std::string ok = std::string(256, '[') + std::string(256, ']');
  CHECK(shardsim::parse_json_text(ok, "ok.json").is_array());
}
