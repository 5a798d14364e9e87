// PipelineStageWriter: an OpWriter for one pipeline stage's op list, shared
// by the Megatron-LM and ZeroPP compilers: where the stage's chunks sit among
// the virtual stages (chunk c of stage s is virtual stage c p + s), and the
// one-way sends that carry activations forward and gradients back across a
// stage boundary, each direction and boundary on its own stream so both
// sides pair their sends in the same order.
#pragma once

#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/op_writer.h"
#include "workloads/compile/pipeline_schedule.h"

#include <string>
#include <vector>

namespace shardsim::workloads {

struct PipelineStreams {
  int activation_send = 0, activation_receive = 0, gradient_send = 0, gradient_receive = 0;
};

class PipelineStageWriter : protected OpWriter {
 protected:
  PipelineStageWriter(RankProgram& program, int compute_stream, const PipelineStreams& streams,
                      const ModelParallelism& parallel, const ModelParallelPartition& partition,
                      const PipelineCommunicators& pipeline, int stage)
      : OpWriter(program, compute_stream),
        mp_(parallel),
        partition_(partition),
        pipeline_(pipeline),
        streams_(streams),
        stage_(stage) {}

  int virtual_stage(int chunk) const { return chunk * mp_.pipeline + stage_; }
  bool first_virtual(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last_virtual(int chunk) const { return virtual_stage(chunk) == mp_.pipeline * mp_.virtual_stages - 1; }
  const std::vector<std::size_t>& modules_of(int chunk) const {
    return partition_.chunks[static_cast<std::size_t>(stage_)][static_cast<std::size_t>(chunk)];
  }
  // "mb<i>." and, with interleaving, "chunk<c>.": what the pass's ops are named after.
  std::string prefix(const PipelinePass& pass) const {
    return "mb" + std::to_string(pass.micro_batch) + "." +
           (mp_.virtual_stages > 1 ? "chunk" + std::to_string(pass.chunk) + "." : "");
  }

  // What a forward waits for: the previous virtual stage's activations
  // (nothing on the first).
  std::vector<OpIndex> receive_activations(const PipelinePass& pass) {
    if (first_virtual(pass.chunk)) return {};
    const int from = (stage_ + mp_.pipeline - 1) % mp_.pipeline;
    return {send(prefix(pass) + "receive_activations", pipeline_.forward[static_cast<std::size_t>(from)], from, stage_,
                 streams_.activation_receive, {})};
  }
  void send_activations(const PipelinePass& pass, std::vector<OpIndex> deps) {
    if (last_virtual(pass.chunk)) return;
    const int to = (stage_ + 1) % mp_.pipeline;
    send(prefix(pass) + "send_activations", pipeline_.forward[static_cast<std::size_t>(stage_)], stage_, to,
         streams_.activation_send, std::move(deps));
  }
  // What a backward (or its input-gradient half) waits for: the next
  // virtual stage's input gradient (nothing on the last).
  std::vector<OpIndex> receive_gradients(const PipelinePass& pass) {
    if (last_virtual(pass.chunk)) return {};
    const int from = (stage_ + 1) % mp_.pipeline;
    return {send(prefix(pass) + "receive_gradients", pipeline_.backward[static_cast<std::size_t>(stage_)], from, stage_,
                 streams_.gradient_receive, {})};
  }
  void send_gradients(const PipelinePass& pass, std::vector<OpIndex> deps) {
    if (first_virtual(pass.chunk)) return;
    const int to = (stage_ + mp_.pipeline - 1) % mp_.pipeline;
    send(prefix(pass) + "send_gradients", pipeline_.backward[static_cast<std::size_t>(to)], stage_, to,
         streams_.gradient_send, std::move(deps));
  }

  const ModelParallelism& mp_;
  const ModelParallelPartition& partition_;
  const PipelineCommunicators& pipeline_;
  PipelineStreams streams_;
  int stage_;

 private:
  // The send between this stage and a neighbour over `communicator`: the
  // root is the sender's place in the sorted pair.
  OpIndex send(const std::string& name, int communicator, int from, int to, int stream, std::vector<OpIndex> deps) {
    return collective(name, CollectiveOp::send, communicator, partition_.boundary_bytes, stream, deps,
                      from < to ? 0 : 1);
  }
};

}  // namespace shardsim::workloads
