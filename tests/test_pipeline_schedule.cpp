// The pipeline schedules against what they must be: every pass once, in an
// order that never deadlocks, with the published bubbles (Narayanan et al.
// 2021: (p - 1)(t_f + t_b) for 1F1B, that over v when interleaved) and
// 1F1B's bound of p - s micro-batches in flight on stage s.
#include "workloads/pipeline_schedule.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

using shardsim::workloads::PipelinePass;
using shardsim::workloads::pipeline_schedule;

namespace {

// Plays the stages' orders with forward f and backward b per chunk and free
// communication, each pass as early as its stage and its inputs allow (the
// forward of virtual stage k needs k - 1's, the backward needs k + 1's and its
// own forward). Returns the makespan, or nothing on deadlock.
std::optional<double> play(const std::vector<std::vector<PipelinePass>>& order, int chunks, double f, double b) {
  const int p = static_cast<int>(order.size());
  std::map<std::tuple<bool, int, int>, double> end;  // (forward, micro-batch, virtual stage)
  std::vector<std::size_t> next(order.size(), 0);
  std::vector<double> free_at(order.size(), 0);
  double makespan = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[static_cast<std::size_t>(s)] < order[static_cast<std::size_t>(s)].size()) {
        const PipelinePass& pass = order[static_cast<std::size_t>(s)][next[static_cast<std::size_t>(s)]];
        const int k = pass.chunk * p + s;
        std::vector<std::tuple<bool, int, int>> needs;
        if (pass.forward && k > 0) needs.emplace_back(true, pass.micro_batch, k - 1);
        if (!pass.forward) {
          needs.emplace_back(true, pass.micro_batch, k);
          if (k < p * chunks - 1) needs.emplace_back(false, pass.micro_batch, k + 1);
        }
        double ready = free_at[static_cast<std::size_t>(s)];
        bool blocked = false;
        for (const auto& need : needs) {
          const auto it = end.find(need);
          if (it == end.end()) {
            blocked = true;
            break;
          }
          ready = std::max(ready, it->second);
        }
        if (blocked) break;
        const double done = ready + (pass.forward ? f : b);
        end[{pass.forward, pass.micro_batch, k}] = done;
        free_at[static_cast<std::size_t>(s)] = done;
        makespan = std::max(makespan, done);
        ++next[static_cast<std::size_t>(s)];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (next[static_cast<std::size_t>(s)] != order[static_cast<std::size_t>(s)].size()) return std::nullopt;
  }
  return makespan;
}

}  // namespace

TEST_CASE("every stage runs each micro-batch's forward and backward of each chunk once, forward first",
          "[pipeline][schedule]") {
  for (const auto& [p, v, m] : {std::tuple{4, 1, 8}, std::tuple{4, 1, 2}, std::tuple{1, 1, 3}, std::tuple{4, 2, 8},
                                std::tuple{8, 2, 16}, std::tuple{2, 3, 4}, std::tuple{4, 2, 4}}) {
    INFO("p " << p << " v " << v << " m " << m);
    const auto order = pipeline_schedule(p, v, m);
    REQUIRE(order.size() == static_cast<std::size_t>(p));
    for (const auto& passes : order) {
      REQUIRE(passes.size() == static_cast<std::size_t>(2 * m * v));
      std::map<std::tuple<bool, int, int>, int> seen;
      for (const PipelinePass& pass : passes) {
        REQUIRE(++seen[{pass.forward, pass.micro_batch, pass.chunk}] == 1);
        if (!pass.forward) REQUIRE(seen.count({true, pass.micro_batch, pass.chunk}) == 1);
      }
      REQUIRE(seen.size() == static_cast<std::size_t>(2 * m * v));
    }
    REQUIRE(play(order, v, 1.0, 2.0).has_value());
  }
}

TEST_CASE("1F1B takes (m + p - 1)(t_f + t_b) and keeps at most p - s micro-batches in flight", "[pipeline][schedule]") {
  for (const auto& [p, m] : {std::pair{4, 8}, std::pair{4, 4}, std::pair{8, 32}, std::pair{2, 5}, std::pair{4, 2}}) {
    INFO("p " << p << " m " << m);
    const auto order = pipeline_schedule(p, 1, m);
    const double f = 1.0, b = 2.0;
    // With fewer micro-batches than stages, the last micro-batch still
    // crosses every stage both ways.
    REQUIRE(*play(order, 1, f, b) == Approx((m + p - 1) * (f + b)));
    for (int s = 0; s < p; ++s) {
      int live = 0, peak = 0;
      for (const PipelinePass& pass : order[static_cast<std::size_t>(s)]) {
        live += pass.forward ? 1 : -1;
        peak = std::max(peak, live);
      }
      REQUIRE(peak == std::min(p - s, m));
    }
  }
}

TEST_CASE("interleaving v chunks cuts the bubble to (p - 1)(t_f + t_b) / v", "[pipeline][schedule]") {
  for (const auto& [p, v, m] : {std::tuple{4, 2, 8}, std::tuple{4, 4, 16}, std::tuple{8, 2, 16}, std::tuple{2, 2, 4}}) {
    INFO("p " << p << " v " << v << " m " << m);
    const double f = 1.0 / v, b = 2.0 / v;  // a chunk holds 1/v of the stage's layers
    const double ideal = m * v * (f + b);
    REQUIRE(*play(pipeline_schedule(p, v, m), v, f, b) == Approx(ideal + (p - 1) * (f + b)));
    // The same layers without interleaving: v times the bubble.
    REQUIRE(*play(pipeline_schedule(p, 1, m), 1, v * f, v * b) == Approx(ideal + (p - 1) * v * (f + b)));
  }
}

TEST_CASE("schedules refuse what they cannot order", "[pipeline][schedule]") {
  REQUIRE_THROWS_AS(pipeline_schedule(0, 1, 4), std::invalid_argument);
  REQUIRE_THROWS_AS(pipeline_schedule(4, 1, 0), std::invalid_argument);
  REQUIRE_THROWS_WITH(pipeline_schedule(4, 2, 6), Catch::Contains("multiple of the stages"));
}
