#include "calib/executor/measured_steps.h"

#include "topology/base/mpi_world.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <stdexcept>

namespace shardsim::calib {

void check_execution_request(const workloads::Program& program, const ExecutionOptions& options) {
  if (options.warmup_steps < 0 || options.measured_steps < 1) {
    throw std::invalid_argument("at least one measured step and no negative warm-up are needed");
  }
  const ExecutionOptions::Fault& fault = options.fault;
  if (fault.kind != ExecutionOptions::Fault::Kind::none &&
      (fault.rank < 0 || fault.rank >= program.ranks || fault.op >= program.program_of(fault.rank).ops.size())) {
    throw std::invalid_argument("fault injection: rank " + std::to_string(fault.rank) + " has no op " +
                                std::to_string(fault.op));
  }
  for (const workloads::RankProgram& rank_program : program.programs) {
    for (const workloads::Op& op : rank_program.ops) {
      if (op.kind == workloads::OpKind::collective && op.bytes > static_cast<double>(INT_MAX)) {
        throw std::invalid_argument("op '" + std::string(op.name) + "' moves " +
                                    std::to_string(static_cast<long long>(op.bytes)) +
                                    " bytes, more than an MPI count holds; shrink the job with --scale");
      }
    }
  }
}

void check_one_process_per_rank(const workloads::Program& program) {
  const int size = world_size();
  if (size != program.ranks) {
    throw std::invalid_argument("the program has " + std::to_string(program.ranks) + " ranks but MPI started " +
                                std::to_string(size) + " processes (mpirun -np " + std::to_string(program.ranks) + ")");
  }
}

int median_step(const std::vector<double>& step_seconds) {
  std::vector<int> order(step_seconds.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return step_seconds[static_cast<std::size_t>(a)] < step_seconds[static_cast<std::size_t>(b)];
  });
  return order[(order.size() - 1) / 2];
}

namespace {

double step_end(const std::vector<MeasuredOp>& timing) {
  double end = 0;
  for (const MeasuredOp& op : timing) end = std::max(end, op.end_seconds);
  return end;
}

}  // namespace

RankSteps measure_steps(int rank, const ExecutionOptions& options, const std::function<void()>& before_step,
                        const RunStep& step) {
  RankSteps mine;
  for (int s = 0; s < options.warmup_steps + options.measured_steps; ++s) {
    before_step();
    const bool inject = s == options.warmup_steps && rank == options.fault.rank &&
                        options.fault.kind != ExecutionOptions::Fault::Kind::none;
    std::int64_t origin = 0;
    std::vector<MeasuredOp> timing = step(inject, origin);
    if (s >= options.warmup_steps) {
      mine.steps.push_back(std::move(timing));
      mine.origins_ns.push_back(origin);
    }
  }
  return mine;
}

MeasuredSteps gather_measured_steps(const RankSteps& mine, std::string backend, std::string device) {
  const int rank = world_rank();
  const int size = world_size();
  MeasuredSteps result;
  result.backend = std::move(backend);
  result.device = std::move(device);
  for (const auto& timing : mine.steps) result.step_seconds.push_back(step_end(timing));
  world_max(result.step_seconds);
  result.reported_step = median_step(result.step_seconds);

  // Gather the reported step's timings at rank 0: two doubles per op, from
  // the first rank's step start when the ranks share a clock.
  result.shared_clock = node_count() == 1;
  const auto reported = static_cast<std::size_t>(result.reported_step);
  const std::int64_t my_origin = mine.origins_ns[reported];
  const std::int64_t first_origin = world_min(my_origin);
  const double shift = result.shared_clock ? static_cast<double>(my_origin - first_origin) * 1e-9 : 0.0;
  std::vector<double> flat;
  for (const MeasuredOp& op : mine.steps[reported]) {
    flat.push_back(op.start_seconds + shift);
    flat.push_back(op.end_seconds + shift);
  }
  int count = static_cast<int>(flat.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<double> all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(flat.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    result.ops.resize(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      auto& ops = result.ops[static_cast<std::size_t>(r)];
      const std::size_t first = static_cast<std::size_t>(offsets[static_cast<std::size_t>(r)]);
      for (int i = 0; i < counts[static_cast<std::size_t>(r)]; i += 2) {
        ops.push_back({all[first + static_cast<std::size_t>(i)], all[first + static_cast<std::size_t>(i) + 1]});
      }
    }
  }
  return result;
}

MeasuredSteps combine_rank_steps(const std::vector<RankSteps>& ranks, std::string backend, std::string device) {
  MeasuredSteps result;
  result.backend = std::move(backend);
  result.device = std::move(device);
  result.shared_clock = true;
  const std::size_t steps = ranks.front().steps.size();
  for (const RankSteps& rank : ranks) {
    if (rank.steps.size() != steps || rank.origins_ns.size() != steps) {
      throw std::logic_error("combine_rank_steps: the ranks measured different numbers of steps");
    }
  }
  result.step_seconds.assign(steps, 0.0);
  for (std::size_t s = 0; s < steps; ++s) {
    for (const RankSteps& rank : ranks) result.step_seconds[s] = std::max(result.step_seconds[s], step_end(rank.steps[s]));
  }
  result.reported_step = median_step(result.step_seconds);
  const auto reported = static_cast<std::size_t>(result.reported_step);
  std::int64_t first_origin = ranks.front().origins_ns[reported];
  for (const RankSteps& rank : ranks) first_origin = std::min(first_origin, rank.origins_ns[reported]);
  for (const RankSteps& rank : ranks) {
    const double shift = static_cast<double>(rank.origins_ns[reported] - first_origin) * 1e-9;
    auto& ops = result.ops.emplace_back();
    for (const MeasuredOp& op : rank.steps[reported]) ops.push_back({op.start_seconds + shift, op.end_seconds + shift});
  }
  return result;
}

}  // namespace shardsim::calib
