#include "sim/search/search_output.h"

#include "sim/report/hdf5_tables.h"
#include "topology/base/text_format.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

namespace shardsim::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string bucket_label(double bytes) {
  return bytes >= 1e9 ? printf_string("%gG", bytes / 1e9) : printf_string("%gM", bytes / 1e6);
}

// `plan_width`: the plan column, 20 characters or the longest name printed.
void print_row(std::ostream& out, int plan_width, std::size_t rank, const Candidate& c, const CandidateResult& r) {
  const SimulatedStep& s = *r.simulation;
  out << printf_string("%4zu  %-*s %4d %4d %4d %3lld  %-9s %6s  %-11s %9.4f %7.2f %7.0f %9.2f %9.4f %9.1f %9.4f\n", rank,
                plan_width, c.plan.name.c_str(), c.factors.parameters, c.factors.gradients, c.factors.optimizer,
                static_cast<long long>(c.training.micro_batch_size), workloads::to_string(c.training.recompute).c_str(),
                bucket_label(c.plan.buckets.reduce_bytes).c_str(), std::string(topology::to_string(c.placement->policy)).c_str(),
                s.step_seconds, 100 * s.mfu, s.tokens_per_gpu_per_second, s.peak_memory_bytes / kGiB,
                s.exposed_communication_seconds, s.spine_bytes / 1e9, r.estimate->step_seconds);
}

void print_header(std::ostream& out, int plan_width) {
  out << printf_string("%4s  %-*s %4s %4s %4s %3s  %-9s %6s  %-11s %9s %7s %7s %9s %9s %9s %9s\n", "rank", plan_width, "plan",
                "f_P", "f_G",
                "f_OS", "mbs", "recompute", "bucket", "placement", "step (s)", "MFU %", "TGS", "peak GiB", "exposed",
                "spine GB", "est. (s)");
}

}  // namespace

void print_search_table(std::ostream& out, const SearchHeading& heading, const SearchResult& result, std::size_t top) {
  std::size_t over_limit = 0;
  for (const auto& r : result.results) over_limit += r.fits ? 0 : 1;
  out << printf_string("# shardsim search: %s (%.3f B parameters) on %s, %d GPUs, memory limit %.1f GiB, profile %s\n",
                heading.model.c_str(), heading.parameters / 1e9, heading.cluster.c_str(), heading.gpus,
                heading.memory_limit_bytes / kGiB, heading.profile.c_str());
  out << printf_string("# %zu candidates: %zu over the memory limit (memory model), %zu estimated (analytical, one rank "
                "per stage, peers mirrored), %zu simulated (flow network, every rank), %zu fit and ranked\n",
                result.candidates.size(), over_limit, result.estimated, result.simulated, result.ranked.size());
  out << "# exposed: rank 0's communication not hidden behind compute (s); spine: bytes crossing leaf-to-spine "
         "links; est.: the analytical estimate the plan was picked by\n";
  const std::size_t shown = std::min(top, result.ranked.size());
  int width = 20;
  for (std::size_t k = 0; k < shown; ++k) {
    width = std::max(width, static_cast<int>(result.candidates[result.ranked[k]].plan.name.size()));
  }
  for (std::size_t i : result.pareto) width = std::max(width, static_cast<int>(result.candidates[i].plan.name.size()));
  print_header(out, width);
  for (std::size_t k = 0; k < shown; ++k) {
    const std::size_t i = result.ranked[k];
    print_row(out, width, k + 1, result.candidates[i], result.results[i]);
  }
  out << "# Pareto front of peak memory against step time (simulated plans; rank as above)\n";
  print_header(out, width);
  for (std::size_t i : result.pareto) {
    const auto rank = static_cast<std::size_t>(std::find(result.ranked.begin(), result.ranked.end(), i) - result.ranked.begin()) + 1;
    print_row(out, width, rank, result.candidates[i], result.results[i]);
  }
}

void print_rejections(std::ostream& out, const SearchResult& result, double memory_limit_bytes) {
  out << "# rejected candidates\n";
  for (const Candidate& c : result.candidates) {
    const CandidateResult& r = result.results[c.index];
    std::string reason;
    if (!r.fits) {
      reason = "memory model " + memory_rejection(r.memory, memory_limit_bytes);
    } else if (r.estimate && r.estimate->out_of_memory) {
      reason = "estimate runs out of memory during the step (peak above the limit)";
    } else if (r.simulation && r.simulation->out_of_memory) {
      reason = "simulation runs out of memory during the step";
    } else {
      continue;
    }
    out << printf_string("%6zu  %-70s %s\n", c.index, describe(c).c_str(), reason.c_str());
  }
}

