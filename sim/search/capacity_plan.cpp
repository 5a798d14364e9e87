#include "sim/search/capacity_plan.h"

#include "topology/placement.h"

#include <algorithm>
#include <stdexcept>

namespace shardsim::sim {

namespace {

// Names each phase of one count's search after the count.
class CountProgress : public SearchProgress {
 public:
  CountProgress(SearchProgress* inner, int gpus) : inner_(inner), gpus_(gpus) {}
  void phase(const std::string& label, std::size_t total) override {
    inner_->phase(std::to_string(gpus_) + " GPUs: " + label, total);
  }
  void advance() override { inner_->advance(); }

 private:
  SearchProgress* inner_;
  int gpus_;
};

// The row with the least `key` among those with a plan; ties go to the
// earlier row, which has fewer GPUs.
template <typename Key>
std::optional<std::size_t> least(const std::vector<CapacityRow>& rows, Key key) {
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].best && (!found || key(rows[i]) < key(rows[*found]))) found = i;
  }
  return found;
}

}  // namespace

double CapacityPlan::scaling_efficiency(std::size_t row) const {
  const auto first = std::find_if(rows.begin(), rows.end(), [](const CapacityRow& r) { return r.best.has_value(); });
  if (first == rows.end() || !rows[row].best) return 0;
  return rows[row].step.tokens_per_gpu_per_second / first->step.tokens_per_gpu_per_second;
}

CapacityPlan plan_capacity(PlanSearch& search, SearchRequest request, std::vector<int> gpu_counts, const TrainingBudget& budget, const WorkShare& share,
                           SearchProgress* progress) {
  if (gpu_counts.empty()) throw std::invalid_argument("no GPU counts to plan for");
  std::sort(gpu_counts.begin(), gpu_counts.end());
  gpu_counts.erase(std::unique(gpu_counts.begin(), gpu_counts.end()), gpu_counts.end());
  // Refused before any search runs; the reason names the count.
  for (int gpus : gpu_counts) topology::place_ranks(search.cluster(), gpus, topology::PlacementPolicy::consecutive);
  if (budget.deadline_seconds && !(*budget.deadline_seconds > 0)) {
    throw std::invalid_argument("the deadline must be a positive time");
  }

  CapacityPlan plan;
  plan.budget = budget;
  plan.tokens_per_step = request.training.global_batch_tokens();
  plan.steps = steps_for_tokens(budget.tokens, plan.tokens_per_step);
  const double checkpoint_bytes = training_state_bytes(request.model, request.training);
  check_reliability_inputs(budget.reliability);  // before any search runs, as bad counts are
  for (int gpus : gpu_counts) {
    CapacityRow row;
    row.gpus = gpus;
    request.gpus = gpus;
    SearchResult result;
    try {
      CountProgress named(progress, gpus);
      result = search.run(request, share, progress ? &named : nullptr);
    } catch (const std::invalid_argument& e) {
      // The cluster holds the count (checked above): the batch leaves no plan.
      row.no_plan_reason = e.what();
      plan.rows.push_back(std::move(row));
      continue;
    }
    row.candidates = result.candidates.size();
    row.smallest_memory_bytes = result.results[result.smallest].memory.total();
    if (!result.ranked.empty()) {
      const std::size_t best = result.ranked.front();
      row.best = result.candidates[best];
      row.step = *result.results[best].simulation;
      const TrainingTime time = training_time(budget.tokens, plan.tokens_per_step, row.step.step_seconds, gpus);
      row.training_seconds = time.seconds;
      row.interruptions = expected_goodput(budget.reliability, gpus, checkpoint_bytes, time.seconds);
      row.gpu_hours = gpus * row.interruptions.wall_seconds / kSecondsPerHour;
    }
    plan.rows.push_back(std::move(row));
  }

  if (budget.deadline_seconds) {
    for (std::size_t i = 0; i < plan.rows.size(); ++i) {
      if (plan.rows[i].best && plan.rows[i].interruptions.wall_seconds <= *budget.deadline_seconds) {
        plan.fewest_in_time = i;
        break;
      }
    }
  }
  plan.cheapest = least(plan.rows, [](const CapacityRow& r) { return r.gpu_hours; });
  plan.fastest = least(plan.rows, [](const CapacityRow& r) { return r.interruptions.wall_seconds; });
  return plan;
}

std::vector<int> default_gpu_counts(const topology::Cluster& cluster) {
  std::vector<int> counts;
  for (int gpus = cluster.gpus_per_node(); gpus < cluster.gpu_count(); gpus *= 2) counts.push_back(gpus);
  counts.push_back(cluster.gpu_count());
  return counts;
}

}  // namespace shardsim::sim
