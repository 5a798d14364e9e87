#include "sim/max_min.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace shardsim::sim {

namespace {

// Below this fraction of its initial weight a link has no unfixed flows left;
// guards against sums of shares like 1/3 + 1/3 + 1/3 - 1 leaving dust.
constexpr double kWeightDust = 1e-9;

struct Level {
  double level;
  std::uint32_t link;
  std::uint32_t version;
  bool operator>(const Level& other) const {
    return level != other.level ? level > other.level : link > other.link;
  }
};

}  // namespace

void MaxMinSolver::solve(std::span<const std::span<const LinkUse>> flows, std::span<const double> capacity,
                         std::vector<double>& rates) {
  rates.assign(flows.size(), std::numeric_limits<double>::infinity());
  if (links_.size() < capacity.size()) links_.resize(capacity.size());

  // Gather the links in use and each link's total weight.
  touched_.clear();
  for (const auto& usage : flows) {
    for (const LinkUse& use : usage) {
      LinkState& link = links_[static_cast<std::size_t>(use.link)];
      if (link.count == 0) touched_.push_back(static_cast<std::uint32_t>(use.link));
      link.weight += use.weight;
      ++link.count;
    }
  }
  // Group flow indices by link (counting sort into members_).
  std::uint32_t offset = 0;
  for (std::uint32_t l : touched_) {
    LinkState& link = links_[l];
    link.first = offset;
    offset += link.count;
    link.residual = capacity[l];
    link.initial_weight = link.weight;
  }
  members_.resize(offset);
  for (std::uint32_t f = 0; f < flows.size(); ++f) {
    for (const LinkUse& use : flows[f]) {
      LinkState& link = links_[static_cast<std::size_t>(use.link)];
      members_[link.first + link.filled++] = f;
    }
  }

  std::vector<Level> levels;
  levels.reserve(touched_.size());
  for (std::uint32_t l : touched_) {
    const LinkState& link = links_[l];
    if (link.weight > 0) levels.push_back({link.residual / link.weight, l, 0});
  }
  // Built in one pass; a flow over a 1024-GPU ring touches thousands of links.
  std::priority_queue<Level, std::vector<Level>, std::greater<>> heap(std::greater<>(), std::move(levels));

  fixed_.assign(flows.size(), 0);
  std::size_t unfixed = 0;
  for (const auto& usage : flows) unfixed += usage.empty() ? 0 : 1;
  double floor = 0;  // levels only rise; clamp float noise to keep it so
  while (unfixed > 0 && !heap.empty()) {
    const Level top = heap.top();
    heap.pop();
    LinkState& saturated = links_[top.link];
    if (top.version != saturated.version || saturated.weight <= kWeightDust * saturated.initial_weight) continue;
    const double level = std::max(top.level, floor);
    floor = level;
    changed_.clear();
    for (std::uint32_t k = saturated.first; k < saturated.first + saturated.count; ++k) {
      const std::uint32_t f = members_[k];
      if (fixed_[f]) continue;
      fixed_[f] = 1;
      --unfixed;
      rates[f] = level;
      for (const LinkUse& use : flows[f]) {
        LinkState& link = links_[static_cast<std::size_t>(use.link)];
        link.residual = std::max(0.0, link.residual - use.weight * level);
        link.weight -= use.weight;
        if (!link.changed) {
          link.changed = true;
          changed_.push_back(static_cast<std::uint32_t>(use.link));
        }
      }
    }
    // One fresh heap entry per link whose level moved; older entries go stale.
    for (std::uint32_t l : changed_) {
      LinkState& link = links_[l];
      link.changed = false;
      ++link.version;
      if (&link != &saturated && link.weight > kWeightDust * link.initial_weight) {
        heap.push({link.residual / link.weight, l, link.version});
      }
    }
  }

  // Rounding can leave a link's weight as dust while a flow on it is still
  // unfixed. Such a flow takes what its tightest link has left, but at least
  // the last level reached, so that it always makes progress.
  if (unfixed > 0) {
    for (std::uint32_t f = 0; f < flows.size(); ++f) {
      if (fixed_[f] || flows[f].empty()) continue;
      double rate = std::numeric_limits<double>::infinity();
      for (const LinkUse& use : flows[f]) {
        rate = std::min(rate, links_[static_cast<std::size_t>(use.link)].residual / use.weight);
      }
      rates[f] = std::max(floor, rate);
    }
  }

  // Leave the scratch table clean for the next call.
  for (std::uint32_t l : touched_) links_[l] = LinkState{};
}

}  // namespace shardsim::sim
