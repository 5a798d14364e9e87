#include "sim/flow_network.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace shardsim::sim {

namespace {

// A flow with less than this left is through: what remains is rounding in
// rate * time, not data.
constexpr double kBytesDust = 1e-6;

}  // namespace

FlowNetwork::FlowNetwork(EventEngine& engine, std::vector<double> capacity_bytes_per_second)
    : engine_(engine), capacity_(std::move(capacity_bytes_per_second)) {
  for (std::size_t l = 0; l < capacity_.size(); ++l) {
    if (!(capacity_[l] > 0) || !std::isfinite(capacity_[l])) {
      throw std::invalid_argument("link " + std::to_string(l) + " has capacity " + std::to_string(capacity_[l]) +
                                  " bytes/s; it must be positive and finite");
    }
  }
  link_flows_.resize(capacity_.size());
  finished_link_bytes_.resize(capacity_.size(), 0.0);
  link_visit_mark_.assign(capacity_.size(), 0);
}

FlowId FlowNetwork::start(std::span<const LinkUse> usage, double bytes, TimePs latency, Completion on_complete,
                          double payload_fraction) {
  if (!(bytes >= 0) || !std::isfinite(bytes)) throw std::invalid_argument("flow of " + std::to_string(bytes) + " bytes");
  if (!(payload_fraction > 0 && payload_fraction <= 1)) {
    throw std::invalid_argument("flow with payload fraction " + std::to_string(payload_fraction) + ", not in (0, 1]");
  }
  if (latency < 0) throw std::invalid_argument("flow with negative latency");
  for (const LinkUse& use : usage) {
    if (use.link < 0 || static_cast<std::size_t>(use.link) >= capacity_.size()) {
      throw std::invalid_argument("flow uses unknown link " + std::to_string(use.link));
    }
    if (!(use.weight > 0)) throw std::invalid_argument("flow uses a link with non-positive weight");
  }
  FlowId id;
  if (free_slots_.empty()) {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
  } else {
    id = free_slots_.back();
    free_slots_.pop_back();
  }
  Flow& flow = flows_[id];
  // One entry per link, in link order, whatever the caller passed (plans
  // already pass them sorted).
  auto& links = flow.usage;
  links.assign(usage.begin(), usage.end());
  const auto by_link = [](const LinkUse& a, const LinkUse& b) { return a.link < b.link; };
  if (!std::is_sorted(links.begin(), links.end(), by_link)) std::sort(links.begin(), links.end(), by_link);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (kept > 0 && links[kept - 1].link == links[i].link) {
      links[kept - 1].weight += links[i].weight;
    } else {
      links[kept++] = links[i];
    }
  }
  links.resize(kept);
  flow.bytes = bytes;
  flow.payload_fraction = payload_fraction;
  flow.remaining = bytes;
  flow.rate = 0;
  flow.last_update = 0;
  flow.serial = started_++;
  ++flow.version;  // completions filed for the slot's last flow are stale
  flow.state = State::waiting;
  flow.on_links = false;
  flow.on_complete = std::move(on_complete);

  if (latency == 0) {
    activate(id);
  } else {
    const TimePs at = engine_.now() + latency;
    auto [it, inserted] = activations_.try_emplace(at);
    it->second.push_back(id);
    if (inserted) {
      engine_.schedule_at(at, [this, at] {
        auto batch = activations_.extract(at);
        for (FlowId f : batch.mapped()) activate(f);
      });
    }
  }
  return id;
}

void FlowNetwork::activate(FlowId id) {
  Flow& flow = flows_[id];
  flow.state = State::active;
  flow.last_update = engine_.now();
  ++active_count_;
  if (flow.usage.empty() || flow.remaining <= kBytesDust) {
    // Nothing to share: done as soon as it starts.
    flow.rate = 0;
    push_due({engine_.now(), flow.serial, id, flow.version});
    if (!completing_) arm_wakeup();
    return;
  }
  flow.on_links = true;
  for (const LinkUse& use : flow.usage) link_flows_[static_cast<std::size_t>(use.link)].push_back(id);
  dirty_flows_.push_back(id);
  request_recompute();
}

