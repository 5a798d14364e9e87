// PlanSearch: which plan and placement train fastest within the GPUs' memory
// (issue 5; DESIGN.md: enumerate plans -> memory filter -> fast estimate ->
// simulate the best -> ranked table / Pareto front).
//
//  1. every candidate of the plan space (plan_space.h) is checked against the
//     memory model (estimate_step_memory, step_compiler.h) and the limit;
//     those above it are rejected with their breakdown;
//  2. each one left is compiled and estimated: one rank per pipeline stage
//     played with every peer mirroring it, collectives at their analytical
//     cost on the slowest group they stand for (step_simulator.h,
//     mirror_ranks);
//  3. the `simulate` fastest estimates, and (unless asked not to) every plan
//     on the estimates' Pareto front of memory against time, are simulated in
//     full on the flow network (all ranks, all flows, contention included);
//  4. the simulated plans that fit are ranked by step time (ties by
//     enumeration order), and their Pareto front of peak memory against step
//     time is drawn.
// The work of steps 2 and 3 can be shared among processes (WorkShare): each
// evaluates every size-th candidate and the numbers are summed across them,
// so every process ends with the same arrays as a lone one: the same output,
// byte for byte. Within a process the candidates run on `threads` threads,
// each with its own collective choices (a candidate's numbers do not depend
// on what its thread evaluated before), so the output does not depend on the
// thread count either.
#pragma once

#include "calib/profile.h"
#include "sim/report/step_report.h"
#include "sim/search/plan_space.h"
#include "sim/step/collective_choices.h"
#include "topology/cluster.h"
#include "topology/routing.h"
#include "workloads/inputs/model.h"
#include "workloads/ir/program.h"
#include "workloads/memory/memory_model.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::sim {

struct SearchRequest {
  workloads::ModelSpec model;
  workloads::TrainingConfig training;
  int gpus = 0;
  SearchSpace space;
  std::size_t simulate = 16;  // fastest estimates simulated on the flow network
  // Also simulate every plan on the estimates' Pareto front of memory against
  // time (for the front the table draws); off when only the fastest matters.
  bool simulate_pareto_front = true;
};

// Process `rank` of `size` evaluates candidates rank, rank + size, ...,
// on `threads` threads; sum() adds a vector element-wise over all
// processes, in place (MPI_Allreduce), called on the thread that called run();
// alone, it does nothing.
struct WorkShare {
  int rank = 0;
  int size = 1;
  int threads = 1;
  std::function<void(std::vector<double>& values)> sum;
};

// Progress of the long phases, for a progress bar. phase() is called from
// the thread that called run(); advance() from the search's threads, at once:
// an implementation makes it safe to.
class SearchProgress {
 public:
  virtual ~SearchProgress() = default;
  virtual void phase(const std::string& label, std::size_t total) = 0;
  virtual void advance() = 0;
};

struct StepEstimate {
  double step_seconds = 0;
  double peak_memory_bytes = 0;
  double exposed_communication_seconds = 0;
  double spine_bytes = 0;
  bool out_of_memory = false;
};

struct SimulatedStep {
  double step_seconds = 0;
  double mfu = 0;
  double tokens_per_gpu_per_second = 0;
  double peak_memory_bytes = 0;
  double compute_seconds = 0;  // rank 0's breakdown
  double exposed_communication_seconds = 0;
  double idle_seconds = 0;
  double waiting_seconds = 0;  // for other ranks: pipeline bubbles, stragglers
  double spine_bytes = 0;
  bool out_of_memory = false;
};

struct CandidateResult {
  workloads::MemoryBreakdown memory;  // the memory model's
  bool fits = false;                  // memory.total() within the limit
  std::optional<StepEstimate> estimate;
  std::optional<SimulatedStep> simulation;
};

struct SearchResult {
  std::vector<Candidate> candidates;
  std::vector<CandidateResult> results;  // by candidate index
  std::vector<std::size_t> ranked;       // simulated, in memory, fastest first
  std::vector<std::size_t> pareto;       // of `ranked`: nothing else both smaller and faster
  std::size_t smallest = 0;              // the candidate the memory model gives the least memory
  std::size_t estimated = 0, simulated = 0;
};

class PlanSearch {
 public:
  // The cluster's GPU memory is the limit plans must fit in.
  PlanSearch(const topology::Cluster& cluster, const topology::Router& router, const calib::Profile& profile);

  SearchResult run(const SearchRequest& request, const WorkShare& share = {}, SearchProgress* progress = nullptr);
  const topology::Cluster& cluster() const { return cluster_; }

  // The pieces, for --explain and for tests; `worker` names the thread's
  // collective choices (0 outside run()).
  workloads::Program compile(const SearchRequest& request, const Candidate& candidate) const;
  StepEstimate estimate(const workloads::Program& program, const Candidate& candidate, int worker = 0);
  // Every rank on the flow network; the Timeline keeps rank 0's op timings.
  workloads::Timeline simulate(const workloads::Program& program, const Candidate& candidate, int worker = 0);
  SimulatedStep summarize(const workloads::Program& program, const workloads::Timeline& timeline) const;

 private:
  CollectiveChoices& choices(int worker);

  const topology::Cluster& cluster_;
  const topology::Router& router_;  // shared by the threads: its lazy tables fill once
  const calib::Profile& profile_;
  // One per thread, kept across runs (a capacity plan searches several GPU
  // counts over the same groups).
  std::vector<std::unique_ptr<CollectiveChoices>> choices_;
};

// "needs 91.2 GiB > 80.0 GiB: optimizer states 48.0, ..." for a rejection.
std::string memory_rejection(const workloads::MemoryBreakdown& memory, double limit_bytes);

}  // namespace shardsim::sim
