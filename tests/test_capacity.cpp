// Capacity planning (sim/search/capacity_plan.h): each GPU count's row is
// the search's fastest plan at that count; days and GPU-hours are the token
// budget's steps times its step; the answers pick the rows the definitions
// pick, found here by scanning the rows.
#include "search_fixture.h"
#include "sim/search/capacity_plan.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

using namespace shardsim;
using test::TinySearch;

TEST_CASE("a token budget takes whole steps of the global batch", "[capacity]") {
  // 1e9 / 4194304 = 238.42: the last step is whole.
  CHECK(sim::steps_for_tokens(1e9, 4194304) == 239);
  CHECK(sim::steps_for_tokens(4194304.0 * 1000, 4194304) == 1000);
  CHECK(sim::steps_for_tokens(1, 4194304) == 1);
  CHECK_THROWS_AS(sim::steps_for_tokens(0, 4194304), std::invalid_argument);
  CHECK_THROWS_AS(sim::steps_for_tokens(-1, 4194304), std::invalid_argument);
  CHECK_THROWS_AS(sim::steps_for_tokens(std::numeric_limits<double>::infinity(), 4194304), std::invalid_argument);
  CHECK_THROWS_AS(sim::steps_for_tokens(1e9, 0), std::invalid_argument);
  // More steps than an int64_t holds is refused, not wrapped around.
  CHECK(sim::steps_for_tokens(0x1p61, 1) == std::int64_t{1} << 61);
  CHECK_THROWS_WITH(sim::steps_for_tokens(1e44, 4194304), Catch::Contains("more steps than shardsim counts"));
}

TEST_CASE("each count's row is the search's fastest plan, priced on the budget", "[capacity]") {
  TinySearch tiny;
  tiny.request.simulate = 4;
  tiny.request.simulate_pareto_front = false;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  const double tokens = 3e9;
  const sim::CapacityPlan plan = sim::plan_capacity(search, tiny.request, {16, 8}, sim::TrainingBudget{tokens, {}, {}});

  // 64 sequences of 1024 tokens a step: ceil(3e9 / 65536) = 45777 steps.
  const std::int64_t tokens_per_step = tiny.request.training.global_batch_tokens();
  REQUIRE(tokens_per_step == 65536);
  CHECK(plan.tokens_per_step == tokens_per_step);
  CHECK(plan.steps == 45777);

  REQUIRE(plan.rows.size() == 2);
  CHECK(plan.rows[0].gpus == 8);  // ascending, whatever the order asked
  CHECK(plan.rows[1].gpus == 16);
  for (const sim::CapacityRow& row : plan.rows) {
    INFO(row.gpus << " GPUs");
    sim::SearchRequest alone = tiny.request;
    alone.gpus = row.gpus;
    const sim::SearchResult result = search.run(alone);
    REQUIRE(!result.ranked.empty());
    REQUIRE(row.best.has_value());
    const std::size_t best = result.ranked.front();
    CHECK(row.best->index == best);
    CHECK(row.best->plan.name == result.candidates[best].plan.name);
    CHECK(row.candidates == result.candidates.size());
    CHECK(row.step.step_seconds == result.results[best].simulation->step_seconds);
    CHECK(row.training_seconds == Approx(45777 * row.step.step_seconds).epsilon(1e-12));
    // Interruptions at the default rates, on the model's 14 bytes a parameter.
    const double state_bytes = 14.0 * static_cast<double>(workloads::count_parameters(tiny.request.model).total());
    const sim::Goodput expected = sim::expected_goodput({}, row.gpus, state_bytes, row.training_seconds);
    CHECK(row.interruptions.ettr == Approx(expected.ettr).epsilon(1e-12));
    CHECK(row.interruptions.ettr < 1);
    CHECK(row.interruptions.wall_seconds == Approx(row.training_seconds / row.interruptions.ettr).epsilon(1e-12));
    CHECK(row.gpu_hours == Approx(row.gpus * row.interruptions.wall_seconds / 3600).epsilon(1e-12));
    // No plan at this count the search simulated beats it.
    for (std::size_t i : result.ranked) CHECK(result.results[i].simulation->step_seconds >= row.step.step_seconds);
  }

  // Strong scaling against the fewest GPUs: 1 for them, the throughput ratio after.
  CHECK(plan.scaling_efficiency(0) == 1);
  CHECK(plan.scaling_efficiency(1) ==
        Approx(plan.rows[1].step.tokens_per_gpu_per_second / plan.rows[0].step.tokens_per_gpu_per_second));

  // The answers, by scanning the rows.
  std::size_t cheapest = 0, fastest = 0;
  for (std::size_t i = 1; i < plan.rows.size(); ++i) {
    if (plan.rows[i].gpu_hours < plan.rows[cheapest].gpu_hours) cheapest = i;
    if (plan.rows[i].interruptions.wall_seconds < plan.rows[fastest].interruptions.wall_seconds) fastest = i;
  }
  CHECK(plan.cheapest == cheapest);
  CHECK(plan.fastest == fastest);
  CHECK_FALSE(plan.fewest_in_time.has_value());  // no deadline given
}

