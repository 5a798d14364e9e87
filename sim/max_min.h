// Max-min fair sharing of link bandwidth among flows.
//
// Each flow f uses links with weights w(l, f): moving one byte of f puts
// w(l, f) bytes on link l (a flow split over parallel paths has weights
// below 1; a pipelined ring channel that crosses one link with two of its hops
// has weight 2). Rates r_f are max-min fair: no rate can grow without
// shrinking a smaller or equal one, subject to sum_f w(l, f) r_f <= c_l.
//
// Progressive filling: all unfixed flows rise together; the link whose
// residual capacity runs out first, at level (c_l - fixed load) / (weight of
// its unfixed flows), fixes every unfixed flow through it at that level. A
// heap orders links by level; a link's level never drops as flows elsewhere
// are fixed, so stale heap entries are skipped lazily. Cost O(E log L) for E
// flow-link entries over L links.
#pragma once

#include "topology/routing.h"

#include <cstdint>
#include <span>
#include <vector>

namespace shardsim::sim {

using topology::LinkId;
using topology::LinkUse;

class MaxMinSolver {
 public:
  // Rates (bytes per second) for `flows`, written to `rates` (same order).
  // `capacity` is indexed by LinkId; only links the flows use are read. A flow
  // with no links gets an infinite rate.
  void solve(std::span<const std::span<const LinkUse>> flows, std::span<const double> capacity,
             std::vector<double>& rates);

 private:
  struct LinkState {
    double residual = 0;
    double weight = 0;          // total weight of unfixed flows
    double initial_weight = 0;  // for a relative "no weight left" test
    std::uint32_t version = 0;
    std::uint32_t first = 0, count = 0, filled = 0;  // slice of members_
    bool changed = false;                            // listed in changed_
  };

  // Scratch buffers indexed by LinkId, kept between calls so that repeated
  // solves do not allocate; only entries of touched links are reset.
  std::vector<LinkState> links_;
  std::vector<std::uint32_t> touched_;
  std::vector<std::uint32_t> members_;  // flow indices grouped by link
  std::vector<std::uint32_t> changed_;  // links touched while fixing one level
  std::vector<char> fixed_;
};

}  // namespace shardsim::sim
