// The pipeline schedules against what they must be: every pass once, in an
// order that never deadlocks, with the published bubbles (Narayanan et al.
// 2021: (p - 1)(t_f + t_b) for 1F1B, that over v when interleaved) and
// 1F1B's bound of p - s micro-batches in flight on stage s.
#include "workloads/compile/pipeline_schedule.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

using shardsim::workloads::PassKind;
using shardsim::workloads::PassSeconds;
using shardsim::workloads::PipelinePass;
using shardsim::workloads::unit_schedule;
using shardsim::workloads::pipeline_schedule;

namespace {

// Passes' times: forward, a whole backward (1F1B), and a backward's
// input-gradient and weight-gradient halves (unit_schedule).
struct PassTimes {
  double forward = 1, backward = 2, input_gradient = 1, weight_gradient = 1;
};

// Plays the stages' orders with these times per chunk and free
// communication, each pass as early as its stage and its inputs allow: the
// forward of virtual stage k needs k - 1's; a backward (or its input half)
// needs its own forward and the input gradient k + 1 produced (by a whole
// backward or an input half); a weight half needs its own input half.
// Returns the makespan, or nothing on deadlock.
std::optional<double> play(const std::vector<std::vector<PipelinePass>>& order, int chunks, const PassTimes& t) {
  const int p = static_cast<int>(order.size());
  // (pass kind, micro-batch, virtual stage); a whole backward is recorded
  // as the input gradient it produces, and also as done weights.
  std::map<std::tuple<PassKind, int, int>, double> end;
  std::vector<std::size_t> next(order.size(), 0);
  std::vector<double> free_at(order.size(), 0);
  double makespan = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[static_cast<std::size_t>(s)] < order[static_cast<std::size_t>(s)].size()) {
        const PipelinePass& pass = order[static_cast<std::size_t>(s)][next[static_cast<std::size_t>(s)]];
        const int k = pass.chunk * p + s;
        std::vector<std::tuple<PassKind, int, int>> needs;
        double seconds = t.forward;
        switch (pass.kind) {
          case PassKind::forward:
            if (k > 0) needs.emplace_back(PassKind::forward, pass.micro_batch, k - 1);
            break;
          case PassKind::backward:
          case PassKind::input_gradient:
            needs.emplace_back(PassKind::forward, pass.micro_batch, k);
            if (k < p * chunks - 1) needs.emplace_back(PassKind::input_gradient, pass.micro_batch, k + 1);
            seconds = pass.kind == PassKind::backward ? t.backward : t.input_gradient;
            break;
          case PassKind::weight_gradient:
            needs.emplace_back(PassKind::input_gradient, pass.micro_batch, k);
            seconds = t.weight_gradient;
            break;
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
        const double done = ready + seconds;
        const PassKind recorded = pass.kind == PassKind::backward ? PassKind::input_gradient : pass.kind;
        end[{recorded, pass.micro_batch, k}] = done;
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

PassTimes one_f_one_b(double f, double b) {
  PassTimes t;
  t.forward = f;
  t.backward = b;
  return t;
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
      std::map<std::tuple<PassKind, int, int>, int> seen;
      for (const PipelinePass& pass : passes) {
        REQUIRE((pass.kind == PassKind::forward || pass.kind == PassKind::backward));
        REQUIRE(++seen[{pass.kind, pass.micro_batch, pass.chunk}] == 1);
        if (!pass.forward()) REQUIRE(seen.count({PassKind::forward, pass.micro_batch, pass.chunk}) == 1);
      }
      REQUIRE(seen.size() == static_cast<std::size_t>(2 * m * v));
    }
    REQUIRE(play(order, v, one_f_one_b(1.0, 2.0)).has_value());
  }
}

TEST_CASE("1F1B takes (m + p - 1)(t_f + t_b) and keeps at most p - s micro-batches in flight", "[pipeline][schedule]") {
  for (const auto& [p, m] : {std::pair{4, 8}, std::pair{4, 4}, std::pair{8, 32}, std::pair{2, 5}, std::pair{4, 2}}) {
    INFO("p " << p << " m " << m);
    const auto order = pipeline_schedule(p, 1, m);
    const double f = 1.0, b = 2.0;
    // With fewer micro-batches than stages, the last micro-batch still
    // crosses every stage both ways.
    REQUIRE(*play(order, 1, one_f_one_b(f, b)) == Approx((m + p - 1) * (f + b)));
    for (int s = 0; s < p; ++s) {
      int live = 0, peak = 0;
      for (const PipelinePass& pass : order[static_cast<std::size_t>(s)]) {
        live += pass.forward() ? 1 : -1;
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
    REQUIRE(*play(pipeline_schedule(p, v, m), v, one_f_one_b(f, b)) == Approx(ideal + (p - 1) * (f + b)));
    // The same layers without interleaving: v times the bubble.
    REQUIRE(*play(pipeline_schedule(p, 1, m), 1, one_f_one_b(v * f, v * b)) == Approx(ideal + (p - 1) * v * (f + b)));
  }
}

TEST_CASE("schedules refuse what they cannot order", "[pipeline][schedule]") {
  REQUIRE_THROWS_AS(pipeline_schedule(0, 1, 4), std::invalid_argument);
  REQUIRE_THROWS_AS(pipeline_schedule(4, 1, 0), std::invalid_argument);
  REQUIRE_THROWS_WITH(pipeline_schedule(4, 2, 6), Catch::Contains("multiple of the stages"));
}

TEST_CASE("groups of N micro-batches run as Megatron-Core's schedule table lists them", "[pipeline][schedule]") {
  // Megatron-Core's own example of get_schedule_table (PP 2, VP 2, N 3, M 5):
  // forwards (micro-batch, chunk) 00 10 20 01 11 21 30 40 31 41; backwards
  // the same micro-batches through the mirrored chunks. Stage 0 warms up
  // with (2 - 0 - 1) 2 + (2 - 1) 3 = 5 forwards, stage 1 with 3.
  const auto F = [](int micro_batch, int chunk) { return PipelinePass{PassKind::forward, micro_batch, chunk}; };
  const auto B = [](int micro_batch, int chunk) { return PipelinePass{PassKind::backward, micro_batch, chunk}; };
  const std::vector<std::vector<PipelinePass>> expected = {
      {F(0, 0), F(1, 0), F(2, 0), F(0, 1), F(1, 1), F(2, 1), B(0, 1), F(3, 0), B(1, 1), F(4, 0), B(2, 1), F(3, 1),
       B(0, 0), F(4, 1), B(1, 0), B(2, 0), B(3, 1), B(4, 1), B(3, 0), B(4, 0)},
      {F(0, 0), F(1, 0), F(2, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 1), B(2, 1), F(3, 0), B(0, 0), F(4, 0),
       B(1, 0), F(3, 1), B(2, 0), F(4, 1), B(3, 1), B(4, 1), B(3, 0), B(4, 0)}};
  REQUIRE(pipeline_schedule(2, 2, 5, 3) == expected);
  // N = p is the default.
  REQUIRE(pipeline_schedule(4, 2, 8, 4) == pipeline_schedule(4, 2, 8));
}

TEST_CASE("with groups of N, stage s holds (p - s - 1) 2 + (v - 1) N + 1 chunk passes at its peak",
          "[pipeline][schedule]") {
  for (const auto& [p, v, m, n] : {std::tuple{4, 2, 10, 5}, std::tuple{4, 2, 10, 6}, std::tuple{4, 3, 12, 8},
                                   std::tuple{2, 2, 5, 3}, std::tuple{4, 2, 8, 8}, std::tuple{8, 2, 16, 8}}) {
    INFO("p " << p << " v " << v << " m " << m << " N " << n);
    const auto order = pipeline_schedule(p, v, m, n);
    REQUIRE(play(order, v, one_f_one_b(1.0, 2.0)).has_value());
    for (int s = 0; s < p; ++s) {
      const auto& passes = order[static_cast<std::size_t>(s)];
      REQUIRE(passes.size() == static_cast<std::size_t>(2 * m * v));
      std::map<std::tuple<PassKind, int, int>, int> seen;
      int live = 0, peak = 0;
      for (const PipelinePass& pass : passes) {
        REQUIRE(++seen[{pass.kind, pass.micro_batch, pass.chunk}] == 1);
        live += pass.forward() ? 1 : -1;
        peak = std::max(peak, live);
      }
      REQUIRE(peak == std::min(m * v, (p - s - 1) * 2 + (v - 1) * n + 1));
    }
  }
}

TEST_CASE("a micro-batch group must lie in [p, m] and leave a last group of 0 or at least p", "[pipeline][schedule]") {
  using shardsim::workloads::microbatch_group_problem;
  // m = 10 on 4 stages: N 5 divides, N 6 leaves 4; N 4 leaves 2 and N 7 leaves 3.
  CHECK(microbatch_group_problem(4, 10, 5).empty());
  CHECK(microbatch_group_problem(4, 10, 6).empty());
  CHECK(microbatch_group_problem(4, 10, 10).empty());
  CHECK_THAT(microbatch_group_problem(4, 10, 4), Catch::Contains("leave a last group of 2, fewer than the 4"));
  CHECK_THAT(microbatch_group_problem(4, 10, 7), Catch::Contains("leave a last group of 3"));
  CHECK_THAT(microbatch_group_problem(4, 10, 3), Catch::Contains("between the 4 pipeline stages and the 10"));
  CHECK_THAT(microbatch_group_problem(4, 10, 11), Catch::Contains("got 11"));
  REQUIRE_THROWS_WITH(pipeline_schedule(4, 2, 10, 7), Catch::Contains("last group of 3"));
  REQUIRE_NOTHROW(pipeline_schedule(4, 1, 10, 7));  // 1F1B has no groups
}

TEST_CASE("a unit schedule runs every forward, input gradient and weight gradient once, in dependency order",
          "[pipeline][schedule][zero_pipeline]") {
  for (const auto& [p, v, m, u] : {std::tuple{4, 2, 8, 4}, std::tuple{4, 1, 8, 2}, std::tuple{8, 2, 32, 8},
                                   std::tuple{3, 3, 6, 6}, std::tuple{1, 2, 4, 2}, std::tuple{4, 2, 8, 1}}) {
    INFO("p " << p << " v " << v << " m " << m << " unit " << u);
    // Ordered with unequal pass times, played with others: a valid order
    // never deadlocks whatever the times turn out to be.
    std::vector<std::vector<PassSeconds>> seconds(static_cast<std::size_t>(p),
                                                  std::vector<PassSeconds>(static_cast<std::size_t>(v), {1.0, 1.3, 0.8}));
    seconds.back().back().forward = 2.5;  // a last chunk with the LM head
    const auto order = unit_schedule(p, v, m, u, seconds);
    REQUIRE(order.size() == static_cast<std::size_t>(p));
    for (const auto& passes : order) {
      REQUIRE(passes.size() == static_cast<std::size_t>(3 * m * v));
      std::map<std::tuple<PassKind, int, int>, int> seen;
      int in_flight = 0;  // forwards whose weight gradient has not run: their activations are held
      for (const PipelinePass& pass : passes) {
        REQUIRE(pass.kind != PassKind::backward);
        REQUIRE(++seen[{pass.kind, pass.micro_batch, pass.chunk}] == 1);
        if (pass.kind == PassKind::input_gradient) REQUIRE(seen.count({PassKind::forward, pass.micro_batch, pass.chunk}));
        if (pass.kind == PassKind::weight_gradient) {
          REQUIRE(seen.count({PassKind::input_gradient, pass.micro_batch, pass.chunk}));
        }
        in_flight += pass.forward() ? 1 : pass.kind == PassKind::weight_gradient ? -1 : 0;
        REQUIRE(in_flight <= u * v);  // one unit's activations at most
      }
      REQUIRE(seen.size() == static_cast<std::size_t>(3 * m * v));
    }
    for (const PassTimes& t : {PassTimes{1, 0, 1, 1}, PassTimes{1, 0, 2, 0.5}, PassTimes{3, 0, 1, 1}}) {
      REQUIRE(play(order, v, t).has_value());
    }
  }
}

TEST_CASE("with a unit of 2p chunk passes the pipeline idles only while it fills", "[pipeline][schedule][zero_pipeline]") {
  // Equal passes: the last stage cannot start before p - 1 forwards have
  // crossed the stages before it, so (p - 1) t_f + m v (t_f + t_b + t_w) is
  // a lower bound on the step. A unit whose chunk passes cover a round trip
  // through the stages (u v >= 2 p) reaches it.
  for (const auto& [p, v, m, u] : {std::tuple{4, 2, 8, 4}, std::tuple{4, 2, 16, 8}, std::tuple{8, 2, 32, 8},
                                   std::tuple{8, 1, 32, 16}, std::tuple{4, 1, 16, 8}, std::tuple{4, 4, 16, 4},
                                   std::tuple{3, 2, 9, 3}}) {
    INFO("p " << p << " v " << v << " m " << m << " unit " << u);
    const PassTimes equal{1, 0, 1, 1};
    REQUIRE(*play(unit_schedule(p, v, m, u), v, equal) == Approx((p - 1) + 3.0 * m * v));
  }
  // Smaller units hold fewer activations and leave bubbles: never fewer as
  // the unit shrinks.
  const PassTimes equal{1, 0, 1, 1};
  double previous = 0;
  for (int u : {8, 4, 2, 1}) {
    const double span = *play(unit_schedule(4, 2, 8, u), 2, equal);
    REQUIRE(span >= previous);
    previous = span;
  }
  REQUIRE(previous > 3.0 * 8 * 2 + 3);
}

TEST_CASE("a bound on pending weight-gradient passes holds", "[pipeline][schedule][zero_pipeline]") {
  for (int bound : {1, 2}) {
    const auto order = unit_schedule(4, 2, 8, 4, {}, bound);
    for (const auto& passes : order) {
      int pending = 0, most = 0;
      for (const PipelinePass& pass : passes) {
        pending += pass.kind == PassKind::input_gradient ? 1 : pass.kind == PassKind::weight_gradient ? -1 : 0;
        most = std::max(most, pending);
      }
      REQUIRE(most <= bound);
    }
    REQUIRE(play(order, 2, PassTimes{}).has_value());
  }
  // Unbounded, weight gradients wait behind input gradients.
  int most = 0;
  for (const auto& passes : unit_schedule(4, 2, 8, 4)) {
    int pending = 0;
    for (const PipelinePass& pass : passes) {
      pending += pass.kind == PassKind::input_gradient ? 1 : pass.kind == PassKind::weight_gradient ? -1 : 0;
      most = std::max(most, pending);
    }
  }
  REQUIRE(most > 2);
}

TEST_CASE("unit schedules refuse what they cannot order", "[pipeline][schedule][zero_pipeline]") {
  REQUIRE_THROWS_AS(unit_schedule(4, 2, 8, 0), std::invalid_argument);
  REQUIRE_THROWS_WITH(unit_schedule(4, 2, 10, 4), Catch::Contains("multiple of the scheduling unit"));
  REQUIRE_THROWS_WITH(unit_schedule(4, 2, 8, 4, {{PassSeconds{}}}), Catch::Contains("per stage and chunk"));
}