TEST_CASE("the fewest GPUs in time is the smallest count that finishes by the deadline", "[capacity]") {
  TinySearch tiny;
  tiny.request.simulate = 2;
  tiny.request.simulate_pareto_front = false;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  const double tokens = 1e9;
  const sim::CapacityPlan open = sim::plan_capacity(search, tiny.request, {8, 16}, sim::TrainingBudget{tokens, {}, {}});
  REQUIRE(open.rows.size() == 2);
  const double on_8 = open.rows[0].interruptions.wall_seconds, on_16 = open.rows[1].interruptions.wall_seconds;
  REQUIRE(on_16 < on_8);  // 16 GPUs train the fixed batch faster

  const auto fewest = [&](double deadline) {
    return sim::plan_capacity(search, tiny.request, {8, 16}, sim::TrainingBudget{tokens, deadline, {}}).fewest_in_time;
  };
  CHECK(fewest(on_8) == std::optional<std::size_t>(0));          // exactly on time counts
  CHECK(fewest((on_8 + on_16) / 2) == std::optional<std::size_t>(1));
  CHECK(fewest(on_16 / 2) == std::nullopt);                      // nothing is that fast
  CHECK_THROWS_AS(fewest(0), std::invalid_argument);
}

TEST_CASE("a job on more GPUs fails more often, so it keeps less of its wall time", "[capacity]") {
  TinySearch tiny;
  tiny.request.simulate = 2;
  tiny.request.simulate_pareto_front = false;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  sim::TrainingBudget budget{1e9, {}, {}};
  budget.reliability.failures_per_gpu_day = 0.05;  // a job of 8 fails every 2.4 days
  const sim::CapacityPlan plan = sim::plan_capacity(search, tiny.request, {8, 16}, budget);
  REQUIRE(plan.rows.size() == 2);
  CHECK(plan.rows[1].interruptions.job_failures_per_second == Approx(2 * plan.rows[0].interruptions.job_failures_per_second));
  CHECK(plan.rows[1].interruptions.ettr < plan.rows[0].interruptions.ettr);

  budget.reliability.failures_per_gpu_day = 0;
  const sim::CapacityPlan reliable = sim::plan_capacity(search, tiny.request, {8, 16}, budget);
  for (const sim::CapacityRow& row : reliable.rows) {
    CHECK(row.interruptions.ettr == 1);
    CHECK(row.interruptions.wall_seconds == row.training_seconds);
    CHECK(row.gpu_hours == Approx(row.gpus * row.training_seconds / 3600).epsilon(1e-12));
  }
  budget.reliability.restart_seconds = -1;
  CHECK_THROWS_WITH(sim::plan_capacity(search, tiny.request, {8}, budget), Catch::Contains("restart seconds"));
}

TEST_CASE("counts without a plan say why, and counts the cluster cannot hold are refused", "[capacity]") {
  TinySearch starved(1e6);  // 1 MB a GPU: nothing fits
  sim::PlanSearch none(*starved.cluster, *starved.router, starved.profile);
  const sim::CapacityPlan empty = sim::plan_capacity(none, starved.request, {16}, sim::TrainingBudget{1e9, {}, {}});
  REQUIRE(empty.rows.size() == 1);
  CHECK_FALSE(empty.rows[0].best.has_value());
  CHECK_FALSE(empty.fastest.has_value());
  CHECK_FALSE(empty.cheapest.has_value());
  CHECK(empty.scaling_efficiency(0) == 0);
  // What the least hungry candidate needs, by the memory model.
  starved.request.gpus = 16;
  double least = std::numeric_limits<double>::infinity();
  for (const sim::Candidate& c : sim::enumerate_candidates(starved.request.space, starved.request.model,
                                                           starved.request.training, *starved.cluster, 16)) {
    least = std::min(least, workloads::estimate_step_memory(sim::step_config(starved.request.model, c, 8)).memory.total());
  }
  CHECK(empty.rows[0].smallest_memory_bytes == least);

  // No micro-batch size of 3 splits 64 sequences over 16 GPUs' replicas.
  TinySearch odd;
  odd.request.space.micro_batch_sizes = {3};
  sim::PlanSearch search(*odd.cluster, *odd.router, odd.profile);
  const sim::CapacityPlan split = sim::plan_capacity(search, odd.request, {16}, sim::TrainingBudget{1e9, {}, {}});
  CHECK(split.rows[0].no_plan_reason.find("micro-batches") != std::string::npos);

  const auto refusal = [&](int gpus) {
    try {
      sim::plan_capacity(search, odd.request, {8, gpus}, sim::TrainingBudget{1e9, {}, {}});
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal(12).find("12 GPUs") != std::string::npos);
  CHECK(refusal(12).find("whole nodes") != std::string::npos);
  CHECK(refusal(32).find("32 GPUs") != std::string::npos);
}

TEST_CASE("the default counts double from one node to the whole cluster", "[capacity]") {
  TinySearch tiny;
  CHECK(sim::default_gpu_counts(*tiny.cluster) == std::vector<int>{8, 16});
  const topology::Cluster large(topology::load_cluster_spec("dgx-a100-1024"));
  CHECK(sim::default_gpu_counts(large) == std::vector<int>{8, 16, 32, 64, 128, 256, 512, 1024});
}
