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
// N: forwards of chunk 0 for micro-batches 0..N-1, then chunk 1 for the
// same ones, ..., then the next group; backwards run the chunks in reverse.
// Stage s warms up with (p - s - 1) 2 + (v - 1) N forwards (at most all of
// them), so with N = p the bubble shrinks to (p - 1)/(v m). N is p unless
// told otherwise, as Megatron-Core's
// --microbatch-group-size-per-virtual-pipeline-stage tells it (Llama 3's
// tunable N, arXiv:2407.21783 section 3.3.2): N lies in [p, m] and the last
// group, which takes m mod N micro-batches when that is not 0, holds at least
// p (a smaller one would leave stages waiting on each other mid-step). A
// larger N lets m be other than a multiple of p, at the price of (v - 1)(N -
// p) more warm-up forwards held in memory on every stage. The order is
// Megatron-Core's (get_schedule_table, get_pp_rank_microbatches); the
// Megatron-LM of 2021 also ran every forward first on every stage when m =
// p, which Megatron-Core no longer does.
//
// unit_schedule is ZeroPP's (Tang et al. 2024, "ZeroPP: Unleashing
// Exceptional Parallelism Efficiency through Tensor-Parallelism-Free
// Methodology"; TECHNIQUES.md section 4): v chunks per stage in the same
// looping placement, the micro-batches taken in scheduling units of u, and
// the backward split into its input-gradient (B) and weight-gradient (W)
// halves, as zero-bubble pipelines split it (Qi et al. 2024). Inside a unit
// every stage runs a chunk's u forwards back to back (breadth-first), so a
// sharded chunk's parameters are gathered once for the unit's forwards and
// once for its backwards, and its gradients reduced once per unit. The order
// comes from list-scheduling the dependency graph with estimated pass times:
// whenever a stage is free it runs, of the passes ready, its next B (B is on
// the critical path between stages), else its next F, else its next W (W
// fills the bubbles). Forwards go in (unit, chunk, micro-batch) order and
// backwards in (unit, chunk descending, micro-batch) order; a stage holds the
// activations of at most one unit (u v chunk passes between an F and its W),
// the bound ZeroPP's units give. On the last chunk of the last stage F and B
// alternate, and W fills what is left: the paper's three phases (forward
// breadth-first, interleaved forward-backward on the last chunk, backward
// breadth-first) come out of these rules rather than being written out.
// max_pending_weight_passes > 0 also bounds the input-gradient passes
// whose W has not run: under full recompute a B rebuilds its chunk's layers
// and they stay until its W, so the compiler passes 1 (each W runs before
// the next B).
// With equal passes and u v >= 2 p the step takes (p - 1) t_F +
// m v (t_F + t_B + t_W): only the fill of the pipeline idles. Smaller units
// hold fewer activations and leave bubbles.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

// What a pass computes: the whole backward (1F1B schedules), or one of its
// halves (unit_schedule).
enum class PassKind { forward, backward, input_gradient, weight_gradient };

struct PipelinePass {
  PassKind kind = PassKind::forward;
  int micro_batch = 0;
  int chunk = 0;  // model chunk of the stage (0 without interleaving)

  bool forward() const { return kind == PassKind::forward; }
  bool operator==(const PipelinePass& other) const {
    return kind == other.kind && micro_batch == other.micro_batch && chunk == other.chunk;
  }
};

// Estimated seconds of one chunk's passes, for ordering them; only ratios
// matter.
struct PassSeconds {
  double forward = 1;
  double input_gradient = 1;
  double weight_gradient = 1;
};

// The passes of each stage in the order it runs them: [stage][k], every
// (micro-batch, chunk) once forward and once backward; `group` is N (0: the
// stages). std::invalid_argument for a non-positive count, or for chunks > 1
// with a group microbatch_group_problem refuses.
std::vector<std::vector<PipelinePass>> pipeline_schedule(int stages, int chunks, int micro_batches, int group = 0);

// One step of Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-
// comm; combined_1f1b.py): a forward, a backward, or the forward of one
// micro-batch and the backward of another written as one pass, layer by
// layer, so that each one's all-to-alls hide behind the other's compute
// (combined_1f1b.h).
struct CombinedStep {
  std::optional<PipelinePass> forward, backward;
};

// The 1F1B order with one forward more in the warm-up, which Megatron-Core
// adds so that a merged pair never holds both passes of one micro-batch;
// each forward of the steady state is merged with the backward after it.
// Without pipelining (one stage) that is the first forward alone, then
// forward i + 1 with backward i, then the last backward alone. With stages
// it needs interleaving (chunks > 1), as Megatron-Core asserts;
// std::invalid_argument otherwise, or for what pipeline_schedule refuses.
std::vector<std::vector<CombinedStep>> combined_1f1b_schedule(int stages, int chunks, int micro_batches, int group = 0);

// Why micro-batches cannot go through an interleaved schedule in groups of
// `group` (outside [stages, micro_batches], or a last group smaller than the
// stages); empty when they can.
std::string microbatch_group_problem(int stages, int micro_batches, int group);

// ZeroPP's order: every (micro-batch, chunk) once as forward, input_gradient
// and weight_gradient. `seconds` is [stage][chunk], or empty for equal
// passes. std::invalid_argument for a non-positive count, micro-batches not a
// multiple of the unit, or `seconds` of the wrong shape.
std::vector<std::vector<PipelinePass>> unit_schedule(int stages, int chunks, int micro_batches, int unit,
                                                     const std::vector<std::vector<PassSeconds>>& seconds = {},
                                                     int max_pending_weight_passes = 0);

}  // namespace shardsim::workloads
