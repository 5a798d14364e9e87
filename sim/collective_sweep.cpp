#include "sim/collective_sweep.h"

#include "sim/collective_runner.h"
#include "sim/collectives/selection.h"

#include <map>
#include <memory>
#include <stdexcept>

namespace shardsim::sim {

std::vector<long long> geometric_sizes(long long min_bytes, long long max_bytes, long long factor) {
  if (min_bytes < 0 || max_bytes < min_bytes || factor < 2) {
    throw std::invalid_argument("sizes need 0 <= min <= max and a factor of at least 2");
  }
  std::vector<long long> sizes;
  for (long long size = min_bytes;; size *= factor) {
    sizes.push_back(size);
    if (size == 0 || size > max_bytes / factor) break;
  }
  return sizes;
}

std::vector<calib::NcclTestsRow> run_collective_sweep(const topology::Cluster& cluster, const topology::Router& router,
                                               const calib::Profile& profile, const GroupLayout& group,
                                               const CollectiveSweep& sweep,
                                               const std::function<void()>& on_size_done) {
  if (sweep.root < 0 || sweep.root >= group.size()) {
    throw std::invalid_argument("root " + std::to_string(sweep.root) + " is not a rank of the group (0.." +
                                std::to_string(group.size() - 1) + ")");
  }
  const CollectiveContext context{cluster, router, profile, group};
  const CollectiveCall call{sweep.op, sweep.root};
  const AlgorithmChooser chooser(context, call, sweep.algorithm, sweep.protocol);
  const bool rooted = sweep.op == CollectiveOp::broadcast || sweep.op == CollectiveOp::reduce || sweep.op == CollectiveOp::send;

  // Plans are per byte of buffer, so one per (algorithm, protocol) serves every size.
  std::map<std::pair<Algorithm, Protocol>, std::shared_ptr<const TransferPlan>> plans;
  std::vector<calib::NcclTestsRow> rows;
  for (long long requested : sweep.sizes) {
    calib::NcclTestsRow row;
    row.op = sweep.op;
    row.size = calib::nccl_tests_size(sweep.op, requested, sweep.type, group.size());
    row.type = std::string(sweep.type.name);
    row.root = rooted ? sweep.root : -1;
    row.ranks = group.size();
    const AlgorithmCandidate& choice = chooser.choose(row.size.bytes);
    row.algorithm = std::string(workloads::to_string(choice.algorithm)) + "/" +
                    std::string(workloads::to_string(choice.protocol));
    const double measured = sweep.mode == NetworkMode::table
                                ? measured_collective_seconds(profile, sweep.op, group.size(), group.node_count(),
                                                              row.size.bytes)
                                : -1.0;
    if (measured >= 0) {
      row.seconds = measured;
      row.algorithm = "measured";
    } else if (sweep.mode != NetworkMode::flow) {
      row.seconds = choice.cost.seconds(row.size.bytes);
    } else {
      auto& plan = plans[{choice.algorithm, choice.protocol}];
      if (!plan) {
        plan = std::make_shared<const TransferPlan>(
            collective_algorithm(choice.algorithm).plan(context, call, choice.protocol));
      }
      row.seconds = seconds_from_picoseconds(simulate_collective(cluster, profile, plan, row.size.bytes).duration);
    }
    rows.push_back(std::move(row));
    if (on_size_done) on_size_done();
  }
  return rows;
}

}  // namespace shardsim::sim