void FlowNetwork::request_recompute() {
  if (completing_ || recompute_pending_) return;  // complete_due_flows() recomputes when it is done
  recompute_pending_ = true;
  engine_.schedule_at(engine_.now(), [this] {
    recompute_pending_ = false;
    recompute();
  });
}

void FlowNetwork::advance(Flow& flow, TimePs now) {
  const TimePs elapsed = now - flow.last_update;
  if (elapsed > 0 && flow.rate > 0) {
    flow.remaining -= std::min(flow.remaining, flow.rate * seconds_from_picoseconds(elapsed));
  }
  flow.last_update = now;
}

void FlowNetwork::recompute() {
  if (dirty_flows_.empty() && dirty_links_.empty()) {
    arm_wakeup();
    return;
  }
  ++recomputations_;
  ++visit_epoch_;
  const TimePs now = engine_.now();

  // Breadth-first over the flow-link graph from the links the change touched.
  std::vector<LinkId> frontier;
  auto visit_link = [&](LinkId link) {
    if (link_visit_mark_[static_cast<std::size_t>(link)] == visit_epoch_) return;
    link_visit_mark_[static_cast<std::size_t>(link)] = visit_epoch_;
    frontier.push_back(link);
  };
  for (FlowId f : dirty_flows_) {
    if (flows_[f].state != State::active) continue;
    for (const LinkUse& use : flows_[f].usage) visit_link(use.link);
  }
  for (LinkId link : dirty_links_) visit_link(link);
  dirty_flows_.clear();
  dirty_links_.clear();

  solve_flows_.clear();
  for (std::size_t next = 0; next < frontier.size(); ++next) {
    for (FlowId f : link_flows_[static_cast<std::size_t>(frontier[next])]) {
      Flow& flow = flows_[f];
      if (flow.visit_mark == visit_epoch_) continue;
      flow.visit_mark = visit_epoch_;
      solve_flows_.push_back(f);
      for (const LinkUse& use : flow.usage) visit_link(use.link);
    }
  }

  resolved_flows_ += solve_flows_.size();
  solve_input_.clear();
  for (FlowId f : solve_flows_) {
    advance(flows_[f], now);
    solve_input_.emplace_back(flows_[f].usage);
  }
  solver_.solve(solve_input_, capacity_, solve_rates_);
  for (std::size_t i = 0; i < solve_flows_.size(); ++i) {
    flows_[solve_flows_[i]].rate = solve_rates_[i];
    schedule_completion(solve_flows_[i]);
  }
  drop_stale_dues();
  arm_wakeup();
}

void FlowNetwork::schedule_completion(FlowId id) {
  Flow& flow = flows_[id];
  ++flow.version;
  TimePs when = engine_.now();
  if (flow.remaining > kBytesDust) {
    const double picoseconds = std::ceil(flow.remaining / flow.rate * static_cast<double>(kPicosecondsPerSecond));
    // Bad input, not a bug: only a link or a transfer far outside any real
    // cluster or model gets here (the loaders bound each value on its own).
    if (!(picoseconds < 9e18 - static_cast<double>(when))) {
      throw InputError("a transfer would end past the simulated clock's range (about 106 days): a link far too slow or "
                       "a transfer far too large for any real step; check the cluster's link speeds and the model's sizes");
    }
    when += static_cast<TimePs>(picoseconds);
  }
  push_due({when, flow.serial, id, flow.version});
}

void FlowNetwork::push_due(Due due) {
  due_.push_back(due);
  std::push_heap(due_.begin(), due_.end(), std::greater<>());
}

void FlowNetwork::drop_stale_dues() {
  // Every recomputation re-files its flows; once stale entries outnumber live
  // flows, rebuilding the heap is cheaper than popping them one by one.
  if (due_.size() <= 2 * active_count_ + 1024) return;
  std::erase_if(due_, [this](const Due& d) {
    const Flow& flow = flows_[d.flow];
    return flow.state != State::active || flow.version != d.version;
  });
  std::make_heap(due_.begin(), due_.end(), std::greater<>());
}

