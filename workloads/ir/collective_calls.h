// Which ops of a Program are one collective call: NCCL matches a rank's k-th
// call on a communicator's group with every other member's k-th call there.
#pragma once

#include "workloads/ir/program.h"

#include <cstdint>
#include <vector>

namespace shardsim::workloads {

// For each rank, for each op: the collective call it belongs to, as an index
// into one numbering of all calls of the step (-1 for ops that are not
// collectives). The k-th call a rank makes on a group is that group's k-th
// call, as in NCCL.
std::vector<std::vector<std::int64_t>> collective_call_ids(const Program& program);

}  // namespace shardsim::workloads
