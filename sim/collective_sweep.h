// A size sweep of one collective on one group: what `shardsim collective`
// runs, as a library call. For every size, NCCL's choice of algorithm and
// protocol (or the pinned one) is simulated on the flow network or taken from
// its alpha-beta line.
#pragma once

#include "calib/nccl_tests_table.h"
#include "calib/profile.h"
#include "sim/collective_runner.h"
#include "sim/collectives/collective_algorithm.h"
#include "topology/routing.h"

#include <functional>
#include <optional>
#include <vector>

namespace shardsim::sim {

struct CollectiveSweep {
  CollectiveOp op = CollectiveOp::all_reduce;
  std::vector<long long> sizes;  // requested bytes, as nccl-tests -b/-e/-f produce them
  calib::DataType type{"float", 4};
  int root = 0;
  NetworkMode mode = NetworkMode::flow;
  std::optional<Algorithm> algorithm;
  std::optional<Protocol> protocol;
};

// nccl-tests' sizes: min_bytes, min_bytes * factor, ... up to max_bytes.
std::vector<long long> geometric_sizes(long long min_bytes, long long max_bytes, long long factor);

std::vector<calib::NcclTestsRow> run_collective_sweep(const topology::Cluster& cluster, const topology::Router& router,
                                               const calib::Profile& profile, const GroupLayout& group,
                                               const CollectiveSweep& sweep,
                                               const std::function<void()>& on_size_done = {});

}  // namespace shardsim::sim
