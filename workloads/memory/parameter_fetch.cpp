#include "workloads/memory/parameter_fetch.h"

#include <algorithm>
#include <limits>

namespace shardsim::workloads {

std::vector<FetchEntry> micro_batch_entries(const std::vector<ModuleParameters>& modules, int head_layer,
                                            const LayerPredicate& reruns_layer) {
  const auto tensors = [&](std::size_t m) {
    return std::max<int>(1, static_cast<int>(modules[m].parameter_tensors.size() + modules[m].borrowed_tensors.size()));
  };
  std::vector<FetchEntry> entries;
  for (std::size_t m = 0; m < modules.size(); ++m) entries.push_back({{m}, modules[m].layer, false, tensors(m)});
  const std::size_t forward_entries = entries.size();
  for (std::size_t i = modules.size(); i-- > 0;) {
    const int layer = modules[i].layer;
    const bool same_layer = entries.size() > forward_entries && entries.back().layer == layer;
    if (same_layer && layer >= 0 && layer < head_layer && reruns_layer(layer)) {
      // Attention before MLP: the recompute runs the layer forward.
      entries.back().modules.insert(entries.back().modules.begin(), i);
      entries.back().rounds += tensors(i);
    } else {
      entries.push_back({{i}, layer, true, tensors(i)});
    }
  }
  return entries;
}

std::vector<double> gathered_elements(const std::vector<ModuleParameters>& modules, double persistence_threshold) {
  std::vector<double> elements;
  for (const ModuleParameters& module : modules) {
    double sharded = 0;
    for (double tensor : module.parameter_tensors) sharded += tensor > persistence_threshold ? tensor : 0;
    for (double tensor : module.borrowed_tensors) sharded += tensor > persistence_threshold ? tensor : 0;
    elements.push_back(sharded);
  }
  return elements;
}

double persistent_elements(const std::vector<ModuleParameters>& modules, double persistence_threshold) {
  double persistent = 0;
  for (const ModuleParameters& module : modules) {
    for (double tensor : module.parameter_tensors) persistent += tensor > persistence_threshold ? 0 : tensor;
  }
  return persistent;
}

FetchPolicy fetch_policy(const Plan& plan) {
  if (!plan.overlap.gather_scatter) return FetchPolicy::on_demand;
  return behaviour_of(plan.system).deepspeed_parameter_fetch ? FetchPolicy::deepspeed : FetchPolicy::layer_ahead;
}

FetchLimits fetch_limits(const Plan& plan, double bytes_per_value) {
  return {plan.buckets.prefetch_bytes / bytes_per_value, plan.buckets.max_live_parameters,
          plan.buckets.max_reuse_distance_parameters};
}

namespace {

class ScheduleBuilder {
 public:
  ScheduleBuilder(const std::vector<FetchEntry>& entries, const std::vector<double>& elements)
      : entries_(entries), elements_(elements), live_(elements.size(), false) {
    schedule_.gather_at.resize(entries.size());
    schedule_.free_after.resize(entries.size());
  }

  // Gathers `module` as entry t starts, for a use in the forward or the backward.
  bool gather(std::size_t t, std::size_t module, bool serves_backward) {
    if (elements_[module] <= 0 || live_[module]) return false;
    live_[module] = true;
    live_elements_ += elements_[module];
    schedule_.gather_at[t].push_back({module, serves_backward});
    return true;
  }
  void gather_entry(std::size_t t, std::size_t u) {
    for (std::size_t m : entries_[u].modules) gather(t, m, entries_[u].backward);
  }
  void free(std::size_t t, std::size_t module) {
    if (!live_[module]) return;
    live_[module] = false;
    live_elements_ -= elements_[module];
    schedule_.free_after[t].push_back(module);
  }
  void free_entry(std::size_t t) {
    for (std::size_t m : entries_[t].modules) free(t, m);
  }
  void free_everything(std::size_t t) {
    for (std::size_t m = 0; m < live_.size(); ++m) free(t, m);
  }
  bool live(std::size_t module) const { return live_[module]; }
  double live_elements() const { return live_elements_; }
  FetchSchedule take() { return std::move(schedule_); }

 private:
  const std::vector<FetchEntry>& entries_;
  const std::vector<double>& elements_;
  std::vector<bool> live_;
  double live_elements_ = 0;
  FetchSchedule schedule_;
};

void schedule_layer_ahead(const std::vector<FetchEntry>& entries, ScheduleBuilder& s) {
  const std::size_t n = entries.size();
  auto same_forward_layer = [&](std::size_t u, int layer) { return u < n && !entries[u].backward && entries[u].layer == layer; };
  for (std::size_t t = 0; t < n; ++t) {
    const FetchEntry& e = entries[t];
    if (!e.backward) {
      const bool first_of_layer = t == 0 || !same_forward_layer(t - 1, e.layer);
      std::size_t u = t;
      for (; same_forward_layer(u, e.layer); ++u) s.gather_entry(t, u);
      if (first_of_layer && u < n && !entries[u].backward) {
        for (const int next = entries[u].layer; same_forward_layer(u, next); ++u) s.gather_entry(t, u);
      }
    } else {
      s.gather_entry(t, t);
      if (t + 1 < n) s.gather_entry(t, t + 1);
    }
    s.free_entry(t);
  }
}

void schedule_deepspeed(const std::vector<FetchEntry>& entries, const std::vector<double>& elements,
                        const FetchLimits& limits, ScheduleBuilder& s) {
  // The trace: every (entry, module) use in order, and where each entry's
  // uses end.
  struct Use {
    std::size_t entry, module;
  };
  std::vector<Use> uses;
  std::vector<std::size_t> entry_end;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    for (std::size_t m : entries[t].modules) uses.push_back({t, m});
    entry_end.push_back(uses.size());
  }
  // Next use of the same module, and elements traversed before each use.
  constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> next_use(uses.size(), none), last_seen(elements.size(), none);
  for (std::size_t u = uses.size(); u-- > 0;) {
    next_use[u] = last_seen[uses[u].module];
    last_seen[uses[u].module] = u;
  }
  std::vector<double> traversed(uses.size() + 1, 0.0);
  for (std::size_t u = 0; u < uses.size(); ++u) traversed[u + 1] = traversed[u] + elements[uses[u].module];

