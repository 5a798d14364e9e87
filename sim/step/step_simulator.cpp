#include "sim/step/step_simulator.h"

#include "sim/collectives/selection.h"
#include "sim/step/lone_collectives.h"
#include "sim/step/played_ranks.h"
#include "sim/step/program_index.h"
#include "topology/base/json_input.h"

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>

namespace shardsim::sim {

namespace {

using workloads::CollectiveOp;
using workloads::Op;
using workloads::OpKind;
using workloads::Program;
using workloads::RankProgram;

// A run of kernels in flight on one stream (run_kernels), tracked only when
// its speed can change: one piece of work whose speed changes as the rank's
// collectives start and stop moving data (interference) and as runs on its
// other compute streams start and end (they share the GPU).
// Its kernels are the stream's order from `first` to the cursor's head (the
// stream is busy, so the head stays put until the run's last kernel ends).
struct RunningKernels {
  std::uint32_t first = 0;  // position of the run's first op in its stream's order
  double work_ps = 0;       // the whole run's, at full speed
  double remaining_ps = 0;  // at full speed
  double speed = 1;
  TimePs since = 0;
  EventId event = kNoEvent;
  bool active = false;
};

// One stream of one rank: its ops in program order and the next to start.
struct StreamCursor {
  const std::uint32_t* order = nullptr;
  std::uint32_t size = 0;
  std::uint32_t head = 0;
  bool busy = false;  // an op of the stream has started and not ended
};

struct RankState {
  int program = 0;
  std::vector<std::uint16_t> pending;  // unfinished dependencies per op (ProgramIndex bounds them)
  std::vector<std::uint32_t> calls;  // collective calls made, per communicator
  workloads::MemoryBytes memory{};
  double memory_total = 0;
  int collectives_moving = 0;
  int kernels_running = 0;  // runs in flight on its compute streams, which share the GPU
  bool speed_unsettled = false;  // listed in StepSimulation::unsettled_
  std::vector<RunningKernels> running;  // per stream
};

// The k-th call on one group: its members as they issue it.
struct Instance {
  CollectiveOp kind = CollectiveOp::all_reduce;
  double bytes = 0;
  int root = 0;
  bool done = false;
  std::vector<std::pair<int, std::uint32_t>> members;  // (rank, op)
};

// A group's calls from the oldest not yet landed to the newest issued, in a
// ring that keeps its Instances (and their member lists' room) for the
// calls after them: a group rarely has more than two calls open.
class GroupCalls {
 public:
  Instance& operator[](std::uint64_t call) { return ring_[call % ring_.size()]; }

  // Call `call` as a member issues it, opened (with any before it) if new.
  Instance& issue(std::uint64_t call) {
    if (call >= end_) {
      if (call + 1 - first_ > ring_.size()) grow(call + 1 - first_);
      for (std::uint64_t k = end_; k <= call; ++k) {
        Instance& fresh = (*this)[k];
        fresh.done = false;
        fresh.members.clear();
      }
      end_ = call + 1;
    }
    return (*this)[call];
  }

  // Forgets the landed calls at the front.
  void retire() {
    while (first_ < end_ && (*this)[first_].done) ++first_;
  }

 private:
  void grow(std::uint64_t needed) {
    std::vector<Instance> bigger(std::max<std::size_t>({needed, 2 * ring_.size(), 2}));
    for (std::uint64_t k = first_; k < end_; ++k) bigger[k % bigger.size()] = std::move((*this)[k]);
    ring_ = std::move(bigger);
  }