void write_search_csv(std::ostream& out, const SearchResult& result) {
  out << "index,plan,system,f_P,f_G,f_OS,secondary_group,micro_batch_size,micro_batches,recompute,bucket_bytes,"
         "placement,memory_model_bytes,fits,estimate_step_seconds,estimate_peak_bytes,estimate_exposed_seconds,"
         "estimate_spine_bytes,estimate_out_of_memory,simulated,step_seconds,mfu,tokens_per_gpu_per_second,peak_bytes,"
         "compute_seconds,exposed_seconds,idle_seconds,waiting_seconds,spine_bytes,simulated_out_of_memory,rank\n";
  std::vector<std::size_t> rank_of(result.candidates.size(), 0);
  for (std::size_t k = 0; k < result.ranked.size(); ++k) rank_of[result.ranked[k]] = k + 1;
  for (const Candidate& c : result.candidates) {
    const CandidateResult& r = result.results[c.index];
    out << printf_string("%zu,%s,%s,%d,%d,%d,%d,%lld,%lld,%s,%.9g,%s,%.9g,%d", c.index, c.plan.name.c_str(),
                  workloads::to_string(c.plan.system).c_str(), c.factors.parameters, c.factors.gradients,
                  c.factors.optimizer, c.plan.secondary_parameter_group,
                  static_cast<long long>(c.training.micro_batch_size), static_cast<long long>(c.accumulation),
                  workloads::to_string(c.training.recompute).c_str(), c.plan.buckets.reduce_bytes,
                  std::string(topology::to_string(c.placement->policy)).c_str(), r.memory.total(), r.fits ? 1 : 0);
    if (r.estimate) {
      const StepEstimate& e = *r.estimate;
      out << printf_string(",%.9g,%.9g,%.9g,%.9g,%d", e.step_seconds, e.peak_memory_bytes, e.exposed_communication_seconds,
                    e.spine_bytes, e.out_of_memory ? 1 : 0);
    } else {
      out << ",,,,,";
    }
    if (r.simulation) {
      const SimulatedStep& s = *r.simulation;
      out << printf_string(",1,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d", s.step_seconds, s.mfu,
                    s.tokens_per_gpu_per_second, s.peak_memory_bytes, s.compute_seconds, s.exposed_communication_seconds,
                    s.idle_seconds, s.waiting_seconds, s.spine_bytes, s.out_of_memory ? 1 : 0);
    } else {
      out << ",0,,,,,,,,,,";
    }
    out << "," << (rank_of[c.index] ? std::to_string(rank_of[c.index]) : "") << "\n";
  }
}

namespace {

constexpr std::size_t kLabel = 32;

// One row of /candidates; NaN where a stage did not run.
struct CandidateRow {
  std::int32_t index;
  char plan[kLabel];
  char system[kLabel];
  std::int32_t f_p, f_g, f_os, secondary_group;
  std::int64_t micro_batch_size, micro_batches;
  char recompute[kLabel];
  double bucket_bytes;
  char placement[kLabel];
  double memory_model_bytes;
  std::int32_t fits;
  double estimate_step_seconds, estimate_peak_bytes, estimate_exposed_seconds, estimate_spine_bytes;
  std::int32_t estimate_out_of_memory, simulated;
  double step_seconds, mfu, tokens_per_gpu_per_second, peak_bytes, compute_seconds, exposed_seconds, idle_seconds,
      waiting_seconds, spine_bytes;
  std::int32_t simulated_out_of_memory, rank;
};

}  // namespace

