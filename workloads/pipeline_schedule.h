// PipelineSchedule: the order in which each pipeline stage runs the forward
// and backward passes of its micro-batches (Narayanan et al. 2021, "Efficient
// Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
// section 2.2), as Megatron-LM's schedules.py orders them.
//
// With p stages and m micro-batches, 1F1B has stage s run min(p - s - 1, m)
// forwards (warm-up), then alternate one forward and one backward, then run
// the backwards left (cool-down); at most p - s micro-batches are in flight
// on stage s. On uniform stages a step takes (m + p - 1)(t_f + t_b): the
// bubble is (p - 1)/m of the ideal time.
//
// Interleaved 1F1B gives each stage v model chunks (chunk c of stage s holds
// the layers of virtual stage c p + s). Micro-batches go through in groups of
// p: forwards of chunk 0 for micro-batches 0..p-1, then chunk 1 for the
// same ones, ..., then the next group; backwards run the chunks in reverse.
// Stage s warms up with (p - s - 1) 2 + (v - 1) p forwards (all of them when
// m = p), so the bubble shrinks to (p - 1)/(v m). m must be a multiple of p.
#pragma once

#include <vector>

namespace shardsim::workloads {

struct PipelinePass {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;  // model chunk of the stage (0 without interleaving)

  bool operator==(const PipelinePass& other) const {
    return forward == other.forward && micro_batch == other.micro_batch && chunk == other.chunk;
  }
};

// The passes of each stage in the order it runs them: [stage][k], every
// (micro-batch, chunk) once forward and once backward. std::invalid_argument
// for a non-positive count, or for chunks > 1 with micro-batches not a
// multiple of the stages.
std::vector<std::vector<PipelinePass>> pipeline_schedule(int stages, int chunks, int micro_batches);

}  // namespace shardsim::workloads
