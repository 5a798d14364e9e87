#include "calib/executor/run_stop.h"

#include <csignal>
#include <sstream>

namespace shardsim::calib {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
struct sigaction g_previous_term {}, g_previous_int {};

extern "C" void record_stop_signal(int signal) { g_stop_signal = signal; }

}  // namespace

StopSignalHandlers::StopSignalHandlers() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
}

StopSignalHandlers::~StopSignalHandlers() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
}

int stop_signal() { return g_stop_signal; }

std::string stop_message(int rank) {
  return "rank " + std::to_string(rank) + ": stopped by signal " + std::to_string(stop_signal()) +
         " (the launcher ends the job when another rank fails)";
}

std::string describe_ranks(const std::vector<int>& ranks) {
  const bool consecutive = !ranks.empty() && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
  if (consecutive && ranks.size() > 2) return "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += ',';
    text += std::to_string(ranks[i]);
  }
  return text;
}

std::string describe_op(const workloads::Program& program, int rank, std::uint32_t index) {
  const workloads::Op& op = program.program_of(rank).ops[index];
  std::ostringstream out;
  out << "'" << op.name << "' (op " << index << ", " << workloads::to_string(op.kind);
  if (op.kind == workloads::OpKind::collective) {
    const auto& communicator = program.communicators[static_cast<std::size_t>(op.communicator)];
    out << " " << workloads::to_string(op.collective) << " of " << static_cast<long long>(op.bytes)
        << " bytes on communicator " << communicator.name << ", " << describe_ranks(communicator.group_of(rank));
  }
  out << ")";
  return out.str();
}

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << seconds << " s";
  return out.str();
}

}  // namespace shardsim::calib
