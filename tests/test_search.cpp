// The sharding search (sim/search): its estimate against the simulator, the
// optimum against exhaustive simulation, memory rejections against the memory
// model, and bad GPU counts.
#include "calib/profile.h"
#include "search_fixture.h"
#include "sim/search/plan_search.h"
#include "sim/step/step_simulator.h"
#include "topology/base/json_input.h"
#include "topology/cluster.h"
#include "topology/routing.h"
#include "workloads/compile/model_parallel_step.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/compile/zero_pipeline_step.h"
#include "workloads/inputs/job_scale.h"
#include "workloads/inputs/pipeline_split.h"
#include "workloads/inputs/plan.h"
#include "workloads/memory/memory_model.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

using namespace shardsim;
using test::TinySearch;

TEST_CASE("the mirrored estimate equals the analytical simulation of every rank on congruent groups", "[search]") {
  TinySearch tiny;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  const auto candidates = sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, 16);
  for (const char* name : {"zero3", "amsp-2-4-16", "mics-8", "zeropp-hpz8", "zero1"}) {
    const auto found = std::find_if(candidates.begin(), candidates.end(),
                                    [&](const sim::Candidate& c) { return c.plan.name == name; });
    REQUIRE(found != candidates.end());
    const workloads::Program program = search.compile(tiny.request, *found);
    const sim::StepEstimate estimate = search.estimate(program, *found);
    sim::StepSimulationOptions options;
    options.network = sim::NetworkMode::analytical;
    const workloads::Timeline all_ranks = sim::simulate(program, *tiny.cluster, *tiny.router, tiny.profile, options);
    INFO(name);
    CHECK(estimate.step_seconds == seconds_from_picoseconds(all_ranks.step_time));
    CHECK(estimate.peak_memory_bytes == all_ranks.peak_memory.front().total_bytes);
  }
}

