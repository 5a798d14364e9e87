#include "sim/flow_network.h"

#include <catch2/catch.hpp>

#include <vector>

using shardsim::TimePs;
using shardsim::sim::EventEngine;
using shardsim::sim::FlowNetwork;
using Links = std::vector<shardsim::sim::LinkUse>;

namespace {

constexpr TimePs kMs = 1'000'000'000;  // picoseconds per millisecond
constexpr TimePs kUs = 1'000'000;

}  // namespace

TEST_CASE("one flow takes its latency plus bytes over capacity, to the picosecond", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs done = -1;
  // 5 us latency + 1e6 B / 1e9 B/s = 5 us + 1 ms.
  network.start(Links{{0, 1.0}}, 1e6, 5 * kUs, [&] { done = engine.now(); });
  engine.run();
  REQUIRE(done == 5 * kUs + kMs);
}

TEST_CASE("flows sharing a link share it evenly and finish together", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  std::vector<TimePs> done;
  for (int i = 0; i < 4; ++i) network.start(Links{{0, 1.0}}, 1e6, 0, [&] { done.push_back(engine.now()); });
  engine.run();
  // 4 x 1e6 B through 1e9 B/s: all end at 4 ms.
  REQUIRE(done == std::vector<TimePs>(4, 4 * kMs));
}

TEST_CASE("a late flow takes half the link, and its end gives it back", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs a_done = -1, b_done = -1;
  network.start(Links{{0, 1.0}}, 2e6, 0, [&] { a_done = engine.now(); });
  network.start(Links{{0, 1.0}}, 0.5e6, kMs, [&] { b_done = engine.now(); });
  engine.run();
  // 0-1 ms: A alone moves 1e6 B. Then 0.5e9 B/s each: B's 0.5e6 B take 1 ms
  // (ends at 2 ms) while A moves 0.5e6 B; A's last 0.5e6 B alone take 0.5 ms.
  REQUIRE(b_done == 2 * kMs);
  REQUIRE(a_done == 2 * kMs + kMs / 2);
}

TEST_CASE("a bottleneck elsewhere leaves the rest of a link to the others", "[flow_network]") {
  // L0 capacity 1e9, L1 capacity 0.25e9. A crosses L0 and L1; B crosses L0.
  // A is held to 0.25e9 by L1; B gets the remaining 0.75e9 of L0.
  EventEngine engine;
  FlowNetwork network(engine, {1e9, 0.25e9});
  TimePs a_done = -1, b_done = -1;
  const auto a = network.start(Links{{0, 1.0}, {1, 1.0}}, 0.25e6, 0, [&] { a_done = engine.now(); });
  const auto b = network.start(Links{{0, 1.0}}, 0.75e6, 0, [&] { b_done = engine.now(); });
  engine.run_until(1);
  REQUIRE(network.rate(a) == Approx(0.25e9));
  REQUIRE(network.rate(b) == Approx(0.75e9));
  engine.run();
  REQUIRE(a_done == kMs);
  REQUIRE(b_done == kMs);
}

TEST_CASE("a flow crossing a link with weight 2 moves at half the link rate", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs done = -1;
  network.start(Links{{0, 2.0}}, 1e6, 0, [&] { done = engine.now(); });
  engine.run();
  REQUIRE(done == 2 * kMs);
}

TEST_CASE("a payload fraction counts data on the links without changing the time", "[flow_network]") {
  // A protocol at 0.8 of its links: a link's weight is its bytes per byte
  // over 0.8, and link 1 is crossed twice. 1e6 B take 2.5 ms at link 1's
  // 1e9 / 2.5 B/s, and link 1 carried 2e6 B of data, not 2.5e6.
  EventEngine engine;
  FlowNetwork network(engine, {1e9, 1e9});
  TimePs done = -1;
  network.start(Links{{0, 1.25}, {1, 2.5}}, 1e6, 0, [&] { done = engine.now(); }, 0.8);
  engine.run_until(kMs + kMs / 4);  // half way: link 1 holds the rate to 1e9 / 2.5
  REQUIRE(network.link_bytes()[0] == Approx(0.5e6));
  REQUIRE(network.link_bytes()[1] == Approx(1e6));
  engine.run();
  REQUIRE(done == 2 * kMs + kMs / 2);
  REQUIRE(network.link_bytes()[0] == Approx(1e6));
  REQUIRE(network.link_bytes()[1] == Approx(2e6));
  for (double fraction : {0.0, -0.5, 1.5}) {
    REQUIRE_THROWS_WITH(network.start(Links{{0, 1.0}}, 1e6, 0, nullptr, fraction),
                        Catch::Contains("payload fraction") && Catch::Contains("not in (0, 1]"));
  }
}

