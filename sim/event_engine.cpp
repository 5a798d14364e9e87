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
  queue_.push({when, id});
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

bool EventEngine::step() {
  while (!queue_.empty()) {
    const Entry entry = queue_.top();
    queue_.pop();
    Callback* callback = slot(entry.id);
    if (callback == nullptr || !*callback) continue;  // cancelled
    Callback fire = std::move(*callback);
    *callback = nullptr;
    --pending_;
    ++fired_;
    now_ = entry.when;
    drop_fired_slots();
    fire();
    return true;
  }
  return false;
}

void EventEngine::run() {
  while (step()) {
  }
}

void EventEngine::run_until(TimePs until) {
  while (!queue_.empty()) {
    const Entry entry = queue_.top();
    Callback* callback = slot(entry.id);
    if (callback == nullptr || !*callback) {
      queue_.pop();
      continue;
    }
    if (entry.when > until) break;
    step();
  }
  if (until > now_) now_ = until;
}

}  // namespace shardsim::sim