TEST_CASE("on a pipeline, the estimate plays one rank per stage and equals the analytical simulation of every rank",
          "[search]") {
  TinySearch tiny;
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);
  workloads::ModelSpec model = tiny.request.model;
  model.layers = 8;
  // (plan, data-parallel size): 16 GPUs each.
  const std::vector<std::pair<const char*, int>> plans = {
      {"megatron-tp4-pp4", 1},
      {"megatron-tp8-pp8-interleaved", 1},
      {"megatron-tp8-pp8-tp-overlap", 1},
      {"zero-pipeline-pp4", 4}};
  for (const auto& [name, data_parallel] : plans) {
    workloads::StepConfig config;
    config.model = model;
    config.training = tiny.request.training;
    config.plan = workloads::load_plan(name);
    if (config.plan.model_parallel.pipeline == 8) config.plan.model_parallel.pipeline = 2;  // 8 layers, 2 x 2 chunks
    if (config.plan.system == workloads::ShardingSystem::zero_pipeline) config.plan.factors = {4, 4, 4};
    config.data_parallel = data_parallel;
    const workloads::Program program = workloads::compile(config);
    REQUIRE(program.ranks == 16);
    sim::Candidate candidate;
    candidate.placement = std::make_shared<const topology::Placement>(
        topology::place_ranks(*tiny.cluster, 16, topology::PlacementPolicy::consecutive));
    sim::StepSimulationOptions options;
    options.network = sim::NetworkMode::analytical;
    options.mirror_ranks = true;
    const workloads::Timeline mirrored = sim::simulate(program, *tiny.cluster, *tiny.router, tiny.profile, options);
    options.mirror_ranks = false;
    const workloads::Timeline all_ranks = sim::simulate(program, *tiny.cluster, *tiny.router, tiny.profile, options);
    INFO(name);
    // Played: one rank per stage, the first of each.
    const int stages = config.plan.model_parallel.pipeline;
    const int per_stage = 16 / stages;
    for (int rank = 0; rank < 16; ++rank) {
      const bool played = rank % per_stage == 0;
      INFO("rank " << rank);
      CHECK(mirrored.ops[static_cast<std::size_t>(rank)].empty() == !played);
      if (played) CHECK(mirrored.ops[static_cast<std::size_t>(rank)] == all_ranks.ops[static_cast<std::size_t>(rank)]);
    }
    CHECK(mirrored.step_time == all_ranks.step_time);
    CHECK(mirrored.spine_bytes == Approx(all_ranks.spine_bytes).epsilon(1e-12));
    const sim::StepEstimate estimate = search.estimate(program, candidate);
    CHECK(estimate.step_seconds == seconds_from_picoseconds(all_ranks.step_time));
    double fullest = 0;
    for (const auto& peak : all_ranks.peak_memory) fullest = std::max(fullest, peak.total_bytes);
    CHECK(estimate.peak_memory_bytes == fullest);
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
    workloads::MemoryBreakdown memory;
    if (c.plan.system == workloads::ShardingSystem::megatron || c.plan.system == workloads::ShardingSystem::zero_pipeline) {
      // The fullest stage's.
      const auto config = sim::step_config(tiny.request.model, c, 8);
      const auto stages = c.plan.system == workloads::ShardingSystem::megatron ? workloads::estimate_stage_memory(config)
                                                                                : workloads::estimate_zero_pipeline_memory(config);
      for (const auto& stage : stages) {
        if (stage.total() > memory.total()) memory = stage;
      }
    } else {
      memory = workloads::estimate_memory(tiny.request.model, c.training, c.plan, c.factors, 16);
    }
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

TEST_CASE("a search on several threads gives every candidate the numbers a lone thread gives it", "[search]") {
  TinySearch tiny;  // its space holds pipelines too: the largest programs
  sim::PlanSearch lone(*tiny.cluster, *tiny.router, tiny.profile);
  const sim::SearchResult serial = lone.run(tiny.request);
  // A fresh search, so no thread starts with choices another run left behind.
  sim::PlanSearch threaded(*tiny.cluster, *tiny.router, tiny.profile);
  sim::WorkShare share;
  share.threads = 3;
  const sim::SearchResult parallel = threaded.run(tiny.request, share);
  REQUIRE(serial.results.size() == parallel.results.size());
  REQUIRE(serial.simulated > 3);
  CHECK(serial.ranked == parallel.ranked);
  CHECK(serial.pareto == parallel.pareto);
  for (std::size_t i = 0; i < serial.results.size(); ++i) {
    const auto& a = serial.results[i];
    const auto& b = parallel.results[i];
    INFO(sim::describe(serial.candidates[i]));
    CHECK(a.memory.total() == b.memory.total());
    REQUIRE(a.estimate.has_value() == b.estimate.has_value());
    if (a.estimate) {
      CHECK(a.estimate->step_seconds == b.estimate->step_seconds);
      CHECK(a.estimate->peak_memory_bytes == b.estimate->peak_memory_bytes);
      CHECK(a.estimate->exposed_communication_seconds == b.estimate->exposed_communication_seconds);
    }
    REQUIRE(a.simulation.has_value() == b.simulation.has_value());
    if (a.simulation) {
      CHECK(a.simulation->step_seconds == b.simulation->step_seconds);
      CHECK(a.simulation->exposed_communication_seconds == b.simulation->exposed_communication_seconds);
      CHECK(a.simulation->spine_bytes == b.simulation->spine_bytes);
    }
  }
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
      sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, gpus);
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
  tiny.request.space.families = {"amsp"};
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  tiny.request.space.bucket_bytes = {1e9};
  tiny.request.space.ulysses = {1};
  const auto candidates = sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, 16);
  // Factors 1, 2, 4, 8, 16: every non-decreasing triple of powers of two
  // divides the next, C(5 + 2, 3) = 35 of them.
  CHECK(candidates.size() == 35);
  for (const auto& c : candidates) {
    CHECK(c.factors.parameters <= c.factors.gradients);
    CHECK(c.factors.gradients % c.factors.parameters == 0);
    CHECK(c.factors.optimizer % c.factors.gradients == 0);
  }
}

