#include "calib/measurements.h"

#include "topology/base/json_input.h"

namespace shardsim::calib {

namespace {

using nlohmann::json;

const std::vector<std::string> kGemmDtypes{"bf16", "fp16", "tf32", "fp8", "fp32", "fp64"};
const std::vector<std::string> kCopyKinds{"device_copy", "host_to_device", "device_to_host", "host_copy"};

// Calls `each(reader)` for every element of the array `key` (absent = empty).
template <typename Each>
void for_each_entry(JsonObjectReader& parent, const std::string& key, Each each) {
  if (!parent.has(key)) return;
  const json& list = parent.value(key);
  if (!list.is_array()) parent.fail(key, "must be an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    JsonObjectReader entry(list[i], parent.file(), parent.field_path(key + "[" + std::to_string(i) + "]"));
    each(entry);
    entry.finish();
  }
}

workloads::CollectiveOp collective_op(JsonObjectReader& reader, const std::string& key) {
  const std::string name = reader.string(key);
  const auto op = workloads::parse_collective_op(name);
  if (!op) reader.fail(key, "unknown collective '" + name + "'");
  return *op;
}

long long dimension(JsonObjectReader& reader, const std::string& key) { return reader.positive_integer(key); }

}  // namespace

void Measurements::merge(const Measurements& other) {
  if (machine.host.empty() && machine.device.empty()) machine = other.machine;
  gemm.insert(gemm.end(), other.gemm.begin(), other.gemm.end());
  copies.insert(copies.end(), other.copies.begin(), other.copies.end());
  kernel_launch_seconds.insert(kernel_launch_seconds.end(), other.kernel_launch_seconds.begin(),
                               other.kernel_launch_seconds.end());
  attention.insert(attention.end(), other.attention.begin(), other.attention.end());
  collectives.insert(collectives.end(), other.collectives.begin(), other.collectives.end());
  interference.insert(interference.end(), other.interference.begin(), other.interference.end());
}

json measurements_to_json(const Measurements& m) {
  json out;
  out["format"] = kMeasurementsFormat;
  out["machine"] = {{"host", m.machine.host},
                    {"device", m.machine.device},
                    {"backend", m.machine.backend},
                    {"software", m.machine.software}};
  out["gemm"] = json::array();
  for (const auto& g : m.gemm) {
    out["gemm"].push_back({{"dtype", g.dtype}, {"m", g.m}, {"n", g.n}, {"k", g.k}, {"batch", g.batch}, {"seconds", g.seconds}});
  }
  out["copies"] = json::array();
  for (const auto& c : m.copies) out["copies"].push_back({{"kind", c.kind}, {"bytes", c.bytes}, {"seconds", c.seconds}});
  out["kernel_launch_seconds"] = m.kernel_launch_seconds;
  out["attention"] = json::array();
  for (const auto& a : m.attention) {
    out["attention"].push_back({{"dtype", a.dtype},
                                {"batch", a.batch},
                                {"heads", a.heads},
                                {"sequence", a.sequence},
                                {"head_dim", a.head_dim},
                                {"causal", a.causal},
                                {"flops", a.flops},
                                {"seconds", a.seconds}});
  }
  out["collectives"] = json::array();
  for (const auto& c : m.collectives) {
    out["collectives"].push_back({{"op", workloads::to_string(c.op)},
                                  {"algorithm", c.algorithm},
                                  {"ranks", c.ranks},
                                  {"nodes", c.nodes},
                                  {"bytes", c.bytes},
                                  {"type", c.type},
                                  {"in_place", c.in_place},
                                  {"seconds", c.seconds},
                                  {"wrong", c.wrong ? json(*c.wrong) : json(nullptr)},
                                  {"source", c.source}});
  }
  out["interference"] = json::array();
  for (const auto& i : m.interference) {
    out["interference"].push_back({{"dtype", i.dtype},
                                   {"m", i.m},
                                   {"n", i.n},
                                   {"k", i.k},
                                   {"alone_seconds", i.alone_seconds},
                                   {"with_collective_seconds", i.with_collective_seconds},
                                   {"op", workloads::to_string(i.op)},
                                   {"bytes", i.bytes}});
  }
  return out;
}

Measurements parse_measurements(const json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  const std::string format = reader.string("format");
  if (format != kMeasurementsFormat) {
    reader.fail("format", "expected \"" + std::string(kMeasurementsFormat) + "\", got \"" + format + "\"");
  }
  Measurements m;
  {
    auto machine = reader.object("machine");
    m.machine.host = machine.string("host");
    m.machine.device = machine.string("device");
    m.machine.backend = machine.string("backend");
    m.machine.software = machine.string("software");
    machine.finish();
  }
  for_each_entry(reader, "gemm", [&](JsonObjectReader& e) {
    GemmMeasurement g;
    g.dtype = e.choice("dtype", kGemmDtypes);
    g.m = dimension(e, "m");
    g.n = dimension(e, "n");
    g.k = dimension(e, "k");
    if (e.has("batch")) g.batch = dimension(e, "batch");
    g.seconds = e.positive_number("seconds");
    m.gemm.push_back(g);
  });
  for_each_entry(reader, "copies", [&](JsonObjectReader& e) {
    CopyMeasurement c;
    c.kind = e.choice("kind", kCopyKinds);
    c.bytes = e.positive_number("bytes");
    c.seconds = e.positive_number("seconds");
    m.copies.push_back(c);
  });
  if (reader.has("kernel_launch_seconds")) {
    const json& list = reader.value("kernel_launch_seconds");
    if (!list.is_array()) reader.fail("kernel_launch_seconds", "must be an array of seconds");
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_number() || list[i].get<double>() <= 0) {
        reader.fail("kernel_launch_seconds[" + std::to_string(i) + "]", "must be a number > 0");
      }
      m.kernel_launch_seconds.push_back(list[i].get<double>());
    }
  }
  for_each_entry(reader, "attention", [&](JsonObjectReader& e) {
    AttentionMeasurement a;
    a.dtype = e.choice("dtype", kGemmDtypes);
    a.batch = e.positive_int("batch");
    a.heads = e.positive_int("heads");
    a.sequence = e.positive_int("sequence");
    a.head_dim = e.positive_int("head_dim");
    a.causal = e.boolean("causal");
    a.flops = e.positive_number("flops");
    a.seconds = e.positive_number("seconds");
    m.attention.push_back(a);
  });
  for_each_entry(reader, "collectives", [&](JsonObjectReader& e) {
    CollectiveMeasurement c;
    c.op = collective_op(e, "op");
    c.algorithm = e.string("algorithm");
    c.ranks = e.positive_int("ranks");
    c.nodes = e.positive_int("nodes");
    if (c.nodes > c.ranks) e.fail("nodes", "more nodes than ranks");
    c.bytes = e.non_negative_number("bytes");
    c.type = e.string("type");
    c.in_place = e.boolean("in_place");
    c.seconds = e.positive_number("seconds");
    const json& wrong = e.value("wrong");
    if (wrong.is_number() && wrong.get<double>() >= 0) {
      c.wrong = wrong.get<double>();
    } else if (!wrong.is_null()) {
      e.fail("wrong", "must be null (not checked) or a count >= 0");
    }
    c.source = e.string("source");
    m.collectives.push_back(c);
  });
  for_each_entry(reader, "interference", [&](JsonObjectReader& e) {
    InterferenceMeasurement i;
    i.dtype = e.choice("dtype", kGemmDtypes);
    i.m = dimension(e, "m");
    i.n = dimension(e, "n");
    i.k = dimension(e, "k");
    i.alone_seconds = e.positive_number("alone_seconds");
    i.with_collective_seconds = e.positive_number("with_collective_seconds");
    i.op = collective_op(e, "op");
    i.bytes = e.positive_number("bytes");
    m.interference.push_back(i);
  });
  reader.finish();
  return m;
}

Measurements load_measurements(const std::string& file) { return parse_measurements(load_json_file(file), file); }

}  // namespace shardsim::calib