  std::uint64_t first_ = 0;  // the oldest call not yet landed
  std::uint64_t end_ = 0;    // one past the newest call issued
  std::vector<Instance> ring_;
};

// What launch() looked up for one (group, kind, root) of call, and the
// choice for the size it last saw: a step repeats the same few calls
// thousands of times.
struct CallChoice {
  CollectiveOp kind = CollectiveOp::all_reduce;
  int root = 0;
  CollectiveChoices::Group* group = nullptr;
  double bytes = -1;
  const AlgorithmCandidate* choice = nullptr;
  LoneCollectives::Alone* lone = nullptr;  // a lone group's call of this size, once it has been made
};

class StepSimulation {
 public:
  StepSimulation(const Program& program, const topology::Cluster& cluster, const topology::Router& router,
                 const calib::Profile& profile, const StepSimulationOptions& options)
      : program_(program),
        cluster_(cluster),
        router_(router),
        profile_(profile),
        options_(options),
        capacity_(cluster.spec().node.gpu_memory_bytes),
        slowdown_(profile.compute.interference_slowdown),
        own_choices_(options.choices ? nullptr : std::make_unique<CollectiveChoices>(cluster, router, profile)),
        choices_(options.choices ? *options.choices : *own_choices_) {
    if (options.network == NetworkMode::flow) {
      network_ = std::make_unique<FlowNetwork>(engine_, achievable_link_capacities(cluster, profile));
    }
  }

  workloads::Timeline run();

 private:
  void drain();
  void try_stream(int rank, int stream);
  void start(int rank, std::uint32_t op);
  void finish(int rank, std::uint32_t op);
  void count_finished();
  void arrive(int rank, std::uint32_t op);
  void launch(int communicator, int group, std::uint64_t call);
  void launch_mirrored(int communicator, int group, std::uint64_t call);
  void land(int communicator, int group, std::uint64_t call);
  // Without flows: the profile's measured time in table mode where it has
  // one, else the choice's alpha-beta cost.
  double call_seconds(const CollectiveChoices::Group& group, const AlgorithmCandidate& choice,
                      const Instance& instance) const;
  void set_moving(int rank, int delta);
  void set_kernels_running(int rank, int delta);
  void unsettle(int rank);
  double kernel_speed(const RankState& state) const;
  void settle_speeds();
  void start_moving(int rank, std::uint32_t op) {
    if (workloads::OpTiming* t = timing(rank, op)) t->moving = engine_.now();
    set_moving(rank, +1);
  }
  void schedule_kernels(int rank, int stream, RunningKernels& kernels);
  void retime_kernels(int rank, int stream, const RunningKernels& kernels);
  std::pair<std::uint32_t, TimePs> run_kernels(int rank, int stream, std::uint32_t first, double speed);
  CallChoice& choices(int communicator, int group, const CollectiveCall& call, double bytes);
  int program_of_group(int communicator, int group) const;
  void check_options() const;

  // Null for a rank whose timings the Timeline does not keep.
  workloads::OpTiming* timing(int rank, std::uint32_t op) {
    auto& timings = timeline_.ops[static_cast<std::size_t>(rank)];
    return timings.empty() ? nullptr : &timings[op];
  }
  void report_deadlock() const;

  std::size_t cursor_index(int rank, int stream) const {
    return static_cast<std::size_t>(rank) * program_.streams.size() + static_cast<std::size_t>(stream);
  }
  StreamCursor& cursor(int rank, int stream) { return cursors_[cursor_index(rank, stream)]; }
  const StreamCursor& cursor(int rank, int stream) const { return cursors_[cursor_index(rank, stream)]; }
  const Op& op_of(int rank, std::uint32_t op) const {
    return program_.programs[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(rank)].program)].ops[op];
  }
  const ProgramIndex& index_of(int rank) const {
    return indexes_[static_cast<std::size_t>(ranks_[static_cast<std::size_t>(rank)].program)];
  }

  const Program& program_;
  const topology::Cluster& cluster_;
  const topology::Router& router_;
  const calib::Profile& profile_;
  const StepSimulationOptions& options_;
  double capacity_;
  double slowdown_;
  // Some op list has kernels on more than one stream, which can run at once.
  bool shared_gpu_ = false;
  std::unique_ptr<CollectiveChoices> own_choices_;
  CollectiveChoices& choices_;

