// simulate: plays a Program on a modelled cluster and returns the
// predicted Timeline (DESIGN.md, "Models inside the simulator").
//
// Every rank is simulated, rank r on GPU options.gpu_of_rank[r] (GPU r when
// empty; topology/placement.h makes these). Per rank:
//   - each stream runs its ops in program order, one at a time; an op starts
//     once it is at the head of its stream and every op it depends on has
//     ended (CUDA streams and events);
//   - compute ops take kernel_seconds() (kernel_time.h); while any collective
//     of the same rank is moving data they progress 1 + s times slower, s the
//     profile's interference_slowdown; compute ops running at once on n of
//     the rank's streams share its GPU, each progressing n times slower;
//   - a collective occupies its stream from the moment the rank issues it. It
//     starts moving data when every member of its group has issued it (as in
//     NCCL, so a straggler delays everyone), with the algorithm and protocol
//     NCCL would pick for its size (selection.h), on one shared FlowNetwork
//     (contention between concurrent collectives included) or from its
//     alpha-beta cost (analytical mode, no contention), or the profile's
//     measured time for that collective and group shape (table mode);
//   - on the flow network, a group whose collectives never share a link with
//     any other group's (a tensor-parallel group alone in its node, say) has
//     each call take the time it takes alone, simulated once per plan and
//     size (lone_collectives.h): the same timeline at a fraction of the work;
//   - memory ops allocate or free at once; the rank's memory starts at the
//     program's resident bytes. The first allocation past the GPU's capacity
//     stops the simulation: the Timeline reports where and with what
//     breakdown instead of simulating past it.
//
// mirror_ranks is the search's fast estimate. Only representatives are
// played: rank 0 and, transitively, every member of a group of a played rank
// whose members run different op lists (a pipeline's stage pairs), so one
// rank per stage. Every other rank is taken to mirror the played rank of its
// op list: a collective starts as soon as its played members have issued it
// and takes the analytical (or table) time of the slowest of the groups it
// stands for (those of its communicator whose ranks run the same op list),
// groups told apart by how their GPUs sit on nodes and leaves. On congruent
// groups it equals the analytical mode on the played ranks' timelines, at a
// thousandth of the work on 1024 ranks; the other ranks' timelines are empty.
#pragma once

#include "calib/profile.h"
#include "sim/collective_runner.h"
#include "sim/step/collective_choices.h"
#include "topology/cluster.h"
#include "topology/routing.h"
#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::sim {

struct StepSimulationOptions {
  NetworkMode network = NetworkMode::flow;
  // Called about a hundred times over a run, for a progress bar.
  std::function<void(double fraction_done)> on_progress;
  std::vector<topology::GpuId> gpu_of_rank;  // empty: rank r on GPU r
  bool mirror_ranks = false;                 // analytical or table network only
  // Shared across runs on one cluster and profile (a search); a private
  // one is used when null.
  CollectiveChoices* choices = nullptr;
  // Ranks whose op timings the Timeline keeps; nullopt keeps every rank's.
  // Step time, peak memory and the rest cover every rank either way. Every
  // rank's timings of a 1024-GPU pipeline step are half a gigabyte, and a
  // report or a search reads one rank's.
  std::optional<std::vector<int>> timed_ranks;
  // false plays the flows of lone groups' calls too: a check on the shortcut.
  bool lone_shortcut = true;
};

// Throws InputError when the Program has more ranks than the cluster has GPUs
// or the profile lacks a dtype the Program uses; std::invalid_argument for a
// gpu_of_rank of the wrong size, a timed rank outside the Program, or
// mirror_ranks on the flow network.
workloads::Timeline simulate(const workloads::Program& program, const topology::Cluster& cluster,
                           const topology::Router& router, const calib::Profile& profile,
                           const StepSimulationOptions& options = {});

}  // namespace shardsim::sim