TEST_CASE("a MoE model's data-parallel plans are tried under each expert parallelism, in both layouts, "
          "Megatron-LM's in its own", "[search]") {
  TinySearch tiny;
  tiny.request.space.families = {"named", "megatron", "zero-pipeline"};
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  tiny.request.space.bucket_bytes = {1e9};
  tiny.request.space.ulysses = {1};
  struct Seen {
    std::map<std::pair<int, std::string>, int> data_parallel;  // (expert parallelism, layout) -> candidates
    std::map<std::pair<std::string, int>, int> pipelines;      // (system, expert parallelism) -> candidates
    int megatron_on_8_gpu_stages = 0;  // Megatron-LM on stages of a multiple of 8 GPUs
  };
  const auto count = [&](const workloads::ModelSpec& model) {
    Seen seen;
    for (const auto& c : sim::enumerate_candidates(tiny.request.space, model, tiny.request.training, *tiny.cluster, 16)) {
      const int ep = c.plan.experts.parallel;
      if (c.plan.model_parallel.any()) {
        if (ep > 1) {
          // Megatron-Core's order and its recommended dispatcher.
          CHECK(c.plan.experts.layout == topology::MoeLayout::expert_data);
          CHECK(c.plan.experts.dispatcher == workloads::TokenDispatcher::all_to_all);
          CHECK(c.plan.name.find("+ep" + std::to_string(ep)) != std::string::npos);
          // The combined 1F1B where Megatron-Core allows it, else shared
          // experts, where there are any, beside the dispatch.
          const auto& mp = c.plan.model_parallel;
          const bool combined =
              (mp.pipeline == 1 || mp.virtual_stages > 1) && c.training.recompute != workloads::Recompute::full;
          CHECK(c.plan.experts.overlap_expert_parallel_comm == combined);
          CHECK(c.plan.experts.delay_wgrad_compute == combined);
          CHECK(c.plan.experts.shared_expert_overlap == (!combined && model.moe.shared_experts > 0));
        }
        ++seen.pipelines[{workloads::to_string(c.plan.system), ep}];
        const bool stage_of_8 = 16 / c.plan.model_parallel.pipeline % 8 == 0;
        seen.megatron_on_8_gpu_stages += ep == 1 && stage_of_8 && c.plan.system == workloads::ShardingSystem::megatron;
        continue;
      }
      ++seen.data_parallel[{ep, std::string(topology::to_string(c.plan.experts.layout))}];
    }
    return seen;
  };
  const Seen dense = count(tiny.request.model);
  REQUIRE(dense.data_parallel.size() == 1);
  workloads::ModelSpec moe = tiny.request.model;
  moe.has_moe = true;
  moe.moe = {8, 2, 1024, 0, 0, 0};
  const Seen by_experts = count(moe);
  workloads::ModelSpec shared = moe;
  shared.moe.shared_experts = 1;
  shared.moe.shared_expert_ffn_hidden = 1024;
  REQUIRE(count(shared).pipelines == by_experts.pipelines);
  const int systems = dense.data_parallel.begin()->second;
  // By default 1 and the node's 8 GPUs, the latter in E+D and in D+E.
  REQUIRE(by_experts.data_parallel == std::map<std::pair<int, std::string>, int>{
                                          {{1, "E+D"}, systems}, {{8, "E+D"}, systems}, {{8, "D+E"}, systems}});
  // The pipelines with their experts local, and Megatron-LM's also over 8
  // GPUs where a stage has a multiple of 8.
  const int megatron = dense.pipelines.at({"megatron", 1}), zero_pipeline = dense.pipelines.at({"zero_pipeline", 1});
  REQUIRE(dense.megatron_on_8_gpu_stages > 0);
  REQUIRE(by_experts.pipelines == std::map<std::pair<std::string, int>, int>{{{"megatron", 1}, megatron},
                                                                             {{"megatron", 8}, dense.megatron_on_8_gpu_stages},
                                                                             {{"zero_pipeline", 1}, zero_pipeline}});
  tiny.request.space.expert_parallel = {2, 16};  // 16 does not divide 8 experts
  const Seen chosen = count(moe);
  REQUIRE(chosen.data_parallel ==
          std::map<std::pair<int, std::string>, int>{{{2, "E+D"}, systems}, {{2, "D+E"}, systems}});
  REQUIRE(chosen.pipelines.count({"megatron", 2}) == 1);
  REQUIRE(chosen.pipelines.count({"megatron", 1}) == 0);
}

