// When sharded parameters are gathered and freed: hand-worked DeepSpeed
// cases, the invariants every policy keeps, and the closed forms of the
// simple policies on LLaMA-7B.
#include "topology/base/json_input.h"
#include "workloads/import/model_file.h"
#include "workloads/memory/memory_model.h"
#include "workloads/memory/parameter_fetch.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <map>

using namespace shardsim::workloads;

namespace {

using Gathers = std::vector<std::vector<std::pair<std::size_t, bool>>>;

Gathers gathers_of(const FetchSchedule& schedule) {
  Gathers out;
  for (const auto& at : schedule.gather_at) {
    out.emplace_back();
    for (const FetchSchedule::Gather& g : at) out.back().emplace_back(g.module, g.serves_backward);
  }
  return out;
}

// One byte per gathered element, forward and backward alike.
std::vector<std::array<double, 2>> unit_bytes(const std::vector<double>& elements) {
  return std::vector<std::array<double, 2>>(elements.size(), {1.0, 1.0});
}

// Four modules A..D of 10 elements, one tensor each: forward A B C D, then
// backward D C B A.
std::vector<FetchEntry> four_modules() {
  std::vector<FetchEntry> entries;
  for (std::size_t m = 0; m < 4; ++m) entries.push_back({{m}, static_cast<int>(m), false, 1});
  for (std::size_t m = 4; m-- > 0;) entries.push_back({{m}, static_cast<int>(m), true, 1});
  return entries;
}

// Replays a schedule: every module a entry uses is live when it runs, a
// module is gathered only while not live, every gather is freed once, and
// nothing is left at the end. Returns the gathers per micro-batch.
std::size_t require_consistent(const std::vector<FetchEntry>& entries, const std::vector<double>& elements,
                               const FetchSchedule& schedule) {
  REQUIRE(schedule.gather_at.size() == entries.size());
  REQUIRE(schedule.free_after.size() == entries.size());
  std::vector<bool> live(elements.size(), false);
  std::size_t gathers = 0;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    INFO("entry " << t);
    for (const FetchSchedule::Gather& g : schedule.gather_at[t]) {
      REQUIRE(elements[g.module] > 0);
      REQUIRE_FALSE(live[g.module]);
      live[g.module] = true;
      ++gathers;
    }
    for (std::size_t m : entries[t].modules) REQUIRE((live[m] || elements[m] == 0));
    for (std::size_t m : schedule.free_after[t]) {
      REQUIRE(live[m]);
      live[m] = false;
    }
  }
  REQUIRE(std::none_of(live.begin(), live.end(), [](bool l) { return l; }));
  return gathers;
}

double largest(const std::vector<double>& elements) { return *std::max_element(elements.begin(), elements.end()); }

}  // namespace

TEST_CASE("DeepSpeed's prefetch: gathers until the bucket or the live limit, keeps what the queue passed",
          "[fetch]") {
  const std::vector<FetchEntry> entries = four_modules();
  const std::vector<double> elements(4, 10.0);
  const std::size_t A = 0, B = 1, C = 2, D = 3;
  SECTION("bucket 10, at most 30 live, no reuse distance") {
    // Each hook prefetches one module. At D's forward the queue pops D's own
    // backward use (live: D is kept) and C's; D's backward then needs no gather.
    const FetchSchedule s = schedule_fetches(entries, elements, FetchPolicy::deepspeed, {10, 30, 0});
    const Gathers expected = {{{A, false}, {B, false}}, {{C, false}}, {{D, false}}, {{C, true}},
                              {{B, true}},              {{A, true}},  {},            {}};
    REQUIRE(gathers_of(s) == expected);
    const std::vector<std::vector<std::size_t>> frees = {{A}, {B}, {C}, {}, {D}, {C}, {B}, {A}};
    REQUIRE(s.free_after == frees);
    REQUIRE(require_consistent(entries, elements, s) == 7);
  }
  SECTION("no prefetch, reuse distance 25") {
    // C's next use is 20 elements of traversal away (D forward, D backward):
    // kept; B's is 40 away: freed and gathered again.
    const FetchSchedule s = schedule_fetches(entries, elements, FetchPolicy::deepspeed, {0, 30, 25});
    const Gathers expected = {{{A, false}}, {{B, false}}, {{C, false}}, {{D, false}},
                              {},           {},           {{B, true}},  {{A, true}}};
    REQUIRE(gathers_of(s) == expected);
    const std::vector<std::vector<std::size_t>> frees = {{A}, {B}, {}, {}, {D}, {C}, {B}, {A}};
    REQUIRE(s.free_after == frees);
    REQUIRE(peak_gathered_bytes(entries, s, elements, unit_bytes(elements)) == 20);
  }
  SECTION("the live limit stops the prefetch") {
    const FetchSchedule s = schedule_fetches(entries, elements, FetchPolicy::deepspeed, {1e9, 10, 0});
    REQUIRE(require_consistent(entries, elements, s) == 8);
    REQUIRE(peak_gathered_bytes(entries, s, elements, unit_bytes(elements)) == 10);
  }
}

