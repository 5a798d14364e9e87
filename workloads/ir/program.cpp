#include "workloads/ir/program.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>

namespace shardsim::workloads {

namespace {

template <typename Enum, std::size_t N>
Enum parse_enum(JsonObjectReader& reader, const std::string& key, const std::array<Enum, N>& values) {
  std::vector<std::string> names;
  for (Enum value : values) names.emplace_back(to_string(value));
  const std::string chosen = reader.choice(key, names);
  for (Enum value : values) {
    if (to_string(value) == chosen) return value;
  }
  reader.fail(key, "unknown value");
}

constexpr std::array kOpKinds{OpKind::compute, OpKind::collective, OpKind::memory};
constexpr std::array kKernelClasses{KernelClass::gemm, KernelClass::attention, KernelClass::elementwise,
                                    KernelClass::optimizer};
constexpr std::array kDtypes{Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::fp32};
constexpr std::array kAttentionKernels{AttentionKernel::profile, AttentionKernel::flash_attention_2,
                                       AttentionKernel::flash_attention_3};
constexpr std::array kMemoryCategories{MemoryCategory::parameters,         MemoryCategory::secondary_parameters,
                                       MemoryCategory::gradients,          MemoryCategory::optimizer_states,
                                       MemoryCategory::activations,        MemoryCategory::gathered_parameters,
                                       MemoryCategory::communication_buffers};

bool is_index(const nlohmann::json& value) { return value.is_number_integer() && value.get<std::int64_t>() >= 0; }

}  // namespace

std::size_t Program::total_ops() const {
  std::size_t total = 0;
  for (int program : program_of_rank) total += programs[static_cast<std::size_t>(program)].ops.size();
  return total;
}

std::string_view to_string(OpKind kind) {
  switch (kind) {
    case OpKind::compute: return "compute";
    case OpKind::collective: return "collective";
    case OpKind::memory: return "memory";
  }
  return "?";
}

std::string_view to_string(KernelClass kernel) {
  switch (kernel) {
    case KernelClass::gemm: return "gemm";
    case KernelClass::attention: return "attention";
    case KernelClass::elementwise: return "elementwise";
    case KernelClass::optimizer: return "optimizer";
  }
  return "?";
}

std::string_view to_string(Dtype dtype) {
  switch (dtype) {
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
    case Dtype::fp32: return "fp32";
  }
  return "?";
}

std::string_view to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::profile: return "profile";
    case AttentionKernel::flash_attention_2: return "flash_attention_2";
    case AttentionKernel::flash_attention_3: return "flash_attention_3";
  }
  return "?";
}

std::optional<AttentionKernel> find_flash_attention(std::string_view name) {
  for (AttentionKernel kernel : {AttentionKernel::flash_attention_2, AttentionKernel::flash_attention_3}) {
    if (to_string(kernel) == name) return kernel;
  }
  return std::nullopt;
}

std::string_view to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::secondary_parameters: return "secondary_parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_states: return "optimizer_states";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::gathered_parameters: return "gathered_parameters";
    case MemoryCategory::communication_buffers: return "communication_buffers";
  }
  return "?";
}

double bytes_per_element(Dtype dtype) {
  switch (dtype) {
    case Dtype::bf16:
    case Dtype::fp16: return 2;
    case Dtype::fp8: return 1;
    case Dtype::fp32: return 4;
  }
  return 0;
}

