// NVLS and NVLS tree: NCCL's all-reduce through NVLink SHARP, the in-switch
// reduction of NVSwitch 3 (H100, H200 nodes). A profile that lists them
// (collectives.all_reduce.nvls / nvls_tree) says the machine has it.
//
// The switch does the arithmetic. Each 1/n slice of the buffer has a head
// GPU, which issues a multimem load-reduce: the switch reads the slice from
// every GPU of the node, sums it and returns the sum to the head. The head
// then issues a multimem store, which the switch multicasts to every GPU. Per
// GPU and direction its NVLink carries S (its whole buffer, read or written
// once) plus S/n (its own slice): S (n+1)/n, against the ring's 2 S (n-1)/n.
// Bus bandwidth rises by 2 (n-1)/(n+1), 1.56x on 8 GPUs, less what the
// switch's reductions and multicasts cost, which the profile's
// bandwidth_factor holds.
//
// NVLS tree spans nodes: each channel's head on a node (the GPU at the
// channel's NIC) heads 1/C of the buffer, C channels. Between its
// load-reduce and its multicast the head all-reduces the node's partial sum
// with the other nodes' heads of its channel over NCCL's double binary tree
// (tree.h), pipelined with the switch traffic. Each (channel, tree) is one
// lockstep Transfer carrying 1/(2C) of the buffer over the NVLinks of every
// GPU and the tree's network hops.
//
// Only all-reduce. NCCL also runs reduce-scatter and all-gather over NVLS,
// but then each GPU's busier NVLink direction carries S against the ring's
// S (n-1)/n: NVLS saves SMs there, not time, and SM use is not modelled.
//
// Latency as in NCCL's tuning model: one NVLink step for NVLS; for NVLS tree
// the NVLink step plus up and down the tree's depth in network steps. That
// is what the choice between algorithms uses, as NCCL's does. Where the
// profile gives a chunk pipeline (calib::ChunkPipeline), the call's time
// follows it instead: NCCL's chunk sizes (nccl_chunking.h), a fill of a few
// chunks in place of the switch step, and an overhead per chunk; what
// makes a mid-size NVLS call reach well under the link rate.
#pragma once

#include "sim/collectives/collective_algorithm.h"

namespace shardsim::sim {

class NvlsAlgorithm final : public CollectiveAlgorithm {
 public:
  Algorithm kind() const override { return Algorithm::nvls; }
  TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const override;
  CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                      Protocol protocol) const override;
  std::optional<CollectiveCost> tuning_cost(const CollectiveContext& context, const CollectiveCall& call,
                                            Protocol protocol) const override;

 protected:
  std::string group_refusal(CollectiveOp op, const GroupLayout& group) const override;
};

class NvlsTreeAlgorithm final : public CollectiveAlgorithm {
 public:
  Algorithm kind() const override { return Algorithm::nvls_tree; }
  TransferPlan plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const override;
  CollectiveCost cost(const CollectiveContext& context, const CollectiveCall& call,
                      Protocol protocol) const override;
  std::optional<CollectiveCost> tuning_cost(const CollectiveContext& context, const CollectiveCall& call,
                                            Protocol protocol) const override;

 protected:
  std::string group_refusal(CollectiveOp op, const GroupLayout& group) const override;
};

}  // namespace shardsim::sim
