#include "sim/report/chrome_trace.h"
#include "workloads/ir/collective_calls.h"

#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

namespace shardsim::sim {

using workloads::OpKind;

void write_chrome_trace(std::ostream& out, const workloads::Program& program, const workloads::Timeline& timeline,
                        const std::vector<int>& ranks) {
  const auto us = [](TimePs t) { return microseconds_from_picoseconds(t); };
  const auto call_ids = workloads::collective_call_ids(program);
  bool first = true;
  const auto emit = [&](const nlohmann::json& event) {
    out << (first ? "\n" : ",\n") << event.dump();
    first = false;
  };
  out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
  // Per call: the recorded members so far, to chain flow arrows through them.
  struct Member {
    int rank, stream;
    TimePs start;
  };
  std::map<std::int64_t, Member> previous_member;
  std::int64_t flow_id = 0;
  for (int rank : ranks) {
    const auto& rank_program = program.program_of(rank);
    const auto& timings = timeline.ops[static_cast<std::size_t>(rank)];
    emit({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    emit({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
    for (std::size_t s = 0; s < program.streams.size(); ++s) {
      emit({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", s}, {"args", {{"name", program.streams[s]}}}});
    }
    double memory = 0;
    for (double bytes : rank_program.resident_bytes) memory += bytes;
    emit({{"ph", "C"}, {"name", "memory GiB"}, {"pid", rank}, {"ts", 0.0}, {"args", {{"GiB", memory / (1 << 30)}}}});
    for (std::size_t i = 0; i < rank_program.ops.size(); ++i) {
      const workloads::Op& op = rank_program.ops[i];
      const workloads::OpTiming& t = timings[i];
      if (t.start < 0 || t.end < 0) continue;
      if (op.kind == OpKind::memory) {
        memory += op.bytes;
        emit({{"ph", "C"}, {"name", "memory GiB"}, {"pid", rank}, {"ts", us(t.start)}, {"args", {{"GiB", memory / (1 << 30)}}}});
        continue;
      }
      nlohmann::json args;
      std::string category;
      if (op.kind == OpKind::compute) {
        category = std::string(workloads::to_string(op.kernel));
        args = {{"flops", op.flops}, {"hbm_bytes", op.hbm_bytes}};
      } else {
        category = std::string(workloads::to_string(op.collective));
        const auto& communicator = program.communicators[static_cast<std::size_t>(op.communicator)];
        args = {{"bytes", op.bytes}, {"communicator", communicator.name}, {"group_size", communicator.group_size()},
                {"call", call_ids[static_cast<std::size_t>(rank)][i]}};
      }
      emit({{"ph", "X"}, {"name", op.name}, {"cat", category}, {"pid", rank}, {"tid", op.stream}, {"ts", us(t.start)},
            {"dur", us(t.end - t.start)}, {"args", args}});
      if (op.kind == OpKind::collective && t.moving > t.start && t.moving <= t.end) {
        // Nested in the call's slice: the part before its last member issued it.
        emit({{"ph", "X"}, {"name", "waiting for other ranks"}, {"cat", "waiting"}, {"pid", rank}, {"tid", op.stream},
              {"ts", us(t.start)}, {"dur", us(t.moving - t.start)}});
      }
      if (op.kind == OpKind::collective) {
        const std::int64_t call = call_ids[static_cast<std::size_t>(rank)][i];
        const auto found = previous_member.find(call);
        if (found != previous_member.end()) {
          const Member& from = found->second;
          emit({{"ph", "s"}, {"name", "collective"}, {"cat", "collective"}, {"id", flow_id}, {"pid", from.rank},
                {"tid", from.stream}, {"ts", us(from.start)}});
          emit({{"ph", "f"}, {"bp", "e"}, {"name", "collective"}, {"cat", "collective"}, {"id", flow_id}, {"pid", rank},
                {"tid", op.stream}, {"ts", us(t.start)}});
          ++flow_id;
        }
        previous_member[call] = {rank, op.stream, t.start};
      }
    }
  }
  out << "\n]}\n";
}

}  // namespace shardsim::sim
