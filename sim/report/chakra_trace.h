// A Program as Chakra execution traces (MLCommons Chakra,
// schema/protobuf/et_def.proto), so the step shardsim simulates can be
// replayed by ASTRA-sim or any other Chakra consumer and the two simulators
// cross-checked on one workload (FORMATS.md).
//
// One file per rank, `<prefix>.<rank>.et` as ASTRA-sim opens them: a
// GlobalMetadata record, then one Node record per node, each preceded by its
// size as a varint. Nodes, in the rank's program order:
//   compute op     COMP_NODE: duration_micros from the kernel-time model
//                  (kernel_time.h, the profile given, rounded to whole
//                  microseconds as the schema stores them), num_ops (FLOPs)
//                  and tensor_size (HBM bytes) for a roofline replay;
//   collective     COMM_COLL_NODE: comm_type, comm_size (the buffer in
//                  nccl-tests' convention, as the Program holds it, but for
//                  an all-gather each rank's input, 1/n of it, which is what
//                  ASTRA-sim reads there) and pg_name, the id of its group in
//                  the comm-group file;
//   send           on the group's root one COMM_SEND_NODE to each other
//                  member, on the others a COMM_RECV_NODE from the root;
//   send_recv      a COMM_SEND_NODE to the next member and a COMM_RECV_NODE
//                  from the previous one (nccl-tests' sendrecv).
// A send and its receive carry the same comm_tag: the communicator's index
// times 65536 plus the call's number on that group, modulo 65536 (the k-th
// call of a rank on a group meets the k-th of every other member, as in
// NCCL). Every node is marked is_cpu_op false.
//
// Chakra has no streams and no allocations, so:
//   - a node depends (data_deps) on the nodes of its op's dependencies and
//     of the op before it on the same stream, which is how the Program
//     orders a stream;
//   - memory ops, and collectives with nothing to do (one member, zero
//     bytes; shardsim ends them at once), get no node: what depends on one
//     depends on what it depended on.
//
// The comm-group file (ASTRA-sim's --comm-group-configuration) maps each id,
// from 1, to the ranks of one group of one communicator with two or more
// members; pg_name "0" would mean every rank and is not used. Rank r is NPU r:
// the placement of ranks on GPUs is the consumer's, not part of the trace.
#pragma once

#include "calib/profile.h"
#include "workloads/ir/program.h"

#include <cstdint>
#include <ostream>
#include <vector>

namespace shardsim::sim {

// The enums of et_def.proto that the traces use.
enum class ChakraNodeType : int { comp = 4, comm_send = 5, comm_recv = 6, comm_coll = 7 };
enum class ChakraCollective : int { all_reduce = 0, reduce = 1, all_gather = 2, broadcast = 5, all_to_all = 6,
                                    reduce_scatter = 7 };
ChakraCollective chakra_collective(workloads::CollectiveOp op);  // std::invalid_argument for send, send_recv

class ChakraTraceWriter {
 public:
  // Throws InputError naming the profile when it lacks a dtype the Program's
  // kernels use; keeps references to both.
  ChakraTraceWriter(const workloads::Program& program, const calib::Profile& profile);

  // `<prefix>.<rank>.et`.
  void write_rank(std::ostream& out, int rank) const;
  // ASTRA-sim's comm-group JSON: {"1": [ranks...], "2": [...], ...}.
  void write_comm_groups(std::ostream& out) const;
  // The id of `group` of `communicator` in the comm-group file; 0 for a
  // group of one rank, which has none.
  int group_id(int communicator, int group) const;

  static constexpr const char* kSchemaVersion = "0.0.4";

 private:
  const workloads::Program& program_;
  std::vector<std::vector<std::uint64_t>> kernel_micros_;  // [op list][op]
  std::vector<int> first_group_id_;                        // per communicator; 0 for one-rank groups
};

}  // namespace shardsim::sim