TEST_CASE("the data-parallel plans are tried under DeepSpeed-Ulysses, the batch split over GPUs / u replicas",
          "[search][ulysses]") {
  TinySearch tiny;  // 16 GPUs, 8 per node; 64 sequences of 1024 tokens per step
  tiny.request.space.families = {"named"};
  tiny.request.space.recompute = {workloads::Recompute::none};
  tiny.request.space.bucket_bytes = {1e9};
  using Key = std::pair<int, std::int64_t>;  // (Ulysses degree, micro-batch size)
  const auto accumulation_by_degree = [&](const workloads::ModelSpec& model, const workloads::TrainingConfig& training) {
    std::map<Key, std::set<std::int64_t>> seen;
    std::map<int, int> plans;
    for (const auto& c : sim::enumerate_candidates(tiny.request.space, model, training, *tiny.cluster, 16)) {
      const int u = c.plan.model_parallel.ulysses;
      REQUIRE(c.data_parallel == 16);  // the model states shard over every GPU whatever u is
      REQUIRE((u == 1) == (c.plan.name.find("+ulysses") == std::string::npos));
      seen[{u, c.training.micro_batch_size}].insert(c.accumulation);
      ++plans[u];
    }
    return std::pair{seen, plans};
  };
  SECTION("by default only 1 when every GPU has sequences of its own") {
    const auto [seen, plans] = accumulation_by_degree(tiny.request.model, tiny.request.training);
    REQUIRE(seen == std::map<Key, std::set<std::int64_t>>{{{1, 1}, {4}}, {{1, 2}, {2}}});
  }
  SECTION("asked for, every system under each degree") {
    tiny.request.space.ulysses = {1, 8};
    const auto [seen, plans] = accumulation_by_degree(tiny.request.model, tiny.request.training);
    // 64 sequences over 16 replicas (u = 1) or 2 (u = 8), micro-batches of 1 or 2.
    REQUIRE(seen == std::map<Key, std::set<std::int64_t>>{
                        {{1, 1}, {4}}, {{1, 2}, {2}}, {{8, 1}, {32}}, {{8, 2}, {16}}});
    REQUIRE(plans.at(1) == plans.at(8));
  }
  SECTION("a batch of fewer sequences than GPUs finds plans through Ulysses, by default") {
    workloads::TrainingConfig long_context = tiny.request.training;
    long_context.sequence_length = 8192;
    long_context.global_batch_sequences = 8;
    const auto [seen, plans] = accumulation_by_degree(tiny.request.model, long_context);
    REQUIRE(seen == std::map<Key, std::set<std::int64_t>>{{{8, 1}, {4}}, {{8, 2}, {2}}});
    tiny.request.space.ulysses = {1};
    REQUIRE_THROWS_WITH(
        sim::enumerate_candidates(tiny.request.space, tiny.request.model, long_context, *tiny.cluster, 16),
        Catch::Contains("not a whole number of micro-batches"));
  }
  SECTION("degrees the heads, key/value heads or GPUs do not split are left out") {
    workloads::ModelSpec grouped = tiny.request.model;
    grouped.kv_heads = 4;  // 4 key/value heads over 8 GPUs
    tiny.request.space.ulysses = {1, 3, 4, 8};  // 3 divides neither 16 GPUs nor 32 heads
    const auto [seen, plans] = accumulation_by_degree(grouped, tiny.request.training);
    REQUIRE(plans.size() == 2);
    REQUIRE(plans.count(4) == 1);
    REQUIRE(plans.at(4) == plans.at(1));
  }
  SECTION("not with expert parallelism") {
    tiny.request.space.ulysses = {1, 8};
    workloads::ModelSpec moe = tiny.request.model;
    moe.has_moe = true;
    moe.moe = {8, 2, 1024, 0, 0, 0};
    std::set<std::pair<int, int>> layouts;  // (expert parallelism, Ulysses degree)
    for (const auto& c : sim::enumerate_candidates(tiny.request.space, moe, tiny.request.training, *tiny.cluster, 16)) {
      layouts.insert({c.plan.experts.parallel, c.plan.model_parallel.ulysses});
    }
    REQUIRE(layouts == std::set<std::pair<int, int>>{{1, 1}, {1, 8}, {8, 1}});
  }
}