  std::vector<std::ptrdiff_t> passed_use_at(elements.size(), -1);  // latest entry of a use the queue passed
  std::size_t queue = 0;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    s.gather_entry(t, t);
    queue = std::max(queue, entry_end[t]);
    for (int round = 0; limits.prefetch_elements > 0 && round < entries[t].rounds; ++round) {
      const double limit = std::min(limits.prefetch_elements, limits.max_live_elements - s.live_elements());
      double issued = 0;
      while (queue < uses.size() && issued < limit) {
        const Use& use = uses[queue++];
        if (s.live(use.module)) {
          passed_use_at[use.module] = std::max<std::ptrdiff_t>(passed_use_at[use.module], static_cast<std::ptrdiff_t>(use.entry));
        } else if (s.gather(t, use.module, entries[use.entry].backward)) {
          issued += elements[use.module];
        }
      }
    }
    for (std::size_t u = entry_end[t] - entries[t].modules.size(); u < entry_end[t]; ++u) {
      const std::size_t m = uses[u].module, next = next_use[u];
      const bool passed = passed_use_at[m] > static_cast<std::ptrdiff_t>(t);
      const bool reused_soon = next != none && traversed[next] - traversed[entry_end[t]] < limits.max_reuse_distance_elements;
      if (!passed && !reused_soon) s.free(t, m);
    }
  }
  if (!entries.empty()) s.free_everything(entries.size() - 1);  // the end of the backward releases all
}

}  // namespace

FetchSchedule schedule_fetches(const std::vector<FetchEntry>& entries, const std::vector<double>& elements,
                               FetchPolicy policy, const FetchLimits& limits) {
  ScheduleBuilder s(entries, elements);
  switch (policy) {
    case FetchPolicy::on_demand:
      for (std::size_t t = 0; t < entries.size(); ++t) {
        s.gather_entry(t, t);
        s.free_entry(t);
      }
      break;
    case FetchPolicy::layer_ahead: schedule_layer_ahead(entries, s); break;
    case FetchPolicy::deepspeed: schedule_deepspeed(entries, elements, limits, s); break;
  }
  return s.take();
}

std::vector<ModuleParameters> gathered_modules(std::vector<ModuleParameters> modules, const Plan& plan,
                                               int expert_parameter_factor) {
  if (plan.experts.parallel > 1 && expert_parameter_factor == 1) {
    for (ModuleParameters& module : modules) {
      if (module.routed_experts) module.parameter_tensors.clear();
    }
  }
  return modules;
}

int gather_group(int parameter_factor, int secondary_group, bool issued_in_backward) {
  return issued_in_backward && secondary_group > 1 ? secondary_group : parameter_factor;
}

double peak_gathered_bytes(const std::vector<FetchEntry>& entries, const FetchSchedule& schedule,
                           const std::vector<double>& elements,
                           const std::vector<std::array<double, 2>>& bytes_per_element) {
  std::vector<double> held(elements.size(), 0.0);
  double live = 0, peak = 0;
  for (std::size_t t = 0; t < entries.size(); ++t) {
    for (const FetchSchedule::Gather& g : schedule.gather_at[t]) {
      held[g.module] = elements[g.module] * bytes_per_element[g.module][entries[t].backward ? 1 : 0];
      live += held[g.module];
    }
    peak = std::max(peak, live);
    for (std::size_t m : schedule.free_after[t]) live -= held[m];
  }
  return peak;
}

ParameterFetches plan_parameter_fetches(const std::vector<ModuleParameters>& modules, int head_layer,
                                        const LayerPredicate& reruns_layer,
                                        const Plan& plan, double bytes_per_value, bool sharded) {
  ParameterFetches fetches;
  fetches.entries = micro_batch_entries(modules, head_layer, reruns_layer);
  fetches.elements.assign(modules.size(), 0.0);
  if (sharded) {
    const double threshold = plan.buckets.persistence_threshold_parameters;
    fetches.elements = gathered_elements(modules, threshold);
    fetches.persistent_elements = persistent_elements(modules, threshold);
  }
  fetches.schedule =
      schedule_fetches(fetches.entries, fetches.elements, fetch_policy(plan), fetch_limits(plan, bytes_per_value));
  return fetches;
}

}  // namespace shardsim::workloads
