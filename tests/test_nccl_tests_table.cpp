#include "calib/nccl_tests_table.h"
#include "sim/collective_sweep.h"

#include <catch2/catch.hpp>

#include <sstream>

using namespace shardsim::calib;
using shardsim::sim::geometric_sizes;
using shardsim::workloads::CollectiveOp;

TEST_CASE("bus bandwidth factors are nccl-tests'", "[nccl_tests]") {
  using shardsim::workloads::bus_bandwidth_factor;
  REQUIRE(bus_bandwidth_factor(CollectiveOp::all_reduce, 8) == Approx(2.0 * 7 / 8));
  REQUIRE(bus_bandwidth_factor(CollectiveOp::all_gather, 8) == Approx(7.0 / 8));
  REQUIRE(bus_bandwidth_factor(CollectiveOp::reduce_scatter, 16) == Approx(15.0 / 16));
  REQUIRE(bus_bandwidth_factor(CollectiveOp::all_to_all, 4) == Approx(3.0 / 4));
  REQUIRE(bus_bandwidth_factor(CollectiveOp::broadcast, 8) == 1.0);
  REQUIRE(bus_bandwidth_factor(CollectiveOp::reduce, 8) == 1.0);
  REQUIRE(bus_bandwidth_factor(CollectiveOp::send_recv, 8) == 1.0);
}

TEST_CASE("sizes that must split among ranks are rounded down as nccl-tests does", "[nccl_tests]") {
  const DataType f32{"float", 4};
  REQUIRE(nccl_tests_size(CollectiveOp::all_reduce, 1000, f32, 1024).bytes == 1000);
  REQUIRE(nccl_tests_size(CollectiveOp::all_gather, 1000, f32, 16).bytes == 960);  // 250 elements -> 15 x 16
  REQUIRE(nccl_tests_size(CollectiveOp::all_gather, 8, f32, 1024).bytes == 0);
  REQUIRE(nccl_tests_size(CollectiveOp::all_to_all, 4096, f32, 8).count == 1024);
  REQUIRE(nccl_tests_size(CollectiveOp::broadcast, 6, f32, 8).count == 1);
}

TEST_CASE("a row has nccl-tests' columns and units", "[nccl_tests]") {
  NcclTestsRow row;
  row.op = CollectiveOp::all_reduce;
  row.size = {1073741824.0, 268435456};
  row.type = "float";
  row.ranks = 8;
  row.seconds = 5e-3;
  row.algorithm = "ring/simple";
  // algbw = 1073741824 B / 5 ms = 214.75 GB/s; busbw = algbw x 2 x 7/8 = 375.81 GB/s.
  REQUIRE(row.algbw_gb_per_s() == Approx(214.748));
  REQUIRE(row.busbw_gb_per_s() == Approx(375.809));
  std::ostringstream out;
  write_nccl_tests_row(out, row);
  REQUIRE(out.str() ==
          "  1073741824     268435456     float     sum      -1   5000.0  214.75  375.81     N/A   5000.0  214.75  375.81     N/A  ring/simple\n");
  std::ostringstream csv;
  write_csv_row(csv, row);
  REQUIRE(csv.str() == "all_reduce,1073741824,268435456,float,sum,-1,8,5000.000000,214.748365,375.809638,ring/simple\n");
}

TEST_CASE("sweeps step geometrically from min to max", "[nccl_tests]") {
  REQUIRE(geometric_sizes(8, 64, 2) == std::vector<long long>{8, 16, 32, 64});
  REQUIRE(geometric_sizes(8, 100, 4) == std::vector<long long>{8, 32});
  REQUIRE(geometric_sizes(8, 8LL << 30, 2).size() == 31);
  REQUIRE_THROWS(geometric_sizes(64, 8, 2));
  REQUIRE_THROWS(geometric_sizes(8, 64, 1));
}
