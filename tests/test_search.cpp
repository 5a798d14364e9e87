// The sharding search (sim/search): its estimate against the simulator, the
// optimum against exhaustive simulation, memory rejections against the memory
// model, and bad GPU counts.
#include "calib/profile.h"
#include "sim/search/plan_search.h"
#include "sim/step/step_simulator.h"
#include "topology/cluster.h"
#include "topology/json_input.h"
#include "topology/routing.h"
#include "workloads/job_scale.h"
#include "workloads/memory_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>

using namespace shardsim;

namespace {

struct TinySearch {
  topology::ClusterSpec spec = topology::load_cluster_spec("dgx-a100-2node");
  std::unique_ptr<topology::Cluster> cluster;
  std::unique_ptr<topology::Router> router;
  calib::Profile profile = calib::load_profile("a100");
  sim::SearchRequest request;

  explicit TinySearch(double memory_limit_bytes = 0) {
    if (memory_limit_bytes > 0) spec.node.gpu_memory_bytes = memory_limit_bytes;
    cluster = std::make_unique<topology::Cluster>(spec);
    router = std::make_unique<topology::Router>(*cluster);
    request.gpus = 16;
    request.model = workloads::load_model("llama-7b");
    request.training = workloads::load_training_config("seq4096-mbs1-4m-tokens");
    // A 4-layer LLaMA-7B-wide model, 64 sequences of 1024 tokens per step.
    workloads::apply_job_scale(workloads::parse_job_scale("layers=4,seq=1024,micro_batches=4"), 16, request.model,
                               request.training);
    request.space.micro_batch_sizes = {1, 2};
    request.space.recompute = {workloads::Recompute::none, workloads::Recompute::full};
    request.space.bucket_bytes = {1e8, 1e9};
    request.space.placements = {topology::PlacementPolicy::consecutive};
  }
};

}  // namespace

TEST_CASE("the mirrored estimate equals the analytical simulation of every rank on congruent groups", "[search]") {
  TinySearch tiny;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  const auto candidates = sim::enumerate_candidates(tiny.request.space, tiny.request.training, *tiny.cluster, 16);
  for (const char* name : {"zero3", "amsp-2-4-16", "mics-8", "zeropp-hpz8", "zero1"}) {
    const auto found = std::find_if(candidates.begin(), candidates.end(),
                                    [&](const sim::Candidate& c) { return c.plan.name == name; });
    REQUIRE(found != candidates.end());
    const workloads::Program program = search.compile(tiny.request, *found);
    const sim::StepEstimate estimate = search.estimate(program, *found);
    sim::StepSimulationOptions options;
    options.network = sim::NetworkMode::analytical;
    const sim::StepTimeline all_ranks = sim::simulate_step(program, *tiny.cluster, *tiny.router, tiny.profile, options);
    INFO(name);
    CHECK(estimate.step_seconds == seconds_from_picoseconds(all_ranks.step_time));
    CHECK(estimate.peak_memory_bytes == all_ranks.peak_memory.front().total_bytes);
  }
}

TEST_CASE("the search finds the optimum that simulating every plan finds", "[search]") {
  TinySearch tiny;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  tiny.request.simulate = std::numeric_limits<std::size_t>::max();
  const sim::SearchResult exhaustive = search.run(tiny.request);
  REQUIRE(exhaustive.simulated == exhaustive.estimated);  // every plan in memory simulated
  REQUIRE(!exhaustive.ranked.empty());
  // The true optimum, by brute force over the flow simulations.
  std::size_t best = exhaustive.ranked.front();
  for (std::size_t i = 0; i < exhaustive.results.size(); ++i) {
    const auto& s = exhaustive.results[i].simulation;
    if (s && !s->out_of_memory && s->step_seconds < exhaustive.results[best].simulation->step_seconds) best = i;
  }
  CHECK(best == exhaustive.ranked.front());

  // Where the estimate put the optimum: the pre-filter keeps it as long as
  // its top-K reaches that far.
  std::vector<std::size_t> by_estimate;
  for (std::size_t i = 0; i < exhaustive.results.size(); ++i) {
    if (exhaustive.results[i].estimate && !exhaustive.results[i].estimate->out_of_memory) by_estimate.push_back(i);
  }
  std::stable_sort(by_estimate.begin(), by_estimate.end(), [&](std::size_t a, std::size_t b) {
    return exhaustive.results[a].estimate->step_seconds < exhaustive.results[b].estimate->step_seconds;
  });
  const auto position = static_cast<std::size_t>(std::find(by_estimate.begin(), by_estimate.end(), best) - by_estimate.begin());
  INFO("the optimum is number " << position + 1 << " of " << by_estimate.size() << " by the estimate");
  CHECK(position < 16);

  tiny.request.simulate = 16;
  const sim::SearchResult pruned = search.run(tiny.request);
  CHECK(pruned.ranked.front() == best);
  CHECK(pruned.simulated < exhaustive.simulated);
}