void validate_program(const Program& program) {
  const auto fail = [](const std::string& what) { throw std::logic_error("invalid Program: " + what); };
  if (program.program_of_rank.size() != static_cast<std::size_t>(program.ranks)) fail("program_of_rank size");
  for (int index : program.program_of_rank) {
    if (index < 0 || static_cast<std::size_t>(index) >= program.programs.size()) fail("program_of_rank entry");
  }
  for (const Communicator& communicator : program.communicators) {
    if (communicator.group_of_rank.size() != static_cast<std::size_t>(program.ranks)) {
      fail("communicator " + communicator.name + " does not cover every rank");
    }
  }
  for (const RankProgram& rank_program : program.programs) {
    for (std::size_t i = 0; i < rank_program.ops.size(); ++i) {
      const Op& op = rank_program.ops[i];
      if (op.stream < 0 || static_cast<std::size_t>(op.stream) >= program.streams.size()) {
        fail("op " + std::string(op.name) + ": no stream " + std::to_string(op.stream));
      }
      for (std::uint32_t dep : op.deps) {
        if (dep >= i) fail("op " + std::string(op.name) + " depends on a later op");
      }
      if (op.kind == OpKind::collective) {
        if (op.communicator < 0 || static_cast<std::size_t>(op.communicator) >= program.communicators.size()) {
          fail("op " + std::string(op.name) + ": no communicator " + std::to_string(op.communicator));
        }
        const Communicator& communicator = program.communicators[static_cast<std::size_t>(op.communicator)];
        if (op.root < 0 || op.root >= communicator.group_size()) {
          fail("op " + std::string(op.name) + ": root outside the group");
        }
      }
    }
  }
  // Every member of a group must make the same calls on it, in the same order.
  using Call = std::tuple<CollectiveOp, double, int>;
  std::map<std::pair<int, int>, std::vector<Call>> calls_of_group;  // (communicator, group) -> first member's calls
  for (int rank = 0; rank < program.ranks; ++rank) {
    std::map<int, std::vector<Call>> mine;
    for (const Op& op : program.program_of(rank).ops) {
      if (op.kind == OpKind::collective) mine[op.communicator].emplace_back(op.collective, op.bytes, op.root);
    }
    for (auto& [communicator, calls] : mine) {
      const int group = program.communicators[static_cast<std::size_t>(communicator)].group_of_rank[rank];
      if (group < 0) fail("rank " + std::to_string(rank) + " calls a communicator it is not in");
      const auto [it, first] = calls_of_group.try_emplace({communicator, group}, std::move(calls));
      if (!first && it->second != calls) {
        fail("rank " + std::to_string(rank) + " disagrees with its group on the calls of communicator " +
             program.communicators[static_cast<std::size_t>(communicator)].name);
      }
    }
  }
}

std::uint32_t RankProgram::append(Op op, std::string_view name, std::span<const std::uint32_t> deps) {
  if (!storage_) storage_ = std::make_shared<std::pmr::monotonic_buffer_resource>();
  std::pmr::polymorphic_allocator<char> text(storage_.get());
  char* name_copy = text.allocate(name.size());
  std::copy(name.begin(), name.end(), name_copy);
  op.name = std::string_view(name_copy, name.size());
  std::pmr::polymorphic_allocator<std::uint32_t> indices(storage_.get());
  std::uint32_t* deps_copy = deps.empty() ? nullptr : indices.allocate(deps.size());
  std::copy(deps.begin(), deps.end(), deps_copy);
  op.deps = std::span<const std::uint32_t>(deps_copy, deps.size());
  ops.push_back(op);
  return static_cast<std::uint32_t>(ops.size() - 1);
}

Op make_op(OpKind kind, int stream) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  return op;
}

Op collective_op(CollectiveOp kind, int communicator, double bytes, int stream, int root) {
  Op op = make_op(OpKind::collective, stream);
  op.collective = kind;
  op.communicator = communicator;
  op.bytes = bytes;
  op.root = root;
  return op;
}

Op memory_op(MemoryCategory category, double bytes, int stream) {
  Op op = make_op(OpKind::memory, stream);
  op.memory = category;
  op.bytes = bytes;
  return op;
}

double bytes_sent_per_rank(const Program& program, int rank) {
  double sent = 0;
  for (const Op& op : program.program_of(rank).ops) {
    if (op.kind != OpKind::collective) continue;
    const Communicator& communicator = program.communicators[static_cast<std::size_t>(op.communicator)];
    const double n = communicator.group_size();
    switch (op.collective) {
      case CollectiveOp::all_reduce: sent += 2 * (n - 1) / n * op.bytes; break;
      case CollectiveOp::all_gather:
      case CollectiveOp::reduce_scatter:
      case CollectiveOp::all_to_all: sent += (n - 1) / n * op.bytes; break;
      case CollectiveOp::broadcast:
      case CollectiveOp::reduce:
        // A pipelined chain: every rank but the last forwards the buffer once.
        sent += n > 1 ? (n - 1) / n * op.bytes : 0;
        break;
      case CollectiveOp::send_recv: sent += op.bytes; break;
      case CollectiveOp::send: {
        const std::vector<int>& group = communicator.group_of(rank);
        const bool root = group[static_cast<std::size_t>(op.root)] == rank;
        sent += root ? (n - 1) * op.bytes : 0;
        break;
      }
    }
  }
  return sent;
}

