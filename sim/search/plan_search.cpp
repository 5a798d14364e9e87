#include "sim/search/plan_search.h"

#include "sim/search/parallel_for.h"
#include "sim/step/step_simulator.h"
#include "workloads/compile/step_compiler.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace shardsim::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Numbers travel between processes as doubles, a fixed number per candidate.
constexpr std::size_t kEstimateFields = 5;
constexpr std::size_t kSimulationFields = 10;

void put(const StepEstimate& e, double* out) {
  out[0] = e.step_seconds;
  out[1] = e.peak_memory_bytes;
  out[2] = e.exposed_communication_seconds;
  out[3] = e.spine_bytes;
  out[4] = e.out_of_memory ? 1 : 0;
}

StepEstimate take_estimate(const double* in) { return {in[0], in[1], in[2], in[3], in[4] != 0}; }

void put(const SimulatedStep& s, double* out) {
  out[0] = s.step_seconds;
  out[1] = s.mfu;
  out[2] = s.tokens_per_gpu_per_second;
  out[3] = s.peak_memory_bytes;
  out[4] = s.compute_seconds;
  out[5] = s.exposed_communication_seconds;
  out[6] = s.idle_seconds;
  out[7] = s.waiting_seconds;
  out[8] = s.spine_bytes;
  out[9] = s.out_of_memory ? 1 : 0;
}

SimulatedStep take_simulation(const double* in) {
  return {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7], in[8], in[9] != 0};
}

// Candidates on the Pareto front of (memory, time), given in any order.
template <typename Memory, typename Time>
std::vector<std::size_t> pareto_front(std::vector<std::size_t> indices, Memory memory, Time time) {
  std::sort(indices.begin(), indices.end(), [&](std::size_t a, std::size_t b) {
    if (memory(a) != memory(b)) return memory(a) < memory(b);
    if (time(a) != time(b)) return time(a) < time(b);
    return a < b;
  });
  std::vector<std::size_t> front;
  for (std::size_t i : indices) {
    if (front.empty() || time(i) < time(front.back())) front.push_back(i);
  }
  return front;
}

// Runs evaluate(worker, item, out) on this process's share of `items`, on
// its threads, `fields` numbers each, and returns everyone's numbers.
template <typename Evaluate>
std::vector<double> evaluate_shared(const std::vector<std::size_t>& items, std::size_t fields, const WorkShare& share,
                                    SearchProgress* progress, const std::string& label, Evaluate evaluate) {
  std::vector<double> values(items.size() * fields, 0.0);
  const auto stride = static_cast<std::size_t>(std::max(share.size, 1));
  const auto first = static_cast<std::size_t>(std::max(share.rank, 0));
  const std::size_t mine = items.size() > first ? (items.size() - first + stride - 1) / stride : 0;
  if (progress) progress->phase(label, mine);
  parallel_for(mine, share.threads, [&](int worker, std::size_t j) {
    const std::size_t k = first + j * stride;
    evaluate(worker, items[k], values.data() + k * fields);
    if (progress) progress->advance();
  });
  if (share.sum) share.sum(values);
  return values;
}

}  // namespace

std::string memory_rejection(const workloads::MemoryBreakdown& memory, double limit_bytes) {
  char text[256];
  std::snprintf(text, sizeof text,
                "needs %.1f GiB > %.1f GiB (parameters %.1f, gradients %.1f, optimizer states %.1f, activations %.1f, "
                "buffers %.1f)",
                memory.total() / kGiB, limit_bytes / kGiB, (memory.parameters + memory.secondary_parameters) / kGiB,
                memory.gradients / kGiB, memory.optimizer_states / kGiB, memory.activations / kGiB,
                (memory.gathered_parameters + memory.communication_buffers) / kGiB);
  return text;
}

PlanSearch::PlanSearch(const topology::Cluster& cluster, const topology::Router& router, const calib::Profile& profile)
    : cluster_(cluster), router_(router), profile_(profile) {}

CollectiveChoices& PlanSearch::choices(int worker) {
  // Grows only outside the threads: run() makes every thread's first.
  while (choices_.size() <= static_cast<std::size_t>(worker)) {
    choices_.push_back(std::make_unique<CollectiveChoices>(cluster_, router_, profile_));
  }
  return *choices_[static_cast<std::size_t>(worker)];
}

workloads::Program PlanSearch::compile(const SearchRequest& request, const Candidate& candidate) const {
  return workloads::compile(step_config(request.model, candidate, cluster_.gpus_per_node()));
}

StepEstimate PlanSearch::estimate(const workloads::Program& program, const Candidate& candidate, int worker) {
  StepSimulationOptions options;
  options.network = NetworkMode::analytical;
  options.mirror_ranks = true;
  options.gpu_of_rank = candidate.placement->gpu_of_rank;
  options.choices = &choices(worker);
  options.timed_ranks = std::vector<int>{0};  // the exposed communication below
  const workloads::Timeline timeline = sim::simulate(program, cluster_, router_, profile_, options);
  StepEstimate estimate;
  estimate.out_of_memory = timeline.out_of_memory.has_value();
  estimate.step_seconds = seconds_from_picoseconds(timeline.step_time);
  // Pipeline stages differ: the fullest played rank's.
  for (const workloads::MemoryPeak& peak : timeline.peak_memory) {
    estimate.peak_memory_bytes = std::max(estimate.peak_memory_bytes, peak.total_bytes);
  }
  estimate.spine_bytes = timeline.spine_bytes;
  if (!estimate.out_of_memory) estimate.exposed_communication_seconds = time_breakdown(program, timeline, 0).exposed_total();
  return estimate;
}