  EventEngine engine_;
  std::unique_ptr<FlowNetwork> network_;
  std::unique_ptr<LoneCollectives> lone_;  // flow network, with the shortcut on
  std::vector<ProgramIndex> indexes_;
  std::vector<RankState> ranks_;
  std::vector<StreamCursor> cursors_;  // [rank x streams + stream]
  std::vector<std::vector<GroupCalls>> calls_;  // [communicator][group]
  std::vector<std::vector<std::vector<CallChoice>>> call_choices_;  // [communicator][group]: one per kind and root
  PlayedRanks played_;
  std::map<std::pair<int, int>, GroupKinds> group_kinds_;  // mirror mode, by (communicator, op list)
  std::vector<std::pair<int, int>> ready_;  // (rank, stream) to look at
  std::vector<int> unsettled_;  // ranks whose moving count crossed zero since the last settle_speeds()
  workloads::Timeline timeline_;
  bool stopped_ = false;
  TimePs last_end_ = 0;
  std::size_t finished_ = 0;
  std::size_t total_ops_ = 0;
  std::size_t next_progress_ = 0;
};

workloads::Timeline StepSimulation::run() {
  if (program_.ranks > cluster_.gpu_count()) {
    throw InputError("the program has " + std::to_string(program_.ranks) + " ranks but cluster " +
                     cluster_.spec().name + " has " + std::to_string(cluster_.gpu_count()) + " GPUs");
  }
  check_options();
  const std::size_t streams = program_.streams.size();
  for (const RankProgram& rank_program : program_.programs) {
    indexes_.emplace_back(rank_program, streams, profile_);
    shared_gpu_ = shared_gpu_ || indexes_.back().compute_streams > 1;
  }
  calls_.resize(program_.communicators.size());
  call_choices_.resize(program_.communicators.size());
  for (std::size_t c = 0; c < program_.communicators.size(); ++c) {
    calls_[c].resize(program_.communicators[c].groups.size());
    call_choices_[c].resize(program_.communicators[c].groups.size());
  }
  played_ = played_ranks(program_, options_.mirror_ranks);
  if (network_ && options_.lone_shortcut) {
    lone_ = std::make_unique<LoneCollectives>(
        program_, cluster_, profile_, [this](int communicator, int group, CollectiveOp kind, int root, double bytes) {
          CallChoice& choice = choices(communicator, group, {kind, root}, bytes);
          return choice.group->plan(*choice.choice);
        });
  }
  ranks_.resize(static_cast<std::size_t>(program_.ranks));
  cursors_.resize(ranks_.size() * streams);
  timeline_.ops.resize(ranks_.size());
  std::vector<char> timed(ranks_.size(), options_.timed_ranks ? 0 : 1);
  if (options_.timed_ranks) {
    for (int rank : *options_.timed_ranks) timed[static_cast<std::size_t>(rank)] = 1;
  }
  timeline_.peak_memory.resize(ranks_.size());
  for (int rank : played_.ranks) {
    RankState& state = ranks_[static_cast<std::size_t>(rank)];
    state.program = program_.program_of_rank[static_cast<std::size_t>(rank)];
    const RankProgram& rank_program = program_.program_of(rank);
    state.pending.resize(rank_program.ops.size());
    for (std::size_t i = 0; i < rank_program.ops.size(); ++i) {
      state.pending[i] = static_cast<std::uint16_t>(rank_program.ops[i].deps.size());
    }
    state.calls.assign(program_.communicators.size(), 0);
    state.running.resize(streams);
    for (std::size_t s = 0; s < streams; ++s) {
      const auto& order = indexes_[static_cast<std::size_t>(state.program)].stream_ops[s];
      cursor(rank, static_cast<int>(s)) = {order.data(), static_cast<std::uint32_t>(order.size()), 0, false};
    }
    for (std::size_t c = 0; c < state.memory.size(); ++c) {
      state.memory[c] = rank_program.resident_bytes[c];
      state.memory_total += state.memory[c];
    }
    timeline_.peak_memory[static_cast<std::size_t>(rank)] = {state.memory_total, state.memory, 0};
    if (timed[static_cast<std::size_t>(rank)]) timeline_.ops[static_cast<std::size_t>(rank)].resize(rank_program.ops.size());
    total_ops_ += rank_program.ops.size();
    for (std::size_t s = 0; s < streams; ++s) ready_.emplace_back(rank, static_cast<int>(s));
  }
  next_progress_ = total_ops_ / 100;
  drain();
  while (!stopped_ && engine_.step()) {
  }
  if (timeline_.out_of_memory) {
    // Runs of kernels wrote their times ahead (run_kernels); the timeline
    // holds only what had happened when the allocation failed.
    const TimePs failed = timeline_.out_of_memory->when;
    for (auto& ops : timeline_.ops) {
      for (workloads::OpTiming& timing : ops) {
        if (timing.start > failed) timing.start = -1;
        if (timing.end > failed) timing.end = -1;
      }
    }
    timeline_.step_time = failed;
  } else {
    if (finished_ != total_ops_) report_deadlock();
    timeline_.step_time = last_end_;
  }
  if (network_) {
    timeline_.link_bytes = network_->link_bytes();
    if (lone_) lone_->add_link_bytes(timeline_.link_bytes);
    for (std::size_t link = 0; link < timeline_.link_bytes.size(); ++link) {
      if (cluster_.is_leaf_uplink(static_cast<topology::LinkId>(link))) timeline_.spine_bytes += timeline_.link_bytes[link];
    }
  }
  timeline_.events = engine_.fired();
  return std::move(timeline_);
}

