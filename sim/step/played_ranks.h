// Which ranks a step simulation plays, and, in mirror mode (the search's
// fast estimate; step_simulator.h), which groups a played call stands for.
//
// Every rank is played, or in mirror mode rank 0 and, transitively, every
// member of a group of a played rank whose members run different op lists
// (a pipeline's stage pairs): one rank per stage. A group whose members all
// run one op list mirrors its played member, so a call starts once its
// played members have issued it.
#pragma once

#include "topology/cluster.h"
#include "workloads/ir/program.h"

#include <vector>

namespace shardsim::sim {

struct PlayedRanks {
  std::vector<int> ranks;                         // ascending
  std::vector<std::vector<int>> arrivals_needed;  // [communicator][group]: played members
};

PlayedRanks played_ranks(const workloads::Program& program, bool mirror);

// A communicator's groups whose ranks run one op list, told apart by how
// their GPUs sit on the cluster (GPUs per node, leaf blocks): one
// representative of each kind and how many groups are like it. The mirror
// estimate costs a call by its slowest kind.
struct GroupKinds {
  std::vector<std::vector<topology::GpuId>> representatives;
  std::vector<int> counts;
};

// The GPUs `ranks` run on; `gpu_of_rank` empty: rank r on GPU r.
std::vector<topology::GpuId> gpus_of_ranks(const std::vector<topology::GpuId>& gpu_of_rank,
                                           const std::vector<int>& ranks);

// `gpu_of_rank` as for gpus_of_ranks().
GroupKinds group_kinds(const workloads::Program& program, const topology::Cluster& cluster,
                       const std::vector<topology::GpuId>& gpu_of_rank, int communicator, int op_list);

}  // namespace shardsim::sim
