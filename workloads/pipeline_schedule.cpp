#include "workloads/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace shardsim::workloads {

namespace {

// The k-th forward (or backward) a stage runs, as Megatron-LM's
// get_model_chunk_id and microbatch id: groups of `stages` micro-batches
// visit every chunk in turn, backwards in reverse chunk order.
PipelinePass nth_pass(int k, bool forward, int stages, int chunks) {
  const int in_group = k % (stages * chunks);
  int chunk = in_group / stages;
  if (!forward) chunk = chunks - 1 - chunk;
  return {forward, k / (stages * chunks) * stages + k % stages, chunk};
}

}  // namespace

std::vector<std::vector<PipelinePass>> pipeline_schedule(int stages, int chunks, int micro_batches) {
  if (stages < 1 || chunks < 1 || micro_batches < 1) {
    throw std::invalid_argument("pipeline_schedule: stages, chunks and micro-batches must be positive");
  }
  if (chunks > 1 && micro_batches % stages != 0) {
    throw std::invalid_argument("pipeline_schedule: interleaving needs micro-batches (" + std::to_string(micro_batches) +
                                ") to be a multiple of the stages (" + std::to_string(stages) + ")");
  }
  const int total = micro_batches * chunks;
  std::vector<std::vector<PipelinePass>> order(static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage) {
    int warmup = 0;
    if (chunks == 1) {
      warmup = std::min(stages - stage - 1, micro_batches);
    } else {
      warmup = micro_batches == stages ? total : std::min(total, (stages - stage - 1) * 2 + (chunks - 1) * stages);
    }
    std::vector<PipelinePass>& passes = order[static_cast<std::size_t>(stage)];
    passes.reserve(static_cast<std::size_t>(2 * total));
    int forwards = 0, backwards = 0;
    for (; forwards < warmup; ++forwards) passes.push_back(nth_pass(forwards, true, stages, chunks));
    while (forwards < total) {
      passes.push_back(nth_pass(forwards++, true, stages, chunks));
      passes.push_back(nth_pass(backwards++, false, stages, chunks));
    }
    while (backwards < total) passes.push_back(nth_pass(backwards++, false, stages, chunks));
  }
  return order;
}

}  // namespace shardsim::workloads