// Names an op that cannot go on: the one in flight, or else the next one, on
// the first stream that has not run to its end.
void StepSimulation::report_deadlock() const {
  for (int rank : played_.ranks) {
    for (std::size_t s = 0; s < program_.streams.size(); ++s) {
      const StreamCursor& stream = cursor(rank, static_cast<int>(s));
      if (stream.head == stream.size && !stream.busy) continue;
      const bool in_flight = stream.busy;
      const std::uint32_t op = stream.order[in_flight ? stream.head - 1 : stream.head];
      throw std::runtime_error("the program deadlocks: op " + std::string(op_of(rank, op).name) + " of rank " +
                               std::to_string(rank) + " never " + (in_flight ? "ends" : "starts"));
    }
  }
}

void StepSimulation::drain() {
  while (!ready_.empty() && !stopped_) {
    const auto [rank, stream] = ready_.back();
    ready_.pop_back();
    try_stream(rank, stream);
  }
  settle_speeds();
}

void StepSimulation::try_stream(int rank, int stream) {
  StreamCursor& at = cursor(rank, stream);
  const std::uint16_t* pending = ranks_[static_cast<std::size_t>(rank)].pending.data();
  while (!stopped_ && !at.busy && at.head < at.size) {
    const std::uint32_t op = at.order[at.head];
    if (pending[op] > 0) return;
    ++at.head;
    start(rank, op);
  }
}

