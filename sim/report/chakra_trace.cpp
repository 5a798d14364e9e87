#include "sim/report/chakra_trace.h"

#include "sim/report/protobuf_encoder.h"
#include "sim/step/kernel_time.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

using workloads::CollectiveOp;
using workloads::Op;
using workloads::OpKind;

namespace {

// Field numbers of et_def.proto.
namespace node_field {
constexpr int id = 1, name = 2, type = 3, data_deps = 5, duration_micros = 7, attr = 10;
}
namespace attribute_field {
constexpr int name = 1, int32_val = 7, int64_val = 9, uint64_val = 13, bool_val = 27, string_val = 29;
}
constexpr int kGlobalMetadataVersion = 1;

constexpr auto kSet = ProtobufEncoder::Presence::explicit_;  // oneof members are written even when 0

// One node's encoding, built field by field into buffers reused across nodes.
class NodeRecord {
 public:
  void begin(std::uint64_t id, std::string_view name, ChakraNodeType type, std::span<const std::uint64_t> deps) {
    node_.clear();
    node_.uint64_field(node_field::id, id);
    node_.string_field(node_field::name, name);
    node_.uint64_field(node_field::type, static_cast<std::uint64_t>(type));
    node_.packed_uint64_field(node_field::data_deps, deps);
  }
  void duration(std::uint64_t micros) { node_.uint64_field(node_field::duration_micros, micros); }
  void bool_attribute(std::string_view name, bool value) {
    attribute(name, [&](ProtobufEncoder& a) { a.bool_field(attribute_field::bool_val, value, kSet); });
  }
  void int32_attribute(std::string_view name, std::int32_t value) {
    attribute(name, [&](ProtobufEncoder& a) { a.int32_field(attribute_field::int32_val, value, kSet); });
  }
  void int64_attribute(std::string_view name, std::int64_t value) {
    attribute(name, [&](ProtobufEncoder& a) { a.int64_field(attribute_field::int64_val, value, kSet); });
  }
  void uint64_attribute(std::string_view name, std::uint64_t value) {
    attribute(name, [&](ProtobufEncoder& a) { a.uint64_field(attribute_field::uint64_val, value, kSet); });
  }
  void string_attribute(std::string_view name, std::string_view value) {
    attribute(name, [&](ProtobufEncoder& a) { a.string_field(attribute_field::string_val, value, kSet); });
  }
  // Every node runs on the GPU.
  void write(std::ostream& out) {
    bool_attribute("is_cpu_op", false);
    write_delimited(out, node_);
  }

 private:
  // An AttributeProto: its name, then the one value `set_value` writes.
  template <typename SetValue>
  void attribute(std::string_view name, SetValue set_value) {
    attribute_.clear();
    attribute_.string_field(attribute_field::name, name);
    set_value(attribute_);
    node_.message_field(node_field::attr, attribute_);
  }

  ProtobufEncoder node_;
  ProtobufEncoder attribute_;
};

std::int64_t whole(double value) { return std::llround(value); }

}  // namespace

ChakraCollective chakra_collective(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return ChakraCollective::all_reduce;
    case CollectiveOp::all_gather: return ChakraCollective::all_gather;
    case CollectiveOp::reduce_scatter: return ChakraCollective::reduce_scatter;
    case CollectiveOp::broadcast: return ChakraCollective::broadcast;
    case CollectiveOp::reduce: return ChakraCollective::reduce;
    case CollectiveOp::all_to_all: return ChakraCollective::all_to_all;
    case CollectiveOp::send_recv:
    case CollectiveOp::send: break;
  }
  throw std::invalid_argument(std::string(workloads::to_string(op)) + " is point-to-point in Chakra, not a collective");
}

ChakraTraceWriter::ChakraTraceWriter(const workloads::Program& program, const calib::Profile& profile)
    : program_(program) {
  for (const workloads::RankProgram& list : program.programs) {
    auto& micros = kernel_micros_.emplace_back(list.ops.size(), 0);
    for (std::size_t i = 0; i < list.ops.size(); ++i) {
      if (list.ops[i].kind == OpKind::compute) {
        micros[i] = static_cast<std::uint64_t>(whole(kernel_seconds(list.ops[i], profile) * 1e6));
      }
    }
  }
  int next = 1;
  for (const workloads::Communicator& communicator : program.communicators) {
    const bool listed = communicator.group_size() >= 2;
    first_group_id_.push_back(listed ? next : 0);
    if (listed) next += static_cast<int>(communicator.groups.size());
  }
  if (program.communicators.size() >= 32768) {
    throw std::logic_error("Chakra comm_tag: more than 32767 communicators do not fit an int32 tag");
  }
}

int ChakraTraceWriter::group_id(int communicator, int group) const {
  const int first = first_group_id_[static_cast<std::size_t>(communicator)];
  return first == 0 ? 0 : first + group;
}

void ChakraTraceWriter::write_comm_groups(std::ostream& out) const {
  out << "{";
  bool first = true;
  for (std::size_t c = 0; c < program_.communicators.size(); ++c) {
    const auto& groups = program_.communicators[c].groups;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const int id = group_id(static_cast<int>(c), static_cast<int>(g));
      if (id == 0) continue;
      out << (first ? "\n" : ",\n") << "  \"" << id << "\": " << nlohmann::json(groups[g]).dump();
      first = false;
    }
  }
  out << "\n}\n";
}

