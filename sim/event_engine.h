// EventEngine: a discrete-event clock and queue.
//
// Time is integer picoseconds. Events scheduled for the same instant fire in
// the order they were scheduled, so a run is reproducible bit for bit. An
// event can be cancelled until it fires. There is no global engine: every
// model that schedules events is handed the engine it belongs to, and any
// number of engines can live side by side (one per search candidate, say).
//
//   EventEngine engine;
//   engine.schedule_after(picoseconds_from_seconds(1e-6), [&] { ... });
//   engine.run();
#pragma once

#include "topology/base/units.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <vector>

namespace shardsim::sim {

using EventId = std::uint64_t;
inline constexpr EventId kNoEvent = 0;

class EventEngine {
 public:
  using Callback = std::function<void()>;

  EventEngine() = default;
  // Callbacks hold pointers to the models that own the engine, and the queue
  // keeps an iterator into itself: an engine stays where it was made.
  EventEngine(const EventEngine&) = delete;
  EventEngine& operator=(const EventEngine&) = delete;

  TimePs now() const { return now_; }

  // `when` must not be in the past (std::logic_error otherwise).
  EventId schedule_at(TimePs when, Callback callback);
  EventId schedule_after(TimePs delay, Callback callback) { return schedule_at(now_ + delay, std::move(callback)); }

  // True if the event was pending and will not fire; false if it already
  // fired, was cancelled before, or never existed.
  bool cancel(EventId id);

  // Fires the next event; false when none is left.
  bool step();
  // Fires events until none is left.
  void run();
  // Fires every event due at or before `until`, then sets the clock to `until`.
  void run_until(TimePs until);

  std::size_t pending() const { return pending_; }
  std::uint64_t fired() const { return fired_; }

 private:
  // The events of one instant, in the order they were scheduled (ids only
  // grow); `next` is the first not yet fired. A simulated cluster runs in
  // lockstep: a 1024-GPU step fires some fifty events per distinct instant,
  // so a queue of instants holding FIFO lists does far less work than a
  // heap of events.
  struct Instant {
    std::vector<EventId> ids;
    std::size_t next = 0;
  };

  // Callbacks live in a slot table indexed by id - first_slot_id_, so that
  // cancelling is O(1) and the queue holds only ids. An empty slot is an
  // event that fired or was cancelled; the front is trimmed as it empties.
  Callback* slot(EventId id);
  void drop_fired_slots();
  // The earliest instant with an event left to fire (cancelled ones are
  // skipped and dropped), or instants_.end().
  std::map<TimePs, Instant>::iterator next_instant();

  TimePs now_ = 0;
  EventId next_id_ = 1;
  EventId first_slot_id_ = 1;
  std::size_t pending_ = 0;
  std::uint64_t fired_ = 0;
  std::map<TimePs, Instant> instants_;
  std::map<TimePs, Instant>::iterator last_scheduled_ = instants_.end();  // most events repeat its time
  std::vector<std::vector<EventId>> spare_lists_;  // emptied lists, kept for their capacity
  std::deque<Callback> slots_;
};

}  // namespace shardsim::sim
