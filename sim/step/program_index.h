// ProgramIndex: what every rank running one op list (a RankProgram) shares
// while a step is played: each op's kind, stream and kernel duration packed
// apart from the Op (what moving ops along reads most), the reverse
// dependency lists, and each stream's ops in program order.
#pragma once

#include "calib/profile.h"
#include "topology/base/units.h"
#include "workloads/ir/program.h"

#include <cstdint>
#include <vector>

namespace shardsim::sim {

struct OpHead {
  workloads::OpKind kind;
  std::uint16_t stream;
};

struct ProgramIndex {
  std::vector<OpHead> heads;
  std::vector<TimePs> kernel_duration;          // compute ops, from kernel_time.h; 0 for the others
  std::vector<std::uint32_t> dependents_begin;  // CSR over ops: dependents of op i are
  std::vector<std::uint32_t> dependents;        // dependents[begin[i] .. begin[i + 1])
  std::vector<std::vector<std::uint32_t>> stream_ops;
  int compute_streams = 0;  // streams with a compute op

  // Throws like kernel_seconds() (a dtype the profile lacks).
  ProgramIndex(const workloads::RankProgram& program, std::size_t streams, const calib::Profile& profile);
};

}  // namespace shardsim::sim
