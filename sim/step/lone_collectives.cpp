#include "sim/step/lone_collectives.h"

#include "sim/collective_runner.h"
#include "sim/collectives/ring_chain.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace shardsim::sim {

namespace {

using workloads::Op;
using workloads::OpKind;

// A kind of call on a communicator: what its plan depends on. Chains have
// one per op: every root's and size's crosses the links of the same ring.
using CallKind = std::tuple<CollectiveOp, int, double>;  // op, root (-1: a chain), bytes

}  // namespace

LoneCollectives::LoneCollectives(const workloads::Program& program, const topology::Cluster& cluster,
                                 const calib::Profile& profile, const PlanOf& plan_of)
    : cluster_(cluster), profile_(profile) {
  const std::size_t communicators = program.communicators.size();
  // Per op list and communicator: the kinds of call made, and on which streams.
  std::vector<std::vector<std::set<CallKind>>> calls(program.programs.size(),
                                                     std::vector<std::set<CallKind>>(communicators));
  std::vector<char> one_stream(communicators, 1);
  for (std::size_t p = 0; p < program.programs.size(); ++p) {
    std::vector<int> stream_of(communicators, -1);
    for (const Op& op : program.programs[p].ops) {
      if (op.kind != OpKind::collective || op.bytes == 0) continue;
      const auto c = static_cast<std::size_t>(op.communicator);
      if (stream_of[c] >= 0 && stream_of[c] != op.stream) one_stream[c] = 0;
      stream_of[c] = op.stream;
      if (!is_chain(op.collective)) {
        calls[p][c].emplace(op.collective, op.root, op.bytes);
      } else if (std::none_of(calls[p][c].begin(), calls[p][c].end(),
                              [&](const CallKind& k) { return std::get<0>(k) == op.collective; })) {
        calls[p][c].emplace(op.collective, -1, op.bytes);
      }
    }
  }

  // Groups numbered across communicators; each link remembers the one group
  // that uses it, or kShared.
  constexpr int kUnused = -1, kShared = -2;
  std::vector<int> first_id(communicators + 1, 0);
  for (std::size_t c = 0; c < communicators; ++c) {
    first_id[c + 1] = first_id[c] + static_cast<int>(program.communicators[c].groups.size());
  }
  std::vector<int> owner(cluster.links().size(), kUnused);
  std::vector<char> conflicted(static_cast<std::size_t>(first_id[communicators]), 0);
  std::vector<char> candidate(conflicted.size(), 0);
  const auto mark = [&](const TransferPlan& plan, int id) {
    for (const Phase& phase : plan.phases) {
      for (const Transfer& transfer : phase.transfers) {
        for (const LinkUse& use : transfer.links) {
          int& holder = owner[static_cast<std::size_t>(use.link)];
          if (holder == id) continue;
          if (holder != kUnused) {
            if (holder != kShared) conflicted[static_cast<std::size_t>(holder)] = 1;
            conflicted[static_cast<std::size_t>(id)] = 1;
            holder = kShared;
          } else {
            holder = id;
          }
        }
      }
    }
  };
  for (std::size_t c = 0; c < communicators; ++c) {
    const auto& groups = program.communicators[c].groups;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      if (groups[g].size() < 2) continue;
      const int id = first_id[c] + static_cast<int>(g);
      const auto p = static_cast<std::size_t>(program.program_of_rank[static_cast<std::size_t>(groups[g].front())]);
      bool chains = false;
      // Sizes share plans (one per algorithm and protocol): each is marked
      // once, and held meanwhile so that no other plan takes its address.
      std::vector<std::shared_ptr<const TransferPlan>> marked;
      for (const auto& [op, root, bytes] : calls[p][c]) {
        chains = chains || root < 0;
        // Any root's chain is the ring less one hop: roots 0 and 1 cover it.
        for (int r : root < 0 ? std::vector<int>{0, 1} : std::vector<int>{root}) {
          auto plan = plan_of(static_cast<int>(c), static_cast<int>(g), op, r, bytes);
          if (std::find(marked.begin(), marked.end(), plan) != marked.end()) continue;
          mark(*plan, id);
          marked.push_back(std::move(plan));
        }
      }
      candidate[static_cast<std::size_t>(id)] = one_stream[c] && !chains && !calls[p][c].empty();
    }
  }
  lone_.resize(communicators);
  for (std::size_t c = 0; c < communicators; ++c) {
    lone_[c].assign(program.communicators[c].groups.size(), 0);
    for (std::size_t g = 0; g < lone_[c].size(); ++g) {
      const auto id = static_cast<std::size_t>(first_id[c]) + g;
      lone_[c][g] = candidate[id] && !conflicted[id];
    }
  }
}

LoneCollectives::Alone& LoneCollectives::alone(const std::shared_ptr<const TransferPlan>& plan, double bytes) {
  auto [it, added] = alone_.try_emplace({plan.get(), bytes});
  Alone& call = it->second;
  if (added) {
    call.plan = plan;
    call.duration = simulate_collective(cluster_, profile_, plan, bytes).duration;
  }
  return call;
}

void LoneCollectives::add_link_bytes(std::vector<double>& link_bytes) const {
  for (const auto& [key, call] : alone_) call.plan->add_link_bytes(key.second, static_cast<double>(call.calls), link_bytes);
}

}  // namespace shardsim::sim
