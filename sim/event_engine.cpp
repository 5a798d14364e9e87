#include "sim/event_engine.h"

#include <stdexcept>
#include <string>

namespace shardsim::sim {

EventEngine::Callback* EventEngine::slot(EventId id) {
  if (id < first_slot_id_ || id >= next_id_) return nullptr;
  return &slots_[static_cast<std::size_t>(id - first_slot_id_)];
}

void EventEngine::drop_fired_slots() {
  while (!slots_.empty() && !slots_.front()) {
    slots_.pop_front();
    ++first_slot_id_;
  }
}

EventId EventEngine::schedule_at(TimePs when, Callback callback) {
  if (when < now_) {
    throw std::logic_error("event scheduled in the past: at " + std::to_string(when) + " ps, now " +
                           std::to_string(now_) + " ps");
  }
  if (!callback) throw std::logic_error("event scheduled without a callback");
  const EventId id = next_id_++;
  slots_.push_back(std::move(callback));
  if (last_scheduled_ == instants_.end() || last_scheduled_->first != when) {
    auto [it, added] = instants_.try_emplace(when);
    if (added && !spare_lists_.empty()) {
      it->second.ids = std::move(spare_lists_.back());
      spare_lists_.pop_back();
    }
    last_scheduled_ = it;
  }
  last_scheduled_->second.ids.push_back(id);
  ++pending_;
  return id;
}

bool EventEngine::cancel(EventId id) {
  Callback* callback = slot(id);
  if (callback == nullptr || !*callback) return false;
  *callback = nullptr;
  --pending_;
  drop_fired_slots();
  return true;
}

std::map<TimePs, EventEngine::Instant>::iterator EventEngine::next_instant() {
  while (!instants_.empty()) {
    auto it = instants_.begin();
    Instant& instant = it->second;
    while (instant.next < instant.ids.size()) {
      const Callback* callback = slot(instant.ids[instant.next]);
      if (callback != nullptr && *callback) return it;
      ++instant.next;  // cancelled
    }
    instant.ids.clear();
    spare_lists_.push_back(std::move(instant.ids));
    if (last_scheduled_ == it) last_scheduled_ = instants_.end();
    instants_.erase(it);
  }
  return instants_.end();
}

bool EventEngine::step() {
  const auto it = next_instant();
  if (it == instants_.end()) return false;
  Instant& instant = it->second;
  Callback* callback = slot(instant.ids[instant.next++]);
  Callback fire = std::move(*callback);
  *callback = nullptr;
  --pending_;
  ++fired_;
  now_ = it->first;
  drop_fired_slots();
  fire();  // may schedule more events at this instant: they join its list
  return true;
}

void EventEngine::run() {
  while (step()) {
  }
}

void EventEngine::run_until(TimePs until) {
  for (auto it = next_instant(); it != instants_.end() && it->first <= until; it = next_instant()) step();
  if (until > now_) now_ = until;
}

}  // namespace shardsim::sim
