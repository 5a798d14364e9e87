#include "sim/event_engine.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

using shardsim::TimePs;
using shardsim::sim::EventEngine;

TEST_CASE("events fire in time order and the clock follows them", "[event_engine]") {
  EventEngine engine;
  std::vector<std::pair<TimePs, int>> fired;
  engine.schedule_at(30, [&] { fired.emplace_back(engine.now(), 3); });
  engine.schedule_at(10, [&] { fired.emplace_back(engine.now(), 1); });
  engine.schedule_at(20, [&] { fired.emplace_back(engine.now(), 2); });
  engine.run();
  REQUIRE(fired == std::vector<std::pair<TimePs, int>>{{10, 1}, {20, 2}, {30, 3}});
  REQUIRE(engine.now() == 30);
  REQUIRE(engine.fired() == 3);
  REQUIRE(engine.pending() == 0);
}

TEST_CASE("same-time events fire in the order they were scheduled", "[event_engine]") {
  EventEngine engine;
  std::string order;
  for (char c : std::string("abcdefgh")) engine.schedule_at(5, [&order, c] { order += c; });
  // Scheduled from inside an event for the same instant: after those already queued.
  engine.schedule_at(5, [&] { engine.schedule_at(5, [&] { order += 'z'; }); });
  engine.run();
  REQUIRE(order == "abcdefghz");
}

TEST_CASE("any mix of times, schedules from inside events and cancellations fires as a stable sort by time",
          "[event_engine]") {
  // The reference: every event scheduled, in scheduling order, less those
  // cancelled, stably sorted by time.
  struct Scheduled {
    TimePs when;
    shardsim::sim::EventId id;
    bool cancelled = false;
  };
  std::mt19937 random(7);
  EventEngine engine;
  std::vector<Scheduled> scheduled;
  std::vector<std::size_t> fired;
  std::function<void(TimePs)> add = [&](TimePs when) {
    const std::size_t label = scheduled.size();
    scheduled.push_back({when, 0});
    scheduled[label].id = engine.schedule_at(when, [&, label] {
      fired.push_back(label);
      if (scheduled.size() < 20000) {
        for (int k = std::uniform_int_distribution<int>(0, 3)(random); k > 0; --k) {
          add(engine.now() + std::uniform_int_distribution<TimePs>(0, 3)(random));
        }
      }
      Scheduled& victim = scheduled[std::uniform_int_distribution<std::size_t>(0, scheduled.size() - 1)(random)];
      if (std::uniform_int_distribution<int>(0, 3)(random) == 0 && engine.cancel(victim.id)) victim.cancelled = true;
    });
  };
  for (int i = 0; i < 200; ++i) add(std::uniform_int_distribution<TimePs>(0, 50)(random));
  engine.run();

  std::vector<std::size_t> expected;
  for (std::size_t i = 0; i < scheduled.size(); ++i) {
    if (!scheduled[i].cancelled) expected.push_back(i);
  }
  std::stable_sort(expected.begin(), expected.end(),
                   [&](std::size_t a, std::size_t b) { return scheduled[a].when < scheduled[b].when; });
  REQUIRE(scheduled.size() > 10000);
  REQUIRE(fired.size() < scheduled.size());  // some were cancelled
  REQUIRE(fired == expected);
  REQUIRE(engine.pending() == 0);
  REQUIRE(engine.fired() == fired.size());
}

TEST_CASE("a cancelled event does not fire and cancelling twice is refused", "[event_engine]") {
  EventEngine engine;
  int fired = 0;
  const auto keep = engine.schedule_at(1, [&] { fired += 1; });
  const auto drop = engine.schedule_at(2, [&] { fired += 10; });
  REQUIRE(engine.pending() == 2);
  REQUIRE(engine.cancel(drop));
  REQUIRE_FALSE(engine.cancel(drop));
  REQUIRE(engine.pending() == 1);
  engine.run();
  REQUIRE(fired == 1);
  REQUIRE_FALSE(engine.cancel(keep));  // already fired
  REQUIRE(engine.now() == 1);          // the cancelled event did not move the clock
}

TEST_CASE("an event may cancel another one due at the same instant", "[event_engine]") {
  EventEngine engine;
  bool second_fired = false;
  shardsim::sim::EventId second = 0;
  engine.schedule_at(7, [&] { engine.cancel(second); });
  second = engine.schedule_at(7, [&] { second_fired = true; });
  engine.run();
  REQUIRE_FALSE(second_fired);
}

TEST_CASE("scheduling in the past is an error", "[event_engine]") {
  EventEngine engine;
  engine.schedule_at(100, [] {});
  engine.run();
  REQUIRE_THROWS_AS(engine.schedule_at(99, [] {}), std::logic_error);
  REQUIRE_NOTHROW(engine.schedule_after(0, [] {}));
}

TEST_CASE("run_until stops at the horizon and sets the clock there", "[event_engine]") {
  EventEngine engine;
  int fired = 0;
  engine.schedule_at(10, [&] { ++fired; });
  engine.schedule_at(20, [&] { ++fired; });
  engine.run_until(15);
  REQUIRE(fired == 1);
  REQUIRE(engine.now() == 15);
  engine.run_until(20);  // inclusive
  REQUIRE(fired == 2);
}

TEST_CASE("picosecond conversions are exact for representable durations", "[event_engine][units]") {
  REQUIRE(shardsim::picoseconds_from_seconds(1.0) == 1'000'000'000'000);
  REQUIRE(shardsim::picoseconds_from_seconds(2.5e-6) == 2'500'000);
  REQUIRE(shardsim::seconds_from_picoseconds(3'000'000) == Approx(3e-6).epsilon(1e-15));
  REQUIRE(shardsim::bytes_per_second_from_bits_per_second(200e9) == 25e9);
  REQUIRE(shardsim::per_direction_from_bidirectional(600e9) == 300e9);
}

TEST_CASE("two engines are independent", "[event_engine]") {
  EventEngine a, b;
  a.schedule_at(5, [] {});
  b.schedule_at(9, [] {});
  a.run();
  REQUIRE(a.now() == 5);
  REQUIRE(b.now() == 0);
  REQUIRE(b.pending() == 1);
}