void FlowNetwork::arm_wakeup() {
  while (!due_.empty()) {
    const Due& top = due_.front();
    const Flow& flow = flows_[top.flow];
    if (flow.state == State::active && flow.version == top.version) break;
    std::pop_heap(due_.begin(), due_.end(), std::greater<>());
    due_.pop_back();
  }
  if (due_.empty()) {
    if (wakeup_ != kNoEvent) engine_.cancel(wakeup_);
    wakeup_ = kNoEvent;
    wakeup_time_ = kTimeNever;
    return;
  }
  const TimePs when = due_.front().when;
  if (wakeup_ != kNoEvent && wakeup_time_ == when) return;
  if (wakeup_ != kNoEvent) engine_.cancel(wakeup_);
  wakeup_time_ = when;
  wakeup_ = engine_.schedule_at(when, [this] {
    wakeup_ = kNoEvent;
    wakeup_time_ = kTimeNever;
    complete_due_flows();
  });
}

void FlowNetwork::detach_finished(const std::vector<LinkId>& links) {
  for (LinkId link : links) {
    auto& members = link_flows_[static_cast<std::size_t>(link)];
    std::size_t kept = 0;
    for (const FlowId f : members) {
      if (flows_[f].state == State::active) members[kept++] = f;
    }
    members.resize(kept);
    dirty_links_.push_back(link);
  }
}

void FlowNetwork::complete_due_flows() {
  const TimePs now = engine_.now();
  completing_ = true;
  ++visit_epoch_;
  std::vector<FlowId> done;
  std::vector<LinkId> freed_links;
  while (!due_.empty()) {
    const Due top = due_.front();
    Flow& flow = flows_[top.flow];
    const bool live = flow.state == State::active && flow.version == top.version;
    if (live && top.when > now) break;
    std::pop_heap(due_.begin(), due_.end(), std::greater<>());
    due_.pop_back();
    if (!live) continue;
    for (const LinkUse& use : flow.usage) {
      if (flow.on_links && link_visit_mark_[static_cast<std::size_t>(use.link)] != visit_epoch_) {
        link_visit_mark_[static_cast<std::size_t>(use.link)] = visit_epoch_;
        freed_links.push_back(use.link);
      }
    }
    flow.remaining = 0;
    flow.rate = 0;
    flow.last_update = now;
    flow.state = State::done;
    --active_count_;
    done.push_back(top.flow);
  }
  detach_finished(freed_links);
  for (FlowId f : done) {
    Flow& flow = flows_[f];
    const double payload = flow.bytes * flow.payload_fraction;
    for (const LinkUse& use : flow.usage) finished_link_bytes_[static_cast<std::size_t>(use.link)] += use.weight * payload;
    flow.usage.clear();
  }
  for (FlowId f : done) {
    Completion callback = std::move(flows_[f].on_complete);
    flows_[f].on_complete = nullptr;
    if (callback) callback();  // may start flows; they join the recomputation below
    free_slots_.push_back(f);
  }
  completing_ = false;
  recompute();
}

double FlowNetwork::rate(FlowId flow) const { return flows_.at(flow).rate; }

std::vector<double> FlowNetwork::link_bytes() const {
  std::vector<double> bytes = finished_link_bytes_;
  const TimePs now = engine_.now();
  for (const Flow& flow : flows_) {
    if (flow.state == State::done) continue;
    double moved = flow.bytes - flow.remaining;
    if (flow.state == State::active) {
      moved += std::min(flow.remaining, flow.rate * seconds_from_picoseconds(now - flow.last_update));
    }
    const double payload = moved * flow.payload_fraction;
    for (const LinkUse& use : flow.usage) bytes[static_cast<std::size_t>(use.link)] += use.weight * payload;
  }
  return bytes;
}

}  // namespace shardsim::sim