TEST_CASE("memory rejections are the memory model's, and a limit below every plan leaves nothing", "[search]") {
  TinySearch probe;
  sim::PlanSearch unlimited(*probe.cluster, *probe.router, probe.profile);
  probe.request.simulate = 1;
  const auto all = unlimited.run(probe.request);
  std::vector<double> totals;
  for (const auto& r : all.results) totals.push_back(r.memory.total());
  std::sort(totals.begin(), totals.end());
  const double limit = totals[totals.size() / 2];

  TinySearch tiny(limit);
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  tiny.request.simulate = 4;
  const sim::SearchResult result = search.run(tiny.request);
  std::size_t rejected = 0;
  for (const sim::Candidate& c : result.candidates) {
    const auto& r = result.results[c.index];
    const auto memory = workloads::estimate_memory(tiny.request.model, c.training, c.plan, c.factors, 16);
    CHECK(r.memory.total() == memory.total());
    CHECK(r.fits == (memory.total() <= limit));
    CHECK(r.estimate.has_value() == r.fits);
    rejected += r.fits ? 0 : 1;
    // ZeRO-3's model states are 16 Psi / N (TECHNIQUES.md section 1).
    if (c.plan.name == "zero3") {
      const double psi = static_cast<double>(workloads::count_parameters(tiny.request.model).total());
      CHECK(memory.model_states() == 16 * psi / 16);
    }
  }
  // The same candidates as the unlimited run: exactly those above the limit are rejected.
  REQUIRE(result.candidates.size() == totals.size());
  CHECK(rejected == static_cast<std::size_t>(std::count_if(totals.begin(), totals.end(), [&](double t) { return t > limit; })));
  CHECK(rejected >= 1);
  for (std::size_t i : result.ranked) CHECK(result.results[i].simulation->peak_memory_bytes <= limit);

  TinySearch starved(1e6);
  sim::PlanSearch none(*starved.cluster, *starved.router, starved.profile);
  const sim::SearchResult nothing = none.run(starved.request);
  CHECK(nothing.ranked.empty());
  CHECK(nothing.estimated == 0);
  for (const auto& r : nothing.results) CHECK(r.memory.total() >= nothing.results[nothing.smallest].memory.total());
}

TEST_CASE("the Pareto front holds no plan beaten on both memory and time", "[search]") {
  TinySearch tiny;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  const sim::SearchResult result = search.run(tiny.request);
  REQUIRE(!result.pareto.empty());
  for (std::size_t i : result.pareto) {
    const auto& a = *result.results[i].simulation;
    for (std::size_t j : result.ranked) {
      const auto& b = *result.results[j].simulation;
      const bool dominates = b.peak_memory_bytes <= a.peak_memory_bytes && b.step_seconds <= a.step_seconds &&
                             (b.peak_memory_bytes < a.peak_memory_bytes || b.step_seconds < a.step_seconds);
      CHECK_FALSE(dominates);
    }
  }
  // The fastest plan is on the front unless a plan as fast needs less memory.
  CHECK(result.results[result.pareto.back()].simulation->step_seconds ==
        result.results[result.ranked.front()].simulation->step_seconds);
}

TEST_CASE("impossible GPU counts are refused with the reason", "[search]") {
  TinySearch tiny;
  const auto throws_for = [&](int gpus) {
    try {
      sim::enumerate_candidates(tiny.request.space, tiny.request.training, *tiny.cluster, gpus);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(throws_for(12).find("whole nodes") != std::string::npos);
  CHECK(throws_for(32).find("1 to 16 GPUs") != std::string::npos);
  CHECK(throws_for(0).find("1 to 16 GPUs") != std::string::npos);
  tiny.request.space.micro_batch_sizes = {3};
  CHECK(throws_for(16).find("not a whole number of micro-batches") != std::string::npos);
}

TEST_CASE("the plan space follows the dependency rule and the mesh filter", "[search]") {
  CHECK(sim::mesh_factors(64, 8) == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
  CHECK(sim::mesh_factors(24, 8) == std::vector<int>{1, 2, 4, 8, 24});
  TinySearch tiny;
  tiny.request.space.named_systems = false;
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  tiny.request.space.bucket_bytes = {1e9};
  const auto candidates = sim::enumerate_candidates(tiny.request.space, tiny.request.training, *tiny.cluster, 16);
  // Factors 1, 2, 4, 8, 16: every non-decreasing triple of powers of two
  // divides the next, C(5 + 2, 3) = 35 of them.
  CHECK(candidates.size() == 35);
  for (const auto& c : candidates) {
    CHECK(c.factors.parameters <= c.factors.gradients);
    CHECK(c.factors.gradients % c.factors.parameters == 0);
    CHECK(c.factors.optimizer % c.factors.gradients == 0);
  }
}