void ChakraTraceWriter::write_rank(std::ostream& out, int rank) const {
  const workloads::RankProgram& list = program_.program_of(rank);
  const auto& micros = kernel_micros_[static_cast<std::size_t>(program_.program_of_rank[static_cast<std::size_t>(rank)])];

  ProtobufEncoder metadata;
  metadata.string_field(kGlobalMetadataVersion, kSchemaVersion);
  write_delimited(out, metadata);

  // The nodes that stand for each op's end, for the ops after it: its own
  // nodes, or for an op without any, what it depended on.
  std::vector<std::uint64_t> ends;
  std::vector<std::size_t> ends_begin{0};
  ends_begin.reserve(list.ops.size() + 1);
  std::vector<std::int64_t> last_on_stream(program_.streams.size(), -1);
  std::vector<std::uint64_t> calls(program_.communicators.size(), 0);
  std::vector<std::uint64_t> deps;
  std::string name;
  NodeRecord node;
  std::uint64_t next_id = 0;

  for (std::size_t i = 0; i < list.ops.size(); ++i) {
    const Op& op = list.ops[i];
    deps.clear();
    const auto depend_on = [&](std::size_t earlier) {
      deps.insert(deps.end(), ends.begin() + static_cast<std::ptrdiff_t>(ends_begin[earlier]),
                  ends.begin() + static_cast<std::ptrdiff_t>(ends_begin[earlier + 1]));
    };
    for (std::uint32_t d : op.deps) depend_on(d);
    std::int64_t& previous = last_on_stream[static_cast<std::size_t>(op.stream)];
    if (previous >= 0) depend_on(static_cast<std::size_t>(previous));
    previous = static_cast<std::int64_t>(i);
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());

    const auto emit = [&](std::string_view node_name, ChakraNodeType type) {
      node.begin(next_id, node_name, type, deps);
      ends.push_back(next_id++);
    };
    const auto pass_through = [&] { ends.insert(ends.end(), deps.begin(), deps.end()); };

    if (op.kind == OpKind::compute) {
      emit(op.name, ChakraNodeType::comp);
      node.duration(micros[i]);
      node.int64_attribute("num_ops", whole(op.flops));
      node.uint64_attribute("tensor_size", static_cast<std::uint64_t>(whole(op.hbm_bytes)));
      node.write(out);
    } else if (op.kind == OpKind::memory) {
      pass_through();
    } else {
      const auto c = static_cast<std::size_t>(op.communicator);
      const workloads::Communicator& communicator = program_.communicators[c];
      const int group_index = communicator.group_of_rank[static_cast<std::size_t>(rank)];
      const std::vector<int>& group = communicator.groups[static_cast<std::size_t>(group_index)];
      const std::uint64_t call = calls[c]++;
      const auto n = static_cast<int>(group.size());
      if (n < 2 || op.bytes <= 0) {
        pass_through();
      } else if (op.collective == CollectiveOp::send || op.collective == CollectiveOp::send_recv) {
        const auto tag = static_cast<std::int32_t>((c << 16) | (call & 0xffff));
        const int position = static_cast<int>(std::lower_bound(group.begin(), group.end(), rank) - group.begin());
        const auto point_to_point = [&](ChakraNodeType type, int peer) {
          const bool sending = type == ChakraNodeType::comm_send;
          name.assign(op.name).append(sending ? ".send_to_" : ".recv_from_").append(std::to_string(peer));
          emit(name, type);
          node.int32_attribute("comm_src", sending ? rank : peer);
          node.int32_attribute("comm_dst", sending ? peer : rank);
          node.int32_attribute("comm_tag", tag);
          node.int64_attribute("comm_size", whole(op.bytes));
          node.write(out);
        };
        if (op.collective == CollectiveOp::send_recv) {
          point_to_point(ChakraNodeType::comm_send, group[static_cast<std::size_t>((position + 1) % n)]);
          point_to_point(ChakraNodeType::comm_recv, group[static_cast<std::size_t>((position + n - 1) % n)]);
        } else if (position == op.root) {
          for (int peer : group) {
            if (peer != rank) point_to_point(ChakraNodeType::comm_send, peer);
          }
        } else {
          point_to_point(ChakraNodeType::comm_recv, group[static_cast<std::size_t>(op.root)]);
        }
      } else {
        emit(op.name, ChakraNodeType::comm_coll);
        node.int64_attribute("comm_type", static_cast<std::int64_t>(chakra_collective(op.collective)));
        // ASTRA-sim reads an all-gather's comm_size as each rank's input, the
        // output being comm_size times the group (astra-sim 518bd51,
        // system/astraccl/native_collectives/collective_algorithm/Ring.cc:75-77);
        // every other collective's as the whole buffer, which the Program holds.
        const double comm_size = op.collective == CollectiveOp::all_gather ? op.bytes / n : op.bytes;
        node.int64_attribute("comm_size", whole(comm_size));
        node.string_attribute("pg_name", std::to_string(group_id(static_cast<int>(c), group_index)));
        node.write(out);
      }
    }
    ends_begin.push_back(ends.size());
  }
}

}  // namespace shardsim::sim
