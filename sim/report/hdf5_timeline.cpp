#include "sim/report/hdf5_timeline.h"

#include "sim/report/chrome_trace.h"
#include "sim/report/hdf5_tables.h"
#include "topology/base/json_input.h"
#include "workloads/ir/collective_calls.h"

#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <unistd.h>

namespace shardsim::sim {

namespace {

using namespace hdf5;

constexpr std::size_t kNameLength = 96;
constexpr std::size_t kLabelLength = 24;

struct OpRow {
  std::int32_t rank;
  std::uint32_t op;
  char name[kNameLength];
  char kind[kLabelLength];
  char op_class[kLabelLength];
  char stream[kLabelLength];
  double start_seconds;
  double end_seconds;
  double moving_seconds;
  double flops;
  double bytes;
  std::int32_t group_size;
  std::int64_t call;
};

struct MemoryRow {
  std::int32_t rank;
  double time_seconds;
  char category[kLabelLength];
  double delta_bytes;
  double total_bytes;
};

struct LinkRow {
  std::int32_t link;
  char kind[kLabelLength];
  double bytes;
  double capacity_bytes_per_second;
  double utilisation;
};


hid_t op_row_type(hid_t name_type, hid_t label_type, bool with_moving = true) {
  const hid_t op_type = H5Tcreate(H5T_COMPOUND, sizeof(OpRow));
  H5Tinsert(op_type, "rank", HOFFSET(OpRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(op_type, "op", HOFFSET(OpRow, op), H5T_NATIVE_UINT32);
  H5Tinsert(op_type, "name", HOFFSET(OpRow, name), name_type);
  H5Tinsert(op_type, "kind", HOFFSET(OpRow, kind), label_type);
  H5Tinsert(op_type, "class", HOFFSET(OpRow, op_class), label_type);
  H5Tinsert(op_type, "stream", HOFFSET(OpRow, stream), label_type);
  H5Tinsert(op_type, "start_seconds", HOFFSET(OpRow, start_seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(op_type, "end_seconds", HOFFSET(OpRow, end_seconds), H5T_NATIVE_DOUBLE);
  if (with_moving) H5Tinsert(op_type, "moving_seconds", HOFFSET(OpRow, moving_seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(op_type, "flops", HOFFSET(OpRow, flops), H5T_NATIVE_DOUBLE);
  H5Tinsert(op_type, "bytes", HOFFSET(OpRow, bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(op_type, "group_size", HOFFSET(OpRow, group_size), H5T_NATIVE_INT32);
  H5Tinsert(op_type, "call", HOFFSET(OpRow, call), H5T_NATIVE_INT64);
  return op_type;
}

std::string read_string_attribute(hid_t file, const char* name, const std::string& path) {
  if (H5Aexists(file, name) <= 0) throw_input_error(path, name, "missing: not a shardsim timeline");
  Handle attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose, name);
  Handle type(H5Aget_type(attribute), H5Tclose, "attribute type");
  std::string value(H5Tget_size(type), '\0');
  Handle memory_type(string_type(value.size()), H5Tclose, "string type");
  if (H5Aread(attribute, memory_type, value.data()) < 0) throw_input_error(path, name, "cannot be read");
  value.resize(std::strlen(value.c_str()));
  return value;
}

double read_double_attribute(hid_t file, const char* name, const std::string& path) {
  if (H5Aexists(file, name) <= 0) throw_input_error(path, name, "missing: not a shardsim timeline");
  Handle attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose, name);
  double value = 0;
  if (H5Aread(attribute, H5T_NATIVE_DOUBLE, &value) < 0) throw_input_error(path, name, "cannot be read");
  return value;
}

void write_file(hid_t file, const workloads::Program& program, const workloads::Timeline& timeline,
                const std::vector<int>& ranks, const topology::Cluster& cluster, const nlohmann::json& summary) {
  Handle name_type(string_type(kNameLength), H5Tclose, "string type");
  Handle label_type(string_type(kLabelLength), H5Tclose, "string type");

  Handle op_type(op_row_type(name_type, label_type), H5Tclose, "compound type");

  Handle memory_type(H5Tcreate(H5T_COMPOUND, sizeof(MemoryRow)), H5Tclose, "compound type");
  H5Tinsert(memory_type, "rank", HOFFSET(MemoryRow, rank), H5T_NATIVE_INT32);
  H5Tinsert(memory_type, "time_seconds", HOFFSET(MemoryRow, time_seconds), H5T_NATIVE_DOUBLE);
  H5Tinsert(memory_type, "category", HOFFSET(MemoryRow, category), label_type);
  H5Tinsert(memory_type, "delta_bytes", HOFFSET(MemoryRow, delta_bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(memory_type, "total_bytes", HOFFSET(MemoryRow, total_bytes), H5T_NATIVE_DOUBLE);

  Handle link_type(H5Tcreate(H5T_COMPOUND, sizeof(LinkRow)), H5Tclose, "compound type");
  H5Tinsert(link_type, "link", HOFFSET(LinkRow, link), H5T_NATIVE_INT32);
  H5Tinsert(link_type, "kind", HOFFSET(LinkRow, kind), label_type);
  H5Tinsert(link_type, "bytes", HOFFSET(LinkRow, bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(link_type, "capacity_bytes_per_second", HOFFSET(LinkRow, capacity_bytes_per_second), H5T_NATIVE_DOUBLE);
  H5Tinsert(link_type, "utilisation", HOFFSET(LinkRow, utilisation), H5T_NATIVE_DOUBLE);

  const auto call_ids = workloads::collective_call_ids(program);
  std::vector<OpRow> op_rows;
  std::vector<MemoryRow> memory_rows;
  for (int rank : ranks) {
    const auto& rank_program = program.program_of(rank);
    const auto& timings = timeline.ops[static_cast<std::size_t>(rank)];
    double total = 0;
    for (double bytes : rank_program.resident_bytes) total += bytes;
    for (std::size_t i = 0; i < rank_program.ops.size(); ++i) {
      const workloads::Op& op = rank_program.ops[i];
      OpRow row{};
      row.rank = rank;
      row.op = static_cast<std::uint32_t>(i);
      copy_label(row.name, op.name);
      copy_label(row.kind, workloads::to_string(op.kind));
      copy_label(row.stream, program.streams[static_cast<std::size_t>(op.stream)]);
      row.start_seconds = timings[i].start < 0 ? -1 : seconds_from_picoseconds(timings[i].start);
      row.end_seconds = timings[i].end < 0 ? -1 : seconds_from_picoseconds(timings[i].end);
      row.moving_seconds = timings[i].moving < 0 ? -1 : seconds_from_picoseconds(timings[i].moving);
      row.call = call_ids[static_cast<std::size_t>(rank)][i];
      row.group_size = 1;
      switch (op.kind) {
        case workloads::OpKind::compute:
          copy_label(row.op_class, workloads::to_string(op.kernel));
          row.flops = op.flops;
          row.bytes = op.hbm_bytes;
          break;
        case workloads::OpKind::collective:
          copy_label(row.op_class, workloads::to_string(op.collective));
          row.bytes = op.bytes;
          row.group_size = program.communicators[static_cast<std::size_t>(op.communicator)].group_size();
          break;
        case workloads::OpKind::memory:
          copy_label(row.op_class, workloads::to_string(op.memory));
          row.bytes = op.bytes;
          if (timings[i].start >= 0) {
            total += op.bytes;
            MemoryRow memory{};
            memory.rank = rank;
            memory.time_seconds = row.start_seconds;
            copy_label(memory.category, workloads::to_string(op.memory));
            memory.delta_bytes = op.bytes;
            memory.total_bytes = total;
            memory_rows.push_back(memory);
          }
          break;
      }
      op_rows.push_back(row);
    }
  }
  std::vector<LinkRow> link_rows;
  const double step = seconds_from_picoseconds(timeline.step_time);
  for (std::size_t l = 0; l < timeline.link_bytes.size(); ++l) {
    const topology::Link& link = cluster.links()[l];
    LinkRow row{};
    row.link = static_cast<std::int32_t>(l);
    copy_label(row.kind, topology::to_string(link.kind));
    row.bytes = timeline.link_bytes[l];
    row.capacity_bytes_per_second = link.bytes_per_second;
    row.utilisation = step > 0 ? row.bytes / (link.bytes_per_second * step) : 0;
    link_rows.push_back(row);
  }
  write_table(file, "ops", op_type, op_rows);
  write_table(file, "memory", memory_type, memory_rows);
  write_table(file, "links", link_type, link_rows);
  write_string_attribute(file, "schema", "shardsim-timeline-1");
  write_string_attribute(file, "summary_json", summary.dump());
  write_double_attribute(file, "step_seconds", step);
}

TimelineFile read_file(const std::string& path) {
  TimelineFile timeline;
  timeline.path = path;
  const hid_t opened = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (opened < 0) throw_input_error(path, "", "cannot open as an HDF5 file (not HDF5, or cut short)");
  Handle file(opened, H5Fclose, "file");
  const std::string schema = read_string_attribute(file, "schema", path);
  if (schema != "shardsim-timeline-1") throw_input_error(path, "schema", "is '" + schema + "', expected shardsim-timeline-1");
  try {
    timeline.summary = nlohmann::json::parse(read_string_attribute(file, "summary_json", path));
  } catch (const nlohmann::json::exception& e) {
    throw_input_error(path, "summary_json", std::string("is not JSON: ") + e.what());
  }
  timeline.step_seconds = read_double_attribute(file, "step_seconds", path);
  if (H5Lexists(file, "ops", H5P_DEFAULT) <= 0) throw_input_error(path, "ops", "missing: not a shardsim timeline");
  Handle dataset(H5Dopen2(file, "ops", H5P_DEFAULT), H5Dclose, "ops");
  Handle space(H5Dget_space(dataset), H5Sclose, "dataspace");
  const hssize_t count = H5Sget_simple_extent_npoints(space);
  Handle name_type(string_type(kNameLength), H5Tclose, "string type");
  Handle label_type(string_type(kLabelLength), H5Tclose, "string type");
  // Files written before moving_seconds existed lack the column.
  Handle file_type(H5Dget_type(dataset), H5Tclose, "ops type");
  const bool with_moving = H5Tget_member_index(file_type, "moving_seconds") >= 0;
  Handle op_type(op_row_type(name_type, label_type, with_moving), H5Tclose, "compound type");
  OpRow unknown{};
  unknown.moving_seconds = -1;
  std::vector<OpRow> rows(static_cast<std::size_t>(std::max<hssize_t>(count, 0)), unknown);
  if (!rows.empty() && H5Dread(dataset, op_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0) {
    throw_input_error(path, "ops", "cannot be read as the shardsim-timeline-1 op table");
  }
  for (const OpRow& row : rows) {
    TimelineOpRow out;
    out.rank = row.rank;
    out.op = row.op;
    out.name = row.name;
    out.kind = row.kind;
    out.op_class = row.op_class;
    out.stream = row.stream;
    out.start_seconds = row.start_seconds;
    out.end_seconds = row.end_seconds;
    out.moving_seconds = row.moving_seconds;
    out.flops = row.flops;
    out.bytes = row.bytes;
    out.group_size = row.group_size;
    out.call = row.call;
    timeline.ops.push_back(std::move(out));
  }
  return timeline;
}

}  // namespace

TimelineFile read_hdf5_timeline(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  if (!std::filesystem::is_regular_file(path)) throw_input_error(path, "", "no such file");
  try {
    return read_file(path);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(path + ": cannot read as an HDF5 timeline (" + e.what() + ")");
  }
}

void write_hdf5_timeline(const std::string& path, const workloads::Program& program, const workloads::Timeline& timeline,
                         const std::vector<int>& ranks, const topology::Cluster& cluster, const nlohmann::json& summary) {
  write_file_atomically(path, [&](hid_t file) { write_file(file, program, timeline, ranks, cluster, summary); });
}

}  // namespace shardsim::sim