nlohmann::json program_to_json(const Program& program) {
  nlohmann::json out;
  out["format"] = "shardsim-program-1";
  out["ranks"] = program.ranks;
  out["streams"] = program.streams;
  out["description"] = program.description;
  out["program_of_rank"] = program.program_of_rank;
  nlohmann::json communicators = nlohmann::json::array();
  for (const Communicator& communicator : program.communicators) {
    communicators.push_back({{"name", communicator.name}, {"groups", communicator.groups}});
  }
  out["communicators"] = std::move(communicators);
  nlohmann::json programs = nlohmann::json::array();
  for (const RankProgram& rank_program : program.programs) {
    nlohmann::json resident = nlohmann::json::object();
    for (MemoryCategory category : kMemoryCategories) {
      resident[std::string(to_string(category))] = rank_program.resident_bytes[static_cast<std::size_t>(category)];
    }
    nlohmann::json ops = nlohmann::json::array();
    for (const Op& op : rank_program.ops) {
      nlohmann::json entry = {{"name", op.name},
                              {"kind", to_string(op.kind)},
                              {"stream", op.stream},
                              {"deps", std::vector<std::uint32_t>(op.deps.begin(), op.deps.end())}};
      switch (op.kind) {
        case OpKind::compute:
          entry["kernel"] = to_string(op.kernel);
          entry["dtype"] = to_string(op.dtype);
          entry["flops"] = op.flops;
          entry["hbm_bytes"] = op.hbm_bytes;
          if (op.kernel == KernelClass::gemm) entry["gemm"] = {op.gemm.m, op.gemm.n, op.gemm.k};
          if (op.kernel == KernelClass::attention) entry["attention_kernel"] = to_string(op.attention_kernel);
          break;
        case OpKind::collective:
          entry["collective"] = to_string(op.collective);
          entry["communicator"] = op.communicator;
          entry["root"] = op.root;
          entry["bytes"] = op.bytes;
          break;
        case OpKind::memory:
          entry["category"] = to_string(op.memory);
          entry["bytes"] = op.bytes;
          break;
      }
      ops.push_back(std::move(entry));
    }
    programs.push_back({{"resident_bytes", std::move(resident)}, {"ops", std::move(ops)}});
  }
  out["programs"] = std::move(programs);
  return out;
}

namespace {

// Appends the op `reader` reads to `program`.
void parse_op(JsonObjectReader reader, RankProgram& program) {
  Op op;
  const std::string name = reader.string("name");
  op.kind = parse_enum(reader, "kind", kOpKinds);
  op.stream = reader.non_negative_int("stream");
  const nlohmann::json& listed = reader.value("deps");
  if (!listed.is_array()) reader.fail("deps", "must be an array of op indices");
  std::vector<std::uint32_t> deps;
  for (const auto& dep : listed) {
    if (!is_index(dep)) reader.fail("deps", "must be an array of op indices");
    deps.push_back(dep.get<std::uint32_t>());
  }
  switch (op.kind) {
    case OpKind::compute: {
      op.kernel = parse_enum(reader, "kernel", kKernelClasses);
      op.dtype = parse_enum(reader, "dtype", kDtypes);
      op.flops = reader.non_negative_number("flops");
      op.hbm_bytes = reader.non_negative_number("hbm_bytes");
      if (op.kernel == KernelClass::gemm) {
        const nlohmann::json& shape = reader.value("gemm");
        if (!shape.is_array() || shape.size() != 3 || !shape[0].is_number_integer() ||
            !shape[1].is_number_integer() || !shape[2].is_number_integer()) {
          reader.fail("gemm", "must be [m, n, k]");
        }
        op.gemm = {shape[0].get<std::int64_t>(), shape[1].get<std::int64_t>(), shape[2].get<std::int64_t>()};
      }
      // Absent in Programs written before attention kernels had names.
      if (op.kernel == KernelClass::attention && reader.has("attention_kernel")) {
        op.attention_kernel = parse_enum(reader, "attention_kernel", kAttentionKernels);
      }
      break;
    }
    case OpKind::collective: {
      std::vector<std::string> names;
      for (CollectiveOp c : all_collective_ops()) names.emplace_back(to_string(c));
      op.collective = *parse_collective_op(reader.choice("collective", names));
      op.communicator = reader.non_negative_int("communicator");
      op.root = reader.non_negative_int("root");
      op.bytes = reader.non_negative_number("bytes");
      break;
    }
    case OpKind::memory:
      op.memory = parse_enum(reader, "category", kMemoryCategories);
      op.bytes = reader.value("bytes").is_number() ? reader.value("bytes").get<double>() : 0.0;
      if (!reader.value("bytes").is_number()) reader.fail("bytes", "must be a number");
      break;
  }
  reader.finish();
  program.append(op, name, deps);
}

}  // namespace