void write_search_hdf5(const std::string& path, const SearchHeading& heading, const SearchResult& result) {
  using namespace hdf5;
  const double none = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::int32_t> rank_of(result.candidates.size(), 0);
  for (std::size_t k = 0; k < result.ranked.size(); ++k) rank_of[result.ranked[k]] = static_cast<std::int32_t>(k + 1);
  std::vector<CandidateRow> rows;
  for (const Candidate& c : result.candidates) {
    const CandidateResult& r = result.results[c.index];
    CandidateRow row{};
    row.index = static_cast<std::int32_t>(c.index);
    copy_label(row.plan, c.plan.name);
    copy_label(row.system, workloads::to_string(c.plan.system));
    row.f_p = c.factors.parameters;
    row.f_g = c.factors.gradients;
    row.f_os = c.factors.optimizer;
    row.secondary_group = c.plan.secondary_parameter_group;
    row.micro_batch_size = c.training.micro_batch_size;
    row.micro_batches = c.accumulation;
    copy_label(row.recompute, workloads::to_string(c.training.recompute));
    row.bucket_bytes = c.plan.buckets.reduce_bytes;
    copy_label(row.placement, topology::to_string(c.placement->policy));
    row.memory_model_bytes = r.memory.total();
    row.fits = r.fits;
    const StepEstimate e = r.estimate.value_or(StepEstimate{none, none, none, none, false});
    row.estimate_step_seconds = e.step_seconds;
    row.estimate_peak_bytes = e.peak_memory_bytes;
    row.estimate_exposed_seconds = e.exposed_communication_seconds;
    row.estimate_spine_bytes = e.spine_bytes;
    row.estimate_out_of_memory = e.out_of_memory;
    row.simulated = r.simulation.has_value();
    const SimulatedStep s = r.simulation.value_or(SimulatedStep{none, none, none, none, none, none, none, none, none, false});
    row.step_seconds = s.step_seconds;
    row.mfu = s.mfu;
    row.tokens_per_gpu_per_second = s.tokens_per_gpu_per_second;
    row.peak_bytes = s.peak_memory_bytes;
    row.compute_seconds = s.compute_seconds;
    row.exposed_seconds = s.exposed_communication_seconds;
    row.idle_seconds = s.idle_seconds;
    row.waiting_seconds = s.waiting_seconds;
    row.spine_bytes = s.spine_bytes;
    row.simulated_out_of_memory = s.out_of_memory;
    row.rank = rank_of[c.index];
    rows.push_back(row);
  }
  write_file_atomically(path, [&](hid_t file) {
    Handle label(string_type(kLabel), H5Tclose, "string type");
    Handle type(H5Tcreate(H5T_COMPOUND, sizeof(CandidateRow)), H5Tclose, "compound type");
#define SHARDSIM_FIELD(name, h5type) H5Tinsert(type, #name, HOFFSET(CandidateRow, name), h5type)
    SHARDSIM_FIELD(index, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(plan, label);
    SHARDSIM_FIELD(system, label);
    SHARDSIM_FIELD(f_p, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(f_g, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(f_os, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(secondary_group, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(micro_batch_size, H5T_NATIVE_INT64);
    SHARDSIM_FIELD(micro_batches, H5T_NATIVE_INT64);
    SHARDSIM_FIELD(recompute, label);
    SHARDSIM_FIELD(bucket_bytes, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(placement, label);
    SHARDSIM_FIELD(memory_model_bytes, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(fits, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(estimate_step_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(estimate_peak_bytes, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(estimate_exposed_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(estimate_spine_bytes, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(estimate_out_of_memory, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(simulated, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(step_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(mfu, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(tokens_per_gpu_per_second, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(peak_bytes, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(compute_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(exposed_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(idle_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(waiting_seconds, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(spine_bytes, H5T_NATIVE_DOUBLE);
    SHARDSIM_FIELD(simulated_out_of_memory, H5T_NATIVE_INT32);
    SHARDSIM_FIELD(rank, H5T_NATIVE_INT32);
#undef SHARDSIM_FIELD
    write_table(file, "candidates", type, rows);
    write_string_attribute(file, "schema", "shardsim-search-1");
    write_string_attribute(file, "model", heading.model);
    write_string_attribute(file, "cluster", heading.cluster);
    write_string_attribute(file, "profile", heading.profile);
    write_double_attribute(file, "gpus", heading.gpus);
    write_double_attribute(file, "memory_limit_bytes", heading.memory_limit_bytes);
  });
}

nlohmann::json simulated_plan_to_json(const Candidate& c, const SimulatedStep& s) {
  return {{"plan", c.plan.name},
          {"system", workloads::to_string(c.plan.system)},
          {"factors", {{"parameters", c.factors.parameters}, {"gradients", c.factors.gradients},
                       {"optimizer", c.factors.optimizer}}},
          {"secondary_parameter_group", c.plan.secondary_parameter_group},
          {"micro_batch_size", c.training.micro_batch_size},
          {"micro_batches", c.accumulation},
          {"recompute", workloads::to_string(c.training.recompute)},
          {"bucket_bytes", c.plan.buckets.reduce_bytes},
          {"placement", topology::to_string(c.placement->policy)},
          {"step_seconds", s.step_seconds},
          {"mfu", s.mfu},
          {"tokens_per_gpu_per_second", s.tokens_per_gpu_per_second},
          {"peak_memory_bytes", s.peak_memory_bytes},
          {"exposed_communication_seconds", s.exposed_communication_seconds},
          {"spine_bytes", s.spine_bytes}};
}

nlohmann::json search_to_json(const SearchHeading& heading, const SearchResult& result, std::size_t top) {
  nlohmann::json ranked = nlohmann::json::array();
  for (std::size_t k = 0; k < std::min(top, result.ranked.size()); ++k) {
    const std::size_t i = result.ranked[k];
    nlohmann::json row = {{"rank", k + 1}, {"index", result.candidates[i].index}};
    row.update(simulated_plan_to_json(result.candidates[i], *result.results[i].simulation));
    row["estimate_step_seconds"] = result.results[i].estimate->step_seconds;
    ranked.push_back(std::move(row));
  }
  nlohmann::json pareto = nlohmann::json::array();
  for (std::size_t i : result.pareto) {
    const auto rank = std::find(result.ranked.begin(), result.ranked.end(), i) - result.ranked.begin() + 1;
    const SimulatedStep& s = *result.results[i].simulation;
    pareto.push_back({{"rank", rank},
                      {"candidate", describe(result.candidates[i])},
                      {"step_seconds", s.step_seconds},
                      {"peak_memory_bytes", s.peak_memory_bytes}});
  }
  std::size_t over_limit = 0;
  for (const auto& r : result.results) over_limit += r.fits ? 0 : 1;
  return {{"model", heading.model},
          {"cluster", heading.cluster},
          {"profile", heading.profile},
          {"gpus", heading.gpus},
          {"memory_limit_bytes", heading.memory_limit_bytes},
          {"candidates", result.candidates.size()},
          {"over_memory_limit", over_limit},
          {"estimated", result.estimated},
          {"simulated", result.simulated},
          {"ranked", ranked},
          {"pareto", pareto}};
}

}  // namespace shardsim::sim