TEST_CASE("Megatron-LM layouts are tried under context parallelism, sharding over data x context GPUs",
          "[search][context]") {
  TinySearch tiny;  // 4 layers, 64 sequences of 1024 tokens per step, 16 GPUs of 8 per node
  tiny.request.space.families = {"megatron"};
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  const auto layouts = [&](const workloads::TrainingConfig& training) {
    std::map<int, std::set<std::string>> by_context;
    for (const auto& c : sim::enumerate_candidates(tiny.request.space, tiny.request.model, training, *tiny.cluster, 16)) {
      INFO(c.plan.name);
      const auto& mp = c.plan.model_parallel;
      CHECK(c.data_parallel * mp.tensor * mp.pipeline * mp.context == 16);
      CHECK((mp.context > 1) == (c.plan.name.find("-c" + std::to_string(mp.context)) != std::string::npos));
      CHECK(c.factors.optimizer == c.data_parallel * mp.context);  // the distributed optimizer over d x c
      CHECK(c.accumulation == training.global_batch_sequences / c.data_parallel);
      by_context[mp.context].insert(c.plan.name);
    }
    return by_context;
  };
  SECTION("by default only without, when every GPU has sequences of its own") {
    const auto by_context = layouts(tiny.request.training);
    REQUIRE(by_context.size() == 1);
    REQUIRE(by_context.count(1) == 1);
  }
  SECTION("asked for, every layout whose GPUs it divides, and each one compiles") {
    tiny.request.space.context_parallel = {1, 2};
    const auto by_context = layouts(tiny.request.training);
    REQUIRE(by_context.size() == 2);
    // t p c | 16: every layout of t p <= 8 has a twin; t = 1, p = 1 only with it.
    std::set<std::string> twins;
    for (const std::string& name : by_context.at(1)) {
      const auto p = name.find("-p");
      const int t = std::stoi(name.substr(10, p - 10)), pipeline = std::stoi(name.substr(p + 2));
      if (t * pipeline <= 8) twins.insert(name + "-c2");
    }
    twins.insert("megatron-t1-p1-c2");
    REQUIRE(by_context.at(2) == twins);
    for (const auto& c : sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training,
                                                   *tiny.cluster, 16)) {
      if (c.plan.model_parallel.context == 1) continue;
      const auto program = workloads::compile(sim::step_config(tiny.request.model, c, 8));
      CHECK(program.ranks == 16);
    }
  }
  SECTION("a batch of fewer sequences than GPUs tries 2, 4 and 8, by default; never without flash attention") {
    workloads::TrainingConfig long_context = tiny.request.training;
    long_context.sequence_length = 8192;
    long_context.global_batch_sequences = 8;
    const auto by_context = layouts(long_context);
    REQUIRE(by_context.size() == 4);
    REQUIRE(by_context.at(8).count("megatron-t1-p1-c8") == 1);
    REQUIRE(by_context.at(8).count("megatron-t2-p1-c8") == 1);
    REQUIRE(by_context.at(8).count("megatron-t4-p1-c8") == 0);  // 4 x 8 GPUs > 16
    long_context.flash_attention = false;
    REQUIRE(layouts(long_context).size() == 1);
  }
}

