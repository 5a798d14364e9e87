#include "sim/step/program_index.h"

#include "sim/step/kernel_time.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

ProgramIndex::ProgramIndex(const workloads::RankProgram& program, std::size_t streams, const calib::Profile& profile) {
  const std::size_t n = program.ops.size();
  kernel_duration.assign(n, 0);
  heads.resize(n);
  stream_ops.resize(streams);
  std::vector<std::uint32_t> count(n + 1, 0);
  std::vector<bool> has_kernels(streams, false);
  for (std::size_t i = 0; i < n; ++i) {
    const workloads::Op& op = program.ops[i];
    if (op.deps.size() > std::numeric_limits<std::uint16_t>::max()) {
      // The simulator counts each op's unfinished dependencies in 16 bits.
      throw std::invalid_argument("op " + std::string(op.name) + " has " + std::to_string(op.deps.size()) +
                                  " dependencies; at most 65535 are supported");
    }
    heads[i] = {op.kind, static_cast<std::uint16_t>(op.stream)};
    if (op.kind == workloads::OpKind::compute) kernel_duration[i] = picoseconds_from_seconds(kernel_seconds(op, profile));
    stream_ops[static_cast<std::size_t>(op.stream)].push_back(static_cast<std::uint32_t>(i));
    if (op.kind == workloads::OpKind::compute) has_kernels[static_cast<std::size_t>(op.stream)] = true;
    for (std::uint32_t dep : op.deps) ++count[dep + 1];
  }
  compute_streams = static_cast<int>(std::count(has_kernels.begin(), has_kernels.end(), true));
  for (std::size_t i = 0; i < n; ++i) count[i + 1] += count[i];
  dependents_begin = count;
  dependents.resize(count[n]);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::uint32_t dep : program.ops[i].deps) dependents[count[dep]++] = static_cast<std::uint32_t>(i);
  }
}

}  // namespace shardsim::sim