void StepSimulation::start(int rank, std::uint32_t index) {
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  const OpHead head = index_of(rank).heads[index];
  if (workloads::OpTiming* t = timing(rank, index)) t->start = engine_.now();
  switch (head.kind) {
    case OpKind::memory: {
      const Op& op = op_of(rank, index);
      const auto category = static_cast<std::size_t>(op.memory);
      state.memory[category] += op.bytes;
      state.memory_total += op.bytes;
      if (op.bytes > 0 && state.memory_total > capacity_) {
        timeline_.out_of_memory =
            workloads::OutOfMemory{rank, std::string(op.name), engine_.now(), capacity_, op.bytes, state.memory};
        stopped_ = true;
        return;
      }
      workloads::MemoryPeak& peak = timeline_.peak_memory[static_cast<std::size_t>(rank)];
      if (state.memory_total > peak.total_bytes) peak = {state.memory_total, state.memory, engine_.now()};
      finish(rank, index);
      return;
    }
    case OpKind::compute: {
      const int stream = head.stream;
      StreamCursor& at = cursor(rank, stream);
      at.busy = true;
      if (slowdown_ > 0 || shared_gpu_) {
        set_kernels_running(rank, +1);
        const double speed = kernel_speed(state);
        const std::uint32_t first = at.head - 1;
        const TimePs work = run_kernels(rank, stream, index, speed).second;
        RunningKernels& kernels = state.running[static_cast<std::size_t>(stream)];
        kernels = {first, static_cast<double>(work), static_cast<double>(work), speed, engine_.now(), kNoEvent, true};
        schedule_kernels(rank, stream, kernels);
      } else {
        const auto [last, work] = run_kernels(rank, stream, index, 1.0);
        engine_.schedule_at(engine_.now() + work, [this, rank, last] {
          finish(rank, last);
          drain();
        });
      }
      return;
    }
    case OpKind::collective:
      cursor(rank, head.stream).busy = true;
      arrive(rank, index);
      return;
  }
}

// A run of kernels needs one event, not one each: while nothing but the
// stream's next op waits for the kernel, and that op is a kernel whose other
// dependencies have all ended, the next kernel starts exactly when this one
// ends, whatever the speed. No other op waits for the kernels before the
// run's last, so they are finished here; their timings assume `speed` until
// retime_kernels says otherwise. Returns the run's last kernel and its work
// at full speed.
std::pair<std::uint32_t, TimePs> StepSimulation::run_kernels(int rank, int stream, std::uint32_t first, double speed) {
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  const ProgramIndex& index = index_of(rank);
  StreamCursor& at = cursor(rank, stream);
  auto& timings = timeline_.ops[static_cast<std::size_t>(rank)];
  const bool timed = !timings.empty();
  const TimePs now = engine_.now();
  const auto at_speed = [&](TimePs work) {
    return now + (speed == 1.0 ? work : static_cast<TimePs>(std::llround(static_cast<double>(work) / speed)));
  };
  std::uint32_t op = first;
  TimePs work = index.kernel_duration[first];
  while (at.head < at.size) {
    const std::uint32_t next = at.order[at.head];
    if (index.heads[next].kind != OpKind::compute) break;
    const std::uint32_t* dependent = index.dependents.data() + index.dependents_begin[op];
    const std::uint32_t* dependents_end = index.dependents.data() + index.dependents_begin[op + 1];
    const bool next_waits = dependent != dependents_end;
    if (std::any_of(dependent, dependents_end, [&](std::uint32_t d) { return d != next; })) break;
    if (state.pending[next] != (next_waits ? 1u : 0u)) break;
    state.pending[next] = 0;
    if (timed) timings[op].end = timings[next].start = at_speed(work);
    count_finished();
    ++at.head;
    op = next;
    work += index.kernel_duration[op];
  }
  return {op, work};
}

void StepSimulation::schedule_kernels(int rank, int stream, RunningKernels& kernels) {
  const TimePs left = static_cast<TimePs>(std::llround(kernels.remaining_ps / kernels.speed));
  // A 16-byte capture fits std::function's small buffer: no allocation.
  kernels.event = engine_.schedule_after(left, [this, rank, stream] {
    ranks_[static_cast<std::size_t>(rank)].running[static_cast<std::size_t>(stream)].active = false;
    set_kernels_running(rank, -1);
    const StreamCursor& at = cursor(rank, stream);
    finish(rank, at.order[at.head - 1]);
    drain();
  });
}