TEST_CASE("the pipeline layouts are those the model, the GPUs and the batch allow", "[search]") {
  TinySearch tiny;  // 4 layers, 64 sequences per step, 16 GPUs of 8 per node
  tiny.request.space.families = {"megatron", "zero-pipeline"};
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  tiny.request.space.placements = {topology::PlacementPolicy::consecutive, topology::PlacementPolicy::leaf_aware};
  const auto candidates =
      sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, 16);
  std::vector<std::string> names;
  for (const auto& c : candidates) names.push_back(c.plan.name);
  // Megatron: t | 8 and p in {1, 2, 4} (p | 4 layers), t p <= 16, not t = p = 1;
  // 2 virtual stages only for p = 2 (4 layers in 2 p chunks). ZeroPP: 2 chunks
  // per stage leave p = 2; units of p and 2 p; a stage is one node, so
  // ZeRO-3 over the node and over the stage are one layout.
  const std::vector<std::string> expected = {
      "megatron-t1-p2", "megatron-t1-p2-v2", "megatron-t1-p4", "megatron-t2-p1", "megatron-t2-p2",
      "megatron-t2-p2-v2", "megatron-t2-p4", "megatron-t4-p1", "megatron-t4-p2", "megatron-t4-p2-v2",
      "megatron-t4-p4", "megatron-t8-p1", "megatron-t8-p2", "megatron-t8-p2-v2", "zero-pipeline-p2-u2",
      "zero-pipeline-p2-u4"};
  CHECK(names == expected);
  for (const auto& c : candidates) {
    INFO(c.plan.name);
    const auto& mp = c.plan.model_parallel;
    CHECK(c.data_parallel * mp.tensor * mp.pipeline == 16);
    CHECK(c.accumulation == 64 / c.data_parallel);  // micro-batches of one sequence
    CHECK(c.placement->policy == topology::PlacementPolicy::consecutive);
    CHECK(mp.sequence_parallel == (mp.tensor > 1));
    if (c.plan.system == workloads::ShardingSystem::zero_pipeline) {
      CHECK(c.factors.parameters == 8);
      CHECK(c.factors.optimizer == 8);
    } else {
      CHECK(c.factors.optimizer == c.data_parallel);  // the distributed optimizer
    }
    // Each one compiles.
    const auto program = workloads::compile(sim::step_config(tiny.request.model, c, 8));
    CHECK(program.ranks == 16);
  }

  // Interleaving takes the micro-batches in groups of p, else of the
  // smallest N Megatron-Core accepts, and ZeroPP needs a multiple of its
  // unit. With 24 sequences per step, t1-p2 has 8-way data parallelism and 3
  // micro-batches: interleaved in one group of 3, and no unit of 2 or 4 for
  // ZeroPP's 3; t2-p2 has 6, groups of 2. No data-parallel plan could take
  // 24 sequences on 16 GPUs, but the pipelines can.
  tiny.request.training.global_batch_sequences = 24;
  const auto few = sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, 16);
  names.clear();
  for (const auto& c : few) names.push_back(c.plan.name);
  CHECK(std::find(names.begin(), names.end(), "megatron-t1-p2") != names.end());
  CHECK(std::find(names.begin(), names.end(), "megatron-t1-p2-v2") == names.end());
  CHECK(std::find(names.begin(), names.end(), "megatron-t1-p2-v2-n3") != names.end());
  for (const auto& c : few) {
    if (c.plan.name == "megatron-t1-p2-v2-n3") CHECK(c.plan.model_parallel.microbatch_group() == 3);
    if (c.plan.name == "megatron-t2-p2-v2") CHECK_FALSE(c.plan.model_parallel.microbatch_group_size.has_value());
  }
  CHECK(std::find(names.begin(), names.end(), "megatron-t2-p2-v2") != names.end());
  CHECK(std::find(names.begin(), names.end(), "megatron-t1-p4") != names.end());  // 1F1B: any count of micro-batches
  CHECK(std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.rfind("zero-pipeline", 0) == 0; }));

  // TP comm overlap on as well: a second variant of each layout with t > 1,
  // and only of those (it overlaps sequence-parallel calls).
  tiny.request.training.global_batch_sequences = 64;
  tiny.request.space.families = {"megatron"};
  tiny.request.space.tp_comm_overlap = {false, true};
  const auto both = sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, 16);
  std::vector<std::string> with_overlap;
  for (const auto& c : both) {
    INFO(c.plan.name);
    const bool named = c.plan.name.size() > 11 && c.plan.name.substr(c.plan.name.size() - 11) == "-tp-overlap";
    CHECK(named == c.plan.model_parallel.tp_comm_overlap);
    if (c.plan.model_parallel.tp_comm_overlap) with_overlap.push_back(c.plan.name.substr(0, c.plan.name.size() - 11));
  }
  CHECK(with_overlap == std::vector<std::string>(expected.begin() + 3, expected.end() - 2));  // t > 1, Megatron only
  CHECK(both.size() == expected.size() - 2 + with_overlap.size());
}