Program program_from_json(const nlohmann::json& document, const std::string& file) {
  JsonObjectReader reader(document, file);
  if (reader.string("format") != "shardsim-program-1") reader.fail("format", "must be \"shardsim-program-1\"");
  Program program;
  program.ranks = reader.positive_int("ranks");
  program.streams = reader.string_list("streams");
  program.description = reader.value("description");
  const nlohmann::json& of_rank = reader.value("program_of_rank");
  if (!of_rank.is_array() || of_rank.size() != static_cast<std::size_t>(program.ranks)) {
    reader.fail("program_of_rank", "must list one program index per rank");
  }
  for (const auto& index : of_rank) {
    if (!is_index(index)) reader.fail("program_of_rank", "must hold program indices");
    program.program_of_rank.push_back(index.get<int>());
  }
  const nlohmann::json& communicators = reader.value("communicators");
  if (!communicators.is_array()) reader.fail("communicators", "must be an array");
  for (std::size_t c = 0; c < communicators.size(); ++c) {
    JsonObjectReader entry(communicators[c], file, reader.field_path("communicators[" + std::to_string(c) + "]"));
    Communicator communicator;
    communicator.name = entry.string("name");
    communicator.group_of_rank.assign(static_cast<std::size_t>(program.ranks), -1);
    const nlohmann::json& groups = entry.value("groups");
    if (!groups.is_array()) entry.fail("groups", "must be an array of rank lists");
    for (const auto& group : groups) {
      if (!group.is_array() || group.empty()) entry.fail("groups", "must be an array of non-empty rank lists");
      std::vector<int> ranks;
      for (const auto& rank : group) {
        if (!is_index(rank) || rank.get<int>() >= program.ranks) entry.fail("groups", "rank out of range");
        if (communicator.group_of_rank[rank.get<std::size_t>()] != -1) entry.fail("groups", "rank in two groups");
        communicator.group_of_rank[rank.get<std::size_t>()] = static_cast<int>(communicator.groups.size());
        ranks.push_back(rank.get<int>());
      }
      if (!communicator.groups.empty() && ranks.size() != communicator.groups.front().size()) {
        entry.fail("groups", "groups must have equal sizes");
      }
      communicator.groups.push_back(std::move(ranks));
    }
    entry.finish();
    program.communicators.push_back(std::move(communicator));
  }
  const nlohmann::json& programs = reader.value("programs");
  if (!programs.is_array()) reader.fail("programs", "must be an array");
  for (std::size_t p = 0; p < programs.size(); ++p) {
    JsonObjectReader entry(programs[p], file, reader.field_path("programs[" + std::to_string(p) + "]"));
    RankProgram rank_program;
    auto resident = entry.object("resident_bytes");
    for (MemoryCategory category : kMemoryCategories) {
      rank_program.resident_bytes[static_cast<std::size_t>(category)] =
          resident.non_negative_number(std::string(to_string(category)));
    }
    resident.finish();
    const nlohmann::json& ops = entry.value("ops");
    if (!ops.is_array()) entry.fail("ops", "must be an array");
    rank_program.ops.reserve(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      parse_op(JsonObjectReader(ops[i], file, entry.field_path("ops[" + std::to_string(i) + "]")), rank_program);
    }
    entry.finish();
    program.programs.push_back(std::move(rank_program));
  }
  reader.finish();
  try {
    validate_program(program);
  } catch (const std::logic_error& e) {
    throw InputError(file + ": " + e.what());
  }
  return program;
}

}  // namespace shardsim::workloads
