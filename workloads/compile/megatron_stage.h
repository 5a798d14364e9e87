// A Megatron-LM pipeline stage's op list (compile_model_parallel_step's
// builder): its passes in the order its schedule gives, each module's
// kernels and model-parallel calls, the pipeline sends, the data-parallel
// gradient reductions in buckets as the backward fills them, and the
// distributed optimizer's step and parameter gathers; or, when the plan
// overlaps the expert-parallel all-to-alls, the combined 1F1B's merged
// steps (combined_1f1b.h).
#pragma once

#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/pipeline_schedule.h"
#include "workloads/ir/program.h"

#include <optional>
#include <vector>

namespace shardsim::workloads {

// A Megatron-LM rank program's streams, in order; the context-parallel
// stream only under context parallelism, then the expert all-to-all and
// shared-expert streams where the plan has them (MegatronCommunicators).
enum MegatronStream : int {
  compute_stream,
  tensor_stream,
  activation_send_stream,
  activation_receive_stream,
  gradient_send_stream,
  gradient_receive_stream,
  reduce_stream,
  gather_stream,
  context_stream,
};

struct MegatronCommunicators {
  std::optional<int> tensor, data, context;
  std::optional<int> expert_parallel, expert_data;
  int expert_stream = -1;  // after the context stream when there is one
  int shared_expert_stream = -1;  // a second compute stream, under --moe-shared-expert-overlap
  PipelineCommunicators pipeline;
};

// Writes stage `stage`'s op list into `program`: `steps` are its passes, one
// per step unless the plan runs the combined 1F1B.
void build_megatron_stage(const StepConfig& config, const ModelParallelPartition& partition,
                          const MegatronCommunicators& comms, int stage, const std::vector<CombinedStep>& steps,
                          RankProgram& program);

}  // namespace shardsim::workloads