TEST_CASE("pipelines whose chunks do not divide the layers count the embedding and the output layer as layers",
          "[search]") {
  TinySearch tiny;  // 64 sequences per step, 16 GPUs of 8 per node
  tiny.request.space.families = {"megatron", "zero-pipeline"};
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  sim::PlanSearch search(*tiny.cluster, *tiny.router, tiny.profile);

  const auto layouts = [&](int layers) {
    tiny.request.model.layers = layers;
    const auto candidates =
        sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training, *tiny.cluster, 16);
    std::map<std::string, sim::Candidate> by_name;
    for (const auto& c : candidates) {
      INFO(c.plan.name);
      const auto& mp = c.plan.model_parallel;
      const auto split = workloads::split_pipeline(mp, layers, tiny.request.model.name, tiny.request.model.mtp_layers);
      REQUIRE(split.ok());
      int total = 0;
      for (int n : split.layers) total += n;
      CHECK(total == layers);
      // The even split wherever it exists; the accounting or a layout only
      // where it does not, and named by it.
      const int chunks = mp.pipeline * mp.virtual_stages;
      CHECK((layers % chunks == 0) == (!mp.account_for_embedding && !mp.account_for_loss && !mp.layout));
      CHECK(!(mp.layout && (mp.account_for_embedding || mp.account_for_loss)));
      CHECK((c.plan.name.find("-layout") != std::string::npos) == mp.layout.has_value());
      CHECK(!(mp.account_for_embedding && !mp.account_for_loss));  // never the embedding alone
      CHECK((c.plan.name.find("-split-emb-loss") != std::string::npos) ==
            (mp.account_for_embedding && mp.account_for_loss));
      CHECK((c.plan.name.find("-split-loss") != std::string::npos) == (!mp.account_for_embedding && mp.account_for_loss));
      by_name.emplace(c.plan.name, c);
    }
    return by_name;
  };

  // 6 layers: 4 stages, or 2 x 2 and 4 x 2 chunks, split only as 8 slots
  // with the embedding and the output layer each in one.
  const auto six = layouts(6);
  const std::vector<std::pair<std::string, std::vector<int>>> worked = {
      {"megatron-t1-p2", {3, 3}},
      {"megatron-t1-p4-split-emb-loss", {1, 2, 2, 1}},
      {"megatron-t1-p2-v2-split-emb-loss", {1, 2, 2, 1}},
      {"megatron-t2-p4-v2-split-emb-loss", {0, 1, 1, 1, 1, 1, 1, 0}},
      {"zero-pipeline-p2-split-emb-loss-u2", {1, 2, 2, 1}},
      {"zero-pipeline-p4-split-emb-loss-u8", {0, 1, 1, 1, 1, 1, 1, 0}}};
  for (const auto& [name, layers] : worked) {
    INFO(name);
    REQUIRE(six.count(name) == 1);
    CHECK(workloads::split_pipeline(six.at(name).plan.model_parallel, 6, "m").layers == layers);
  }
  // Each runs, and the search's one-rank-per-stage estimate is still the
  // analytical simulation of every rank: stages of unequal work included.
  for (const char* name :
       {"megatron-t2-p4-split-emb-loss", "megatron-t2-p4-v2-split-emb-loss", "zero-pipeline-p4-split-emb-loss-u4"}) {
    INFO(name);
    const sim::Candidate& candidate = six.at(name);
    const workloads::Program program = search.compile(tiny.request, candidate);
    sim::StepSimulationOptions options;
    options.network = sim::NetworkMode::analytical;
    const workloads::Timeline all_ranks = sim::simulate(program, *tiny.cluster, *tiny.router, tiny.profile, options);
    const sim::StepEstimate estimate = search.estimate(program, candidate);
    CHECK(estimate.step_seconds == seconds_from_picoseconds(all_ranks.step_time));
    double fullest = 0;
    for (const auto& peak : all_ranks.peak_memory) fullest = std::max(fullest, peak.total_bytes);
    CHECK(estimate.peak_memory_bytes == fullest);
  }

  // 7 layers: 8 slots with the output layer in one.
  const auto seven = layouts(7);
  CHECK(workloads::split_pipeline(seven.at("megatron-t1-p2-split-loss").plan.model_parallel, 7, "m").layers ==
        std::vector<int>{4, 3});
  CHECK(workloads::split_pipeline(seven.at("megatron-t1-p4-split-loss").plan.model_parallel, 7, "m").layers ==
        std::vector<int>{2, 2, 2, 1});
  CHECK(seven.count("megatron-t1-p4-v2-split-loss") == 1);
  // 5 layers on 4 stages: 5, 6 and 7 slots, none divides; a layout spreads
  // the 6 slots of the layers and the output layer, one more on each of the
  // first two stages. On 4 x 2 chunks 6 slots do not go round.
  const auto five = layouts(5);
  REQUIRE(five.count("megatron-t1-p4-layout") == 1);
  const auto& spread = five.at("megatron-t1-p4-layout").plan.model_parallel;
  CHECK(spread.layout == "Et*2|t*2|t|L");
  CHECK(workloads::split_pipeline(spread, 5, "m").layers == std::vector<int>{2, 2, 1, 0});
  CHECK(five.count("zero-pipeline-p4-layout-u4") == 0);  // ZeroPP's stages hold 2 chunks
  CHECK(std::none_of(five.begin(), five.end(), [](const auto& named) {
    const auto& mp = named.second.plan.model_parallel;
    return mp.pipeline * mp.virtual_stages > 6;
  }));
  // DeepSeek-V3's 61 layers: 62 slots, 8 on each of the first 6 of 8 stages.
  const auto sixty_one = layouts(61);
  REQUIRE(sixty_one.count("megatron-t1-p8-layout") == 1);
  const auto& eight = sixty_one.at("megatron-t1-p8-layout").plan.model_parallel;
  CHECK(eight.layout == "Et*8|(t*8|)*5,t*7|t*6L");
  CHECK(workloads::split_pipeline(eight, 61, "m").layers == std::vector<int>{8, 8, 8, 8, 8, 8, 7, 6});
  // With a multi-token-prediction depth, its layer joins the output layer's
  // virtual stage, where Megatron-Core builds it.
  tiny.request.model.mtp_layers = 1;
  const auto with_mtp = layouts(61);
  REQUIRE(with_mtp.count("megatron-t1-p8-layout") == 1);
  CHECK(with_mtp.at("megatron-t1-p8-layout").plan.model_parallel.layout == "Et*8|(t*8|)*5,t*7|t*6mL");
}

