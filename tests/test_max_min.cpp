#include "sim/max_min.h"

#include <catch2/catch.hpp>

#include <random>
#include <span>
#include <vector>

using shardsim::sim::LinkUse;
using shardsim::sim::MaxMinSolver;

namespace {

std::vector<double> solve(const std::vector<std::vector<LinkUse>>& flows, const std::vector<double>& capacity) {
  std::vector<std::span<const LinkUse>> views(flows.begin(), flows.end());
  std::vector<double> rates;
  MaxMinSolver solver;
  solver.solve(views, capacity, rates);
  return rates;
}

}  // namespace

TEST_CASE("flows on one link split it evenly", "[max_min]") {
  // c = 9 shared by 3 flows: 9 / 3 = 3 each.
  const auto rates = solve({{{0, 1}}, {{0, 1}}, {{0, 1}}}, {9.0});
  REQUIRE(rates == std::vector<double>{3.0, 3.0, 3.0});
}

TEST_CASE("three flows over two links, one crossing both", "[max_min]") {
  // Links: L0 capacity 1, L1 capacity 2. A crosses L0 and L1, B only L0, C only L1.
  // Filling: L0 saturates first at level 1/2 (2 flows), fixing A = B = 1/2.
  // L1 then has 2 - 1/2 = 3/2 left for C alone: C = 3/2.
  const auto rates = solve({{{0, 1}, {1, 1}}, {{0, 1}}, {{1, 1}}}, {1.0, 2.0});
  REQUIRE(rates[0] == Approx(0.5));
  REQUIRE(rates[1] == Approx(0.5));
  REQUIRE(rates[2] == Approx(1.5));
}

TEST_CASE("parking lot: a long flow against one short flow per link", "[max_min]") {
  // Links L0..L2, capacity 1 each. Flow 0 crosses all three; flow k (1..3)
  // crosses only L(k-1). Every link saturates at 1/2: all rates 1/2.
  const auto rates = solve({{{0, 1}, {1, 1}, {2, 1}}, {{0, 1}}, {{1, 1}}, {{2, 1}}}, {1.0, 1.0, 1.0});
  for (double r : rates) REQUIRE(r == Approx(0.5));
}

TEST_CASE("a flow that crosses a link twice pays twice on it", "[max_min]") {
  // Flow A has weight 2 on L0 (capacity 3), flow B weight 1.
  // Level x with 2x + x = 3: x = 1 for both.
  const auto rates = solve({{{0, 2}}, {{0, 1}}}, {3.0});
  REQUIRE(rates[0] == Approx(1.0));
  REQUIRE(rates[1] == Approx(1.0));
}

TEST_CASE("a split flow uses parallel links by its shares", "[max_min]") {
  // Flow A split evenly over L0 and L1 (capacity 1 each): A alone would reach 2.
  // Flow B on L0 only. Level x: L0 carries x/2 + x = 1, so x = 2/3 for both;
  // then A's half on L1 is 1/3 < 1: L1 is not a bottleneck.
  const auto rates = solve({{{0, 0.5}, {1, 0.5}}, {{0, 1}}}, {1.0, 1.0});
  REQUIRE(rates[0] == Approx(2.0 / 3.0));
  REQUIRE(rates[1] == Approx(2.0 / 3.0));
}

TEST_CASE("a flow without links is unbounded", "[max_min]") {
  const auto rates = solve({{}, {{0, 1}}}, {4.0});
  REQUIRE(std::isinf(rates[0]));
  REQUIRE(rates[1] == Approx(4.0));
}

TEST_CASE("random instances satisfy the definition of max-min fairness", "[max_min]") {
  // Feasible: no link carries more than its capacity. Fair: every flow has a
  // bottleneck, a saturated link on which no flow has a higher rate.
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> link_count(1, 12), flow_count(1, 40), pick(0, 1000);
  std::uniform_real_distribution<double> capacity(0.5, 10.0), weight(0.25, 3.0);
  MaxMinSolver solver;  // reused across instances, as the flow network does
  for (int instance = 0; instance < 300; ++instance) {
    const int links = link_count(rng);
    std::vector<double> capacities(static_cast<std::size_t>(links));
    for (double& c : capacities) c = capacity(rng);
    std::vector<std::vector<LinkUse>> flows(static_cast<std::size_t>(flow_count(rng)));
    for (auto& flow : flows) {
      const int hops = 1 + pick(rng) % std::min(links, 4);
      for (int h = 0; h < hops; ++h) {
        const int link = pick(rng) % links;
        bool present = false;
        for (const auto& u : flow) present |= u.link == link;
        if (!present) flow.push_back({link, weight(rng)});
      }
    }
    std::vector<std::span<const LinkUse>> views(flows.begin(), flows.end());
    std::vector<double> rates;
    solver.solve(views, capacities, rates);

    std::vector<double> load(capacities.size(), 0.0);
    for (std::size_t f = 0; f < flows.size(); ++f) {
      for (const auto& u : flows[f]) load[static_cast<std::size_t>(u.link)] += u.weight * rates[f];
    }
    for (std::size_t l = 0; l < capacities.size(); ++l) REQUIRE(load[l] <= capacities[l] * (1 + 1e-9));
    for (std::size_t f = 0; f < flows.size(); ++f) {
      bool has_bottleneck = false;
      for (const auto& u : flows[f]) {
        const auto l = static_cast<std::size_t>(u.link);
        if (load[l] < capacities[l] * (1 - 1e-9)) continue;
        bool fastest = true;
        for (std::size_t g = 0; g < flows.size(); ++g) {
          for (const auto& v : flows[g]) {
            if (v.link == u.link && rates[g] > rates[f] * (1 + 1e-9)) fastest = false;
          }
        }
        has_bottleneck |= fastest;
      }
      REQUIRE(has_bottleneck);
    }
  }
}
