// CapacityPlan: how many GPUs, and how long? For each GPU count, the fastest
// plan that fits (PlanSearch), and what a token budget costs with it: steps,
// wall time and GPU-hours; then the fewest GPUs that finish by a deadline,
// the count that spends the fewest GPU-hours, and the fastest.
//
// The global batch stays the training config's at every count: it is a
// hyperparameter of the run, not a systems choice. More GPUs then means fewer
// micro-batches per GPU (and, below one sequence per GPU, sequence or context
// parallelism), so past some count a step stops getting shorter. Wall times
// add what interruptions cost at the count (sim/search/interruptions.h): a job
// on more GPUs fails more often, so GPU-hours grow past the step's scaling.
// Evaluation is not in them.
#pragma once

#include "sim/search/interruptions.h"
#include "sim/search/plan_search.h"
#include "sim/search/training_time.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::sim {

struct TrainingBudget {
  double tokens = 0;                       // to train on
  std::optional<double> deadline_seconds;  // wall time the training must fit in
  ReliabilityInputs reliability;           // what interrupts it
};

struct CapacityRow {
  int gpus = 0;
  std::size_t candidates = 0;         // plans the search enumerated
  std::optional<Candidate> best;      // none when no plan fits or none exists
  SimulatedStep step;                 // best's, on the flow network
  double training_seconds = 0;        // the budget's steps x step time
  Goodput interruptions;              // their cost to it: wall time, ETTR, checkpoint interval
  double gpu_hours = 0;               // gpus x the wall time / 3600: what the job holds
  double smallest_memory_bytes = 0;   // what the least hungry plan needs (memory model)
  std::string no_plan_reason;         // why no plan exists at this count (batch does not split)
};

struct CapacityPlan {
  TrainingBudget budget;
  std::int64_t tokens_per_step = 0;
  std::int64_t steps = 0;
  std::vector<CapacityRow> rows;             // ascending GPU counts
  std::optional<std::size_t> fewest_in_time;  // fewest GPUs whose wall time meets the deadline
  std::optional<std::size_t> cheapest;        // fewest GPU-hours (ties: fewer GPUs)
  std::optional<std::size_t> fastest;         // shortest wall time (ties: fewer GPUs)

  // Tokens per second per GPU at `row` over that of the fewest GPUs with a
  // plan: 1 is perfect strong scaling. 0 for a row without a plan.
  double scaling_efficiency(std::size_t row) const;
};

// Runs `search` over every count of `gpu_counts` with `request`'s model,
// training and space (request.gpus is ignored). Each count must be a job the
// search's cluster can hold (std::invalid_argument naming it otherwise); a count whose
// batch leaves no plan at all gets a row saying why.
CapacityPlan plan_capacity(PlanSearch& search, SearchRequest request, std::vector<int> gpu_counts, const TrainingBudget& budget, const WorkShare& share = {},
                           SearchProgress* progress = nullptr);

// One node's GPUs, doubling, up to the whole cluster (always included).
std::vector<int> default_gpu_counts(const topology::Cluster& cluster);

}  // namespace shardsim::sim