workloads::Timeline PlanSearch::simulate(const workloads::Program& program, const Candidate& candidate, int worker) {
  StepSimulationOptions options;
  options.network = NetworkMode::flow;
  options.gpu_of_rank = candidate.placement->gpu_of_rank;
  options.choices = &choices(worker);
  options.timed_ranks = std::vector<int>{0};  // summarize() breaks rank 0's time down
  return sim::simulate(program, cluster_, router_, profile_, options);
}

SimulatedStep PlanSearch::summarize(const workloads::Program& program, const workloads::Timeline& timeline) const {
  SimulatedStep step;
  step.out_of_memory = timeline.out_of_memory.has_value();
  step.spine_bytes = timeline.spine_bytes;
  if (step.out_of_memory) return step;
  const StepSummary summary = summarize_step(program, timeline, profile_, cluster_.spec().node.gpu_memory_bytes, 0);
  step.step_seconds = summary.step_seconds;
  step.mfu = summary.mfu;
  step.tokens_per_gpu_per_second = summary.tokens_per_gpu_per_second;
  step.peak_memory_bytes = summary.peak_memory.total_bytes;
  step.compute_seconds = summary.breakdown.compute_seconds;
  step.exposed_communication_seconds = summary.breakdown.exposed_total();
  step.idle_seconds = summary.breakdown.idle_seconds;
  step.waiting_seconds = summary.breakdown.waiting_seconds;
  return step;
}

SearchResult PlanSearch::run(const SearchRequest& request, const WorkShare& share, SearchProgress* progress) {
  SearchResult result;
  result.candidates = enumerate_candidates(request.space, request.model, request.training, cluster_, request.gpus);
  const auto& candidates = result.candidates;
  result.results.resize(candidates.size());
  const double limit = cluster_.spec().node.gpu_memory_bytes;
  // Every thread's collective choices, made before the threads start.
  for (int worker = 0; worker < std::max(share.threads, 1); ++worker) choices(worker);

  // Every process takes every candidate's memory: it is cheap beside the
  // estimates, and the rejections need it everywhere.
  parallel_for(candidates.size(), share.threads, [&](int, std::size_t k) {
    const Candidate& candidate = candidates[k];
    result.results[candidate.index].memory =
        workloads::estimate_step_memory(step_config(request.model, candidate, cluster_.gpus_per_node())).memory;
  });
  std::vector<std::size_t> fitting;
  for (const Candidate& candidate : candidates) {
    CandidateResult& r = result.results[candidate.index];
    r.fits = r.memory.total() <= limit;
    if (r.fits) fitting.push_back(candidate.index);
    if (r.memory.total() < result.results[result.smallest].memory.total()) result.smallest = candidate.index;
  }

  const auto estimates = evaluate_shared(
      fitting, kEstimateFields, share, progress, "estimating " + std::to_string(fitting.size()) + " plans",
      [&](int worker, std::size_t index, double* out) {
        put(estimate(compile(request, candidates[index]), candidates[index], worker), out);
      });
  std::vector<std::size_t> estimated;
  for (std::size_t k = 0; k < fitting.size(); ++k) {
    auto& r = result.results[fitting[k]];
    r.estimate = take_estimate(estimates.data() + k * kEstimateFields);
    if (!r.estimate->out_of_memory) estimated.push_back(fitting[k]);
  }
  result.estimated = fitting.size();

  auto estimated_time = [&](std::size_t i) { return result.results[i].estimate->step_seconds; };
  auto estimated_memory = [&](std::size_t i) { return result.results[i].estimate->peak_memory_bytes; };
  std::vector<std::size_t> by_estimate = estimated;
  std::stable_sort(by_estimate.begin(), by_estimate.end(),
                   [&](std::size_t a, std::size_t b) { return estimated_time(a) < estimated_time(b); });
  std::vector<std::size_t> chosen(by_estimate.begin(),
                                  by_estimate.begin() + static_cast<std::ptrdiff_t>(std::min(request.simulate, by_estimate.size())));
  if (request.simulate_pareto_front) {
    for (std::size_t i : pareto_front(estimated, estimated_memory, estimated_time)) chosen.push_back(i);
  }
  std::sort(chosen.begin(), chosen.end());
  chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());

  const auto simulations = evaluate_shared(
      chosen, kSimulationFields, share, progress, "simulating " + std::to_string(chosen.size()) + " plans on the flow network",
      [&](int worker, std::size_t index, double* out) {
        const workloads::Program program = compile(request, candidates[index]);
        put(summarize(program, simulate(program, candidates[index], worker)), out);
      });
  for (std::size_t k = 0; k < chosen.size(); ++k) {
    auto& r = result.results[chosen[k]];
    r.simulation = take_simulation(simulations.data() + k * kSimulationFields);
    if (!r.simulation->out_of_memory) result.ranked.push_back(chosen[k]);
  }
  result.simulated = chosen.size();

  auto simulated_time = [&](std::size_t i) { return result.results[i].simulation->step_seconds; };
  auto simulated_memory = [&](std::size_t i) { return result.results[i].simulation->peak_memory_bytes; };
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [&](std::size_t a, std::size_t b) { return simulated_time(a) < simulated_time(b); });
  result.pareto = pareto_front(result.ranked, simulated_memory, simulated_time);
  return result;
}

}  // namespace shardsim::sim