TEST_CASE("every policy gathers each module before it runs and frees each gather once", "[fetch]") {
  const ModelSpec model = load_model("llama-7b");
  const std::vector<ModuleParameters> modules = model_modules(model);
  for (const bool full_recompute : {false, true}) {
    const std::vector<FetchEntry> entries = micro_batch_entries(modules, model.layers, [full_recompute](int) { return full_recompute; });
    for (const double threshold : {0.0, 1e5, 1e8}) {
      const std::vector<double> elements = gathered_elements(modules, threshold);
      for (const FetchPolicy policy : {FetchPolicy::on_demand, FetchPolicy::layer_ahead, FetchPolicy::deepspeed}) {
        for (const FetchLimits limits : {FetchLimits{1e8 / 2, 1e9, 1e9}, FetchLimits{1e6, 3e8, 0}, FetchLimits{0, 0, 0}}) {
          INFO("recompute " << full_recompute << " threshold " << threshold << " policy " << static_cast<int>(policy)
                            << " prefetch " << limits.prefetch_elements);
          require_consistent(entries, elements, schedule_fetches(entries, elements, policy, limits));
        }
      }
    }
  }
}

TEST_CASE("gathered parameters at the peak: one module, two layers, or DeepSpeed's live limit", "[fetch]") {
  const ModelSpec model = load_model("llama-7b");
  const std::vector<ModuleParameters> modules = model_modules(model);
  const std::vector<FetchEntry> entries = micro_batch_entries(modules, model.layers, [](int) { return false; });
  const std::vector<double> elements = gathered_elements(modules, 1e5);
  const auto peak = [&](FetchPolicy policy, FetchLimits limits) {
    return peak_gathered_bytes(entries, schedule_fetches(entries, elements, policy, limits), elements, unit_bytes(elements));
  };
  // LLaMA-7B's modules without their norm weights (4096 each, persistent).
  const double h = 4096, attention = 4 * h * h, mlp = 3 * h * 11008, vocab = 32000 * h;
  REQUIRE(elements[1] == attention);
  REQUIRE(elements[2] == mlp);
  REQUIRE(elements.front() == vocab);
  REQUIRE(elements.back() == vocab);
  REQUIRE(persistent_elements(modules, 1e5) == (2 * 32 + 1) * h);
  // On demand: one module at a time, each gathered for the forward and the backward.
  REQUIRE(peak(FetchPolicy::on_demand, {}) == mlp);
  REQUIRE(require_consistent(entries, elements,
                             schedule_fetches(entries, elements, FetchPolicy::on_demand, {})) == 2 * modules.size());
  // Layer ahead: a layer and the next one.
  REQUIRE(peak(FetchPolicy::layer_ahead, {}) == 2 * (attention + mlp));
  // DeepSpeed's defaults (5e7-element bucket, 1e9 live, reuse distance 1e9):
  // the window fills to the live limit; it overshoots by at most the module a
  // round ends on and the one its entry fetches on demand.
  const FetchLimits defaults{5e7, 1e9, 1e9};
  REQUIRE(peak(FetchPolicy::deepspeed, defaults) >= 1e9 - largest(elements));
  REQUIRE(peak(FetchPolicy::deepspeed, defaults) <= 1e9 + 2 * largest(elements));
  // The forward's last modules stay gathered for the backward: fewer gathers than on demand.
  const std::size_t deepspeed_gathers =
      require_consistent(entries, elements, schedule_fetches(entries, elements, FetchPolicy::deepspeed, defaults));
  REQUIRE(deepspeed_gathers < 2 * modules.size());
  REQUIRE(deepspeed_gathers > modules.size());
}
