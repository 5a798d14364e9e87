// Simulated collectives printed the way nccl-tests prints measured ones, so
// a prediction can be diffed line by line against a real run.
//
// Columns and units are nccl-tests': size in bytes (B), count in elements,
// type, redop, root, then time (us), algbw and busbw (GB/s, 1e9 bytes) and
// #wrong, once out-of-place and once in-place (identical in a simulation;
// #wrong is N/A as in nccl-tests with checking off). busbw = algbw * the
// nccl-tests bus factor of the collective. One extra trailing column names
// the algorithm/protocol the simulation ran.
#pragma once

#include "workloads/ir/collective_kind.h"

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim::calib {

using workloads::CollectiveOp;

struct DataType {
  std::string_view name;  // nccl-tests spelling: float, half, bfloat16, ...
  int bytes;
};
std::optional<DataType> parse_data_type(std::string_view name);
std::vector<std::string> data_type_names();

// What nccl-tests actually moves for a requested size: counts that split
// evenly among ranks where the collective needs it (all-gather,
// reduce-scatter, all-to-all), so 8 B over 1024 ranks may be 0 B.
struct CollectiveSize {
  double bytes = 0;
  long long count = 0;  // elements
};
CollectiveSize nccl_tests_size(CollectiveOp op, long long requested_bytes, const DataType& type, int ranks);

struct NcclTestsRow {
  CollectiveOp op = CollectiveOp::all_reduce;
  CollectiveSize size;
  std::string type;
  int root = -1;  // -1 where nccl-tests prints it so
  double seconds = 0;
  int ranks = 1;
  std::string algorithm;  // e.g. "ring/simple"

  double algbw_gb_per_s() const;
  double busbw_gb_per_s() const;
};

std::string_view nccl_tests_redop(CollectiveOp op);  // "sum" or "none"

void write_nccl_tests_header(std::ostream& out);
void write_nccl_tests_row(std::ostream& out, const NcclTestsRow& row);
// "# Avg bus bandwidth    : x" over the rows, as nccl-tests ends a run.
void write_nccl_tests_footer(std::ostream& out, const std::vector<NcclTestsRow>& rows);

void write_csv_header(std::ostream& out);
void write_csv_row(std::ostream& out, const NcclTestsRow& row);

}  // namespace shardsim::calib