// The run's speed changed now: the kernels that had not ended by now end at
// the new speed. Only the recorded ends move; what the run does is unchanged.
void StepSimulation::retime_kernels(int rank, int stream, const RunningKernels& kernels) {
  auto& timings = timeline_.ops[static_cast<std::size_t>(rank)];
  if (timings.empty()) return;
  const ProgramIndex& index = index_of(rank);
  const StreamCursor& at = cursor(rank, stream);
  const TimePs now = engine_.now();
  const double done = kernels.work_ps - kernels.remaining_ps;
  double work = 0;
  for (std::uint32_t position = kernels.first; position + 1 < at.head; ++position) {
    const std::uint32_t op = at.order[position];
    work += static_cast<double>(index.kernel_duration[op]);
    if (work <= done) continue;
    timings[op].end = timings[at.order[position + 1]].start =
        now + static_cast<TimePs>(std::llround((work - done) / kernels.speed));
  }
}

// The kernels' speed follows the count only once the instant's callback is
// done (drain() ends every one): a collective that lands as the next starts,
// as a ring's steps do, leaves the speed where it was, and the running
// kernels keep their event instead of being rescheduled twice.
void StepSimulation::set_moving(int rank, int delta) {
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  const bool was = state.collectives_moving > 0;
  state.collectives_moving += delta;
  const bool is = state.collectives_moving > 0;
  if (slowdown_ > 0 && was != is) unsettle(rank);
}

// A run starting or ending changes the share of the GPU every other run of
// the rank gets.
void StepSimulation::set_kernels_running(int rank, int delta) {
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  const int before = state.kernels_running;
  state.kernels_running += delta;
  if (std::max(before, state.kernels_running) > 1) unsettle(rank);
}

void StepSimulation::unsettle(int rank) {
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  if (state.speed_unsettled) return;
  state.speed_unsettled = true;
  unsettled_.push_back(rank);
}

// Kernels on n streams at once share the GPU: each run progresses at 1/n of
// its speed, so together they do the work of one GPU (how thread blocks of
// concurrent kernels fill the SMs is not modelled).
double StepSimulation::kernel_speed(const RankState& state) const {
  const double interference = state.collectives_moving > 0 ? 1 / (1 + slowdown_) : 1.0;
  return interference / std::max(state.kernels_running, 1);
}

void StepSimulation::settle_speeds() {
  for (const int rank : unsettled_) {
    RankState& state = ranks_[static_cast<std::size_t>(rank)];
    state.speed_unsettled = false;
    const double speed = kernel_speed(state);
    for (std::size_t s = 0; s < state.running.size(); ++s) {
      RunningKernels& kernels = state.running[s];
      if (!kernels.active || kernels.speed == speed) continue;
      kernels.remaining_ps -= static_cast<double>(engine_.now() - kernels.since) * kernels.speed;
      kernels.remaining_ps = std::max(kernels.remaining_ps, 0.0);
      kernels.speed = speed;
      kernels.since = engine_.now();
      engine_.cancel(kernels.event);
      retime_kernels(rank, static_cast<int>(s), kernels);
      schedule_kernels(rank, static_cast<int>(s), kernels);
    }
  }
  unsettled_.clear();
}

void StepSimulation::finish(int rank, std::uint32_t index) {
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  const ProgramIndex& program_index = index_of(rank);
  const int stream = program_index.heads[index].stream;
  if (workloads::OpTiming* t = timing(rank, index)) t->end = engine_.now();
  last_end_ = engine_.now();
  cursor(rank, stream).busy = false;
  ready_.emplace_back(rank, stream);
  for (std::uint32_t d = program_index.dependents_begin[index]; d < program_index.dependents_begin[index + 1]; ++d) {
    const std::uint32_t dependent = program_index.dependents[d];
    if (--state.pending[dependent] == 0) ready_.emplace_back(rank, program_index.heads[dependent].stream);
  }
  count_finished();
}

void StepSimulation::count_finished() {
  if (++finished_ >= next_progress_ && options_.on_progress) {
    options_.on_progress(static_cast<double>(finished_) / static_cast<double>(total_ops_));
    next_progress_ = finished_ + std::max<std::size_t>(total_ops_ / 100, 1);
  }
}