TEST_CASE("duplicate link entries are merged into one weight", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs done = -1;
  network.start(Links{{0, 1.0}, {0, 1.0}}, 1e6, 0, [&] { done = engine.now(); });
  engine.run();
  REQUIRE(done == 2 * kMs);
  REQUIRE(network.link_bytes()[0] == Approx(2e6));
}

TEST_CASE("a completion callback can start the next flow", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs done = -1;
  network.start(Links{{0, 1.0}}, 1e6, 0, [&] { network.start(Links{{0, 1.0}}, 1e6, 0, [&] { done = engine.now(); }); });
  engine.run();
  REQUIRE(done == 2 * kMs);
}

TEST_CASE("a zero-byte flow or one without links ends after its latency", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs zero = -1, linkless = -1;
  network.start(Links{{0, 1.0}}, 0, 3 * kUs, [&] { zero = engine.now(); });
  network.start(Links{}, 1e6, 4 * kUs, [&] { linkless = engine.now(); });
  engine.run();
  REQUIRE(zero == 3 * kUs);
  REQUIRE(linkless == 4 * kUs);
}

TEST_CASE("a change re-solves only the flows connected to it", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9, 1e9, 1e9});
  // Two flows on L0 (one component) and an unrelated one started later on L2.
  network.start(Links{{0, 1.0}}, 1e6, 0, [] {});
  network.start(Links{{0, 1.0}, {1, 1.0}}, 1e6, 0, [] {});
  engine.run_until(1);
  REQUIRE(network.resolved_flows() == 2);
  TimePs done = -1;
  network.start(Links{{2, 1.0}}, 1e6, 0, [&] { done = engine.now(); });
  engine.run_until(2);
  REQUIRE(network.resolved_flows() == 3);  // only the new flow
  engine.run();
  REQUIRE(done == 1 + kMs);
}

TEST_CASE("link byte counts add up to what the flows moved", "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9, 2e9});
  network.start(Links{{0, 1.0}, {1, 0.5}}, 3e6, 0, [] {});
  network.start(Links{{1, 1.0}}, 1e6, 0, [] {});
  engine.run_until(kMs / 2);
  // Half way, flow 0 runs at 1e9 B/s (held by L0): 0.5e6 B moved.
  REQUIRE(network.link_bytes()[0] == Approx(0.5e6));
  engine.run();
  const auto bytes = network.link_bytes();
  REQUIRE(bytes[0] == Approx(3e6));
  REQUIRE(bytes[1] == Approx(0.5 * 3e6 + 1e6));
  REQUIRE(network.active_flows() == 0);
}

TEST_CASE("links need a positive finite capacity", "[flow_network]") {
  EventEngine engine;
  REQUIRE_THROWS_AS(FlowNetwork(engine, {1e9, 0.0}), std::invalid_argument);
  REQUIRE_THROWS_AS(FlowNetwork(engine, {-1.0}), std::invalid_argument);
  FlowNetwork network(engine, {1e9});
  REQUIRE_THROWS_AS(network.start(Links{{1, 1.0}}, 1.0, 0, [] {}), std::invalid_argument);
  REQUIRE_THROWS_AS(network.start(Links{{0, 1.0}}, -1.0, 0, [] {}), std::invalid_argument);
}

TEST_CASE("a finished flow's slot goes to a later flow, which ignores the completions filed for the old one",
          "[flow_network]") {
  EventEngine engine;
  FlowNetwork network(engine, {1e9});
  TimePs a_done = -1, c_done = -1;
  // A (3e6 B) and B (1e6 B) share the link at 0.5e9 B/s each: A is filed to
  // end at 6 ms. B ends at 2 ms; A, alone, moves its last 2e6 B by 4 ms and
  // leaves its 6 ms entry behind, stale.
  const auto a = network.start(Links{{0, 1.0}}, 3e6, 0, [&] { a_done = engine.now(); });
  network.start(Links{{0, 1.0}}, 1e6, 0, [] {});
  shardsim::sim::FlowId c = 0;
  engine.schedule_at(4 * kMs + kMs / 2, [&] {
    c = network.start(Links{{0, 1.0}}, 3e6, 0, [&] { c_done = engine.now(); });
  });
  engine.run();
  REQUIRE(a_done == 4 * kMs);
  CHECK(c == a);                          // the last slot freed is the first reused
  REQUIRE(c_done == 7 * kMs + kMs / 2);   // 4.5 ms + 3e6 B at 1e9 B/s, not A's 6 ms
  REQUIRE(network.link_bytes()[0] == Approx(7e6));
}
