#include "calib/nccl_tests_table.h"

#include <array>
#include <cstdio>

namespace shardsim::calib {

namespace {

constexpr std::array<DataType, 10> kTypes{{{"int8", 1},
                                           {"uint8", 1},
                                           {"int32", 4},
                                           {"uint32", 4},
                                           {"int64", 8},
                                           {"uint64", 8},
                                           {"half", 2},
                                           {"float", 4},
                                           {"double", 8},
                                           {"bfloat16", 2}}};

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

// nccl-tests shows time with fewer decimals as it grows.
std::string format_time_us(double microseconds) {
  if (microseconds >= 10000.0) return format("%7.0f", microseconds);
  if (microseconds >= 100.0) return format("%7.1f", microseconds);
  return format("%7.2f", microseconds);
}

}  // namespace

std::optional<DataType> parse_data_type(std::string_view name) {
  for (const DataType& type : kTypes) {
    if (type.name == name) return type;
  }
  return std::nullopt;
}

std::vector<std::string> data_type_names() {
  std::vector<std::string> names;
  for (const DataType& type : kTypes) names.emplace_back(type.name);
  return names;
}

CollectiveSize nccl_tests_size(CollectiveOp op, long long requested_bytes, const DataType& type, int ranks) {
  const long long count = requested_bytes / type.bytes;
  switch (op) {
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all: {
      const long long even = count / ranks * ranks;
      return {static_cast<double>(even) * type.bytes, even};
    }
    default: return {static_cast<double>(count) * type.bytes, count};
  }
}

std::string_view nccl_tests_redop(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::reduce: return "sum";
    default: return "none";
  }
}

double NcclTestsRow::algbw_gb_per_s() const { return seconds > 0 ? size.bytes / seconds / 1e9 : 0.0; }

double NcclTestsRow::busbw_gb_per_s() const {
  return algbw_gb_per_s() * workloads::bus_bandwidth_factor(op, ranks);
}

void write_nccl_tests_header(std::ostream& out) {
  out << "#\n"
      << "#                                                              out-of-place                       in-place\n"
      << "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong  algorithm\n"
      << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n";
}

void write_nccl_tests_row(std::ostream& out, const NcclTestsRow& row) {
  char prefix[96];
  std::snprintf(prefix, sizeof prefix, "%12.0f  %12lld  %8s  %6s  %6d", row.size.bytes, row.size.count,
                row.type.c_str(), std::string(nccl_tests_redop(row.op)).c_str(), row.root);
  const std::string measured = "  " + format_time_us(row.seconds * 1e6) + "  " + format("%6.2f", row.algbw_gb_per_s()) +
                               "  " + format("%6.2f", row.busbw_gb_per_s()) + "     N/A";
  out << prefix << measured << measured << "  " << row.algorithm << "\n";
}

void write_nccl_tests_footer(std::ostream& out, const std::vector<NcclTestsRow>& rows) {
  double sum = 0;
  for (const auto& row : rows) sum += row.busbw_gb_per_s();
  out << "# Out of bounds values : 0 OK\n"
      << "# Avg bus bandwidth    : " << format("%g", rows.empty() ? 0.0 : sum / static_cast<double>(rows.size()))
      << "\n#\n";
}

void write_csv_header(std::ostream& out) {
  out << "op,size_bytes,count,type,redop,root,ranks,time_us,algbw_gb_per_s,busbw_gb_per_s,algorithm\n";
}

void write_csv_row(std::ostream& out, const NcclTestsRow& row) {
  out << workloads::to_string(row.op) << ',' << format("%.0f", row.size.bytes) << ',' << row.size.count << ','
      << row.type << ',' << nccl_tests_redop(row.op) << ',' << row.root << ',' << row.ranks << ','
      << format("%.6f", row.seconds * 1e6) << ',' << format("%.6f", row.algbw_gb_per_s()) << ','
      << format("%.6f", row.busbw_gb_per_s()) << ',' << row.algorithm << '\n';
}

}  // namespace shardsim::calib