void StepSimulation::arrive(int rank, std::uint32_t index) {
  const Op& op = op_of(rank, index);
  RankState& state = ranks_[static_cast<std::size_t>(rank)];
  const auto& communicator = program_.communicators[static_cast<std::size_t>(op.communicator)];
  const int group = communicator.group_of_rank[static_cast<std::size_t>(rank)];
  GroupCalls& calls = calls_[static_cast<std::size_t>(op.communicator)][static_cast<std::size_t>(group)];
  const std::uint64_t call = state.calls[static_cast<std::size_t>(op.communicator)]++;
  Instance& instance = calls.issue(call);
  if (instance.members.empty()) {
    instance.kind = op.collective;
    instance.bytes = op.bytes;
    instance.root = op.root;
  } else if (instance.kind != op.collective || instance.bytes != op.bytes || instance.root != op.root) {
    throw std::logic_error("collective mismatch: op " + std::string(op.name) + " of rank " + std::to_string(rank) +
                           " meets a different call on communicator " + communicator.name);
  }
  instance.members.emplace_back(rank, index);
  if (static_cast<int>(instance.members.size()) < played_.arrivals_needed[static_cast<std::size_t>(op.communicator)][static_cast<std::size_t>(group)]) {
    return;
  }
  if (options_.mirror_ranks) {
    launch_mirrored(op.communicator, group, call);
  } else {
    launch(op.communicator, group, call);
  }
}

void StepSimulation::check_options() const {
  if (options_.timed_ranks) {
    for (int rank : *options_.timed_ranks) {
      if (rank < 0 || rank >= program_.ranks) {
        throw std::invalid_argument("timed rank " + std::to_string(rank) + " is not a rank of the program (0 to " +
                                    std::to_string(program_.ranks - 1) + ")");
      }
    }
  }
  if (!options_.gpu_of_rank.empty()) {
    if (options_.gpu_of_rank.size() != static_cast<std::size_t>(program_.ranks)) {
      throw std::invalid_argument("gpu_of_rank lists " + std::to_string(options_.gpu_of_rank.size()) +
                                  " GPUs for a program of " + std::to_string(program_.ranks) + " ranks");
    }
  }
  if (options_.mirror_ranks) {
    if (options_.network == NetworkMode::flow) {
      throw std::invalid_argument("mirror_ranks needs the analytical or table network: flows need every rank");
    }
  }
}

CallChoice& StepSimulation::choices(int communicator, int group, const CollectiveCall& call, double bytes) {
  auto& calls = call_choices_[static_cast<std::size_t>(communicator)][static_cast<std::size_t>(group)];
  auto found = std::find_if(calls.begin(), calls.end(), [&](const CallChoice& c) {
    return c.kind == call.op && c.root == call.root;
  });
  if (found == calls.end()) {
    const auto& ranks = program_.communicators[static_cast<std::size_t>(communicator)].groups[static_cast<std::size_t>(group)];
    calls.push_back({call.op, call.root, &choices_.group(gpus_of_ranks(options_.gpu_of_rank, ranks), call)});
    found = calls.end() - 1;
  }
  if (found->bytes != bytes) {
    found->bytes = bytes;
    found->choice = &found->group->choose(bytes);
    found->lone = nullptr;
  }
  return *found;
}

int StepSimulation::program_of_group(int communicator, int group) const {
  const auto& ranks = program_.communicators[static_cast<std::size_t>(communicator)].groups[static_cast<std::size_t>(group)];
  return program_.program_of_rank[static_cast<std::size_t>(ranks.front())];
}