TEST_CASE("the named systems are searched as the registry lists them: presets, ZeRO-1/2 with multi-rank "
          "bucketing, group presets at every group size", "[search][systems]") {
  TinySearch tiny;  // 16 GPUs of 8 per node: sharding groups of 2, 4 and 8 GPUs
  tiny.request.space.families = {"named"};
  tiny.request.space.micro_batch_sizes = {1};
  tiny.request.space.recompute = {workloads::Recompute::none};
  tiny.request.space.bucket_bytes = {1e9};
  std::set<std::string> names;
  for (const auto& c : sim::enumerate_candidates(tiny.request.space, tiny.request.model, tiny.request.training,
                                                 *tiny.cluster, 16)) {
    CHECK(workloads::record_of(c.plan.system).search.family == "named");
    names.insert(c.plan.name);
  }
  // Worked out from the registry's entries: zero0..3, two FSDP presets,
  // zero1/zero2 again with multi-rank bucketing, and per group of 2, 4 and
  // 8 GPUs FSDP hybrid, MiCS and ZeRO++ (hpZ, and hpZ with qwZ + qgZ).
  std::set<std::string> expected = {"zero0", "zero1", "zero2", "zero3", "fsdp-full-shard", "fsdp-shard-grad-op",
                                     "zero1-multi-rank", "zero2-multi-rank"};
  for (int k : {2, 4, 8}) {
    const std::string size = std::to_string(k);
    for (const std::string& name : {"fsdp-hybrid-" + size, "mics-" + size, "zeropp-hpz" + size,
                                   "zeropp-hpz" + size + "-qwz-qgz"}) {
      expected.insert(name);
    }
  }
  CHECK(names == expected);
}