void StepSimulation::launch_mirrored(int communicator, int group, std::uint64_t call) {
  GroupCalls& calls = calls_[static_cast<std::size_t>(communicator)][static_cast<std::size_t>(group)];
  const Instance& instance = calls[call];
  ++timeline_.collectives;
  for (const auto& [rank, op] : instance.members) start_moving(rank, op);
  // The call stands for the same call on every group its played members
  // mirror: those whose ranks run the same op list.
  const int op_list = program_of_group(communicator, group);
  auto [found, added] = group_kinds_.try_emplace({communicator, op_list});
  if (added) found->second = group_kinds(program_, cluster_, options_.gpu_of_rank, communicator, op_list);
  const GroupKinds& kinds = found->second;
  double seconds = 0;
  if (program_.communicators[static_cast<std::size_t>(communicator)].group_size() > 1 && instance.bytes > 0) {
    const CollectiveCall kind{instance.kind, instance.root};
    for (std::size_t k = 0; k < kinds.representatives.size(); ++k) {
      CollectiveChoices::Group& chosen = choices_.group(kinds.representatives[k], kind);
      const AlgorithmCandidate& choice = chosen.choose(instance.bytes);
      seconds = std::max(seconds, call_seconds(chosen, choice, instance));
      timeline_.spine_bytes += kinds.counts[k] * chosen.spine_bytes_per_byte(choice) * instance.bytes;
    }
  }
  engine_.schedule_after(picoseconds_from_seconds(seconds),
                         [this, communicator, group, call] { land(communicator, group, call); });
}

double StepSimulation::call_seconds(const CollectiveChoices::Group& group, const AlgorithmCandidate& choice,
                                    const Instance& instance) const {
  if (options_.network == NetworkMode::table) {
    const double measured = measured_collective_seconds(profile_, instance.kind, group.layout().size(),
                                                        group.layout().node_count(), instance.bytes);
    if (measured >= 0) return measured;
  }
  return choice.cost.seconds(instance.bytes);
}

void StepSimulation::launch(int communicator, int group, std::uint64_t call) {
  GroupCalls& calls = calls_[static_cast<std::size_t>(communicator)][static_cast<std::size_t>(group)];
  const Instance& instance = calls[call];
  ++timeline_.collectives;
  for (const auto& [rank, op] : instance.members) start_moving(rank, op);
  if (instance.members.size() == 1 || instance.bytes == 0) {
    engine_.schedule_after(0, [this, communicator, group, call] { land(communicator, group, call); });
    return;
  }
  CallChoice& call_choice = choices(communicator, group, {instance.kind, instance.root}, instance.bytes);
  CollectiveChoices::Group& chosen = *call_choice.group;
  const AlgorithmCandidate& choice = *call_choice.choice;
  if (!network_) {
    timeline_.spine_bytes += chosen.spine_bytes_per_byte(choice) * instance.bytes;
    engine_.schedule_after(picoseconds_from_seconds(call_seconds(chosen, choice, instance)),
                           [this, communicator, group, call] { land(communicator, group, call); });
    return;
  }
  if (lone_ && lone_->lone(communicator, group)) {
    if (call_choice.lone == nullptr) call_choice.lone = &lone_->alone(chosen.plan(choice), instance.bytes);
    engine_.schedule_after(lone_->duration(*call_choice.lone),
                           [this, communicator, group, call] { land(communicator, group, call); });
    return;
  }
  run_transfer_plan(engine_, *network_, chosen.plan(choice), instance.bytes,
                    [this, communicator, group, call] { land(communicator, group, call); });
}

void StepSimulation::land(int communicator, int group, std::uint64_t call) {
  GroupCalls& calls = calls_[static_cast<std::size_t>(communicator)][static_cast<std::size_t>(group)];
  Instance& instance = calls[call];
  for (const auto& [rank, op] : instance.members) {
    set_moving(rank, -1);
    finish(rank, op);
  }
  instance.done = true;
  calls.retire();
  drain();
}

}  // namespace

workloads::Timeline simulate(const workloads::Program& program, const topology::Cluster& cluster,
                           const topology::Router& router, const calib::Profile& profile,
                           const StepSimulationOptions& options) {
  return StepSimulation(program, cluster, router, profile, options).run();
}

}  // namespace shardsim::sim
