#include "sim/search/capacity_output.h"

#include "sim/search/search_output.h"
#include "topology/base/text_format.h"

namespace shardsim::sim {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// "1 T", "300 B", "2.5 M": token counts as people say them.
std::string tokens_label(double tokens) {
  if (tokens >= 1e12) return printf_string("%g T", tokens / 1e12);
  if (tokens >= 1e9) return printf_string("%g B", tokens / 1e9);
  if (tokens >= 1e6) return printf_string("%g M", tokens / 1e6);
  return printf_string("%g", tokens);
}

std::string row_summary(const CapacityRow& row) {
  return printf_string("%d GPUs, %.2f days, %.0f GPU-hours: %s", row.gpus, row.interruptions.wall_seconds / kSecondsPerDay,
                       row.gpu_hours, describe(*row.best).c_str());
}

// How the interruptions were priced, for the heading.
std::string reliability_note(const ReliabilityInputs& r) {
  if (r.failures_per_gpu_day == 0) return "no failures (--failures-per-gpu-day 0)";
  const std::string checkpoint = r.checkpoint_seconds ? printf_string("checkpoints pausing %g s", *r.checkpoint_seconds)
                                                : printf_string("checkpoint shards written and reloaded at %.3g MB/s a GPU",
                                                                r.checkpoint_bytes_per_second_per_gpu / 1e6);
  return printf_string("%.3g failures per GPU-day, restarts of %g s plus the reload, %s, at the interval that keeps "
                       "the most time (ETTR)",
                       r.failures_per_gpu_day, r.restart_seconds, checkpoint.c_str());
}

}  // namespace

void print_capacity_table(std::ostream& out, const CapacityHeading& heading, const CapacityPlan& plan) {
  out << printf_string("# shardsim capacity: %s (%.3f B parameters) on %s, memory limit %.1f GiB, profile %s\n",
                       heading.model.c_str(), heading.parameters / 1e9, heading.cluster.c_str(),
                       heading.memory_limit_bytes / kGiB, heading.profile.c_str());
  out << printf_string("# %s tokens: %lld steps of %lld tokens (the training config's global batch at every count)",
                       tokens_label(plan.budget.tokens).c_str(), static_cast<long long>(plan.steps),
                       static_cast<long long>(plan.tokens_per_step));
  if (plan.budget.deadline_seconds) out << printf_string("; deadline %g days", *plan.budget.deadline_seconds / kSecondsPerDay);
  out << "\n";
  out << printf_string("# each count: the fastest plan that fits, of the %zu fastest estimates simulated on the flow "
                       "network (shardsim search)\n",
                       heading.simulate);
  out << "# days and GPU-hours at the simulated step rate, with interruptions: " + reliability_note(plan.budget.reliability) +
             "; evaluation not in them\n";
  out << "# ETTR: useful time / wall time; scaling: tokens per second per GPU against the fewest GPUs with a plan\n";
  out << printf_string("%6s %9s %7s %7s %9s %9s %7s %11s %9s  %s\n", "GPUs", "step (s)", "MFU %", "TGS", "peak GiB", "days",
                       "ETTR %", "GPU-hours", "scaling %", "plan");
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    const CapacityRow& row = plan.rows[i];
    if (!row.best) {
      const double limit = heading.memory_limit_bytes;
      std::string why;
      if (!row.no_plan_reason.empty()) {
        why = "no plan: " + row.no_plan_reason;
      } else if (row.smallest_memory_bytes > limit) {
        why = printf_string("no plan fits in %.1f GiB: the smallest needs %.1f GiB (memory model)", limit / kGiB,
                            row.smallest_memory_bytes / kGiB);
      } else {
        // The memory model let some in, but their steps peaked above the limit.
        why = printf_string("no plan fits in %.1f GiB through a whole step", limit / kGiB);
      }
      out << printf_string("%6d  %s\n", row.gpus, why.c_str());
      continue;
    }
    const SimulatedStep& s = row.step;
    out << printf_string("%6d %9.4f %7.2f %7.0f %9.2f %9.2f %7.1f %11.0f %9.1f  %s\n", row.gpus, s.step_seconds,
                         100 * s.mfu, s.tokens_per_gpu_per_second, s.peak_memory_bytes / kGiB,
                         row.interruptions.wall_seconds / kSecondsPerDay, 100 * row.interruptions.ettr, row.gpu_hours,
                         100 * plan.scaling_efficiency(i), describe(*row.best).c_str());
  }
  if (!plan.fastest) {
    out << "# no GPU count tried has a plan that fits\n";
    return;
  }
  if (plan.budget.deadline_seconds) {
    const double days = *plan.budget.deadline_seconds / kSecondsPerDay;
    if (plan.fewest_in_time) {
      out << printf_string("# fewest GPUs within %g days: %s\n", days, row_summary(plan.rows[*plan.fewest_in_time]).c_str());
    } else {
      const CapacityRow& fastest = plan.rows[*plan.fastest];
      out << printf_string("# no GPU count tried finishes within %g days: the fastest, %d GPUs, takes %.2f days; try more "
                           "GPUs with --gpus\n",
                           days, fastest.gpus, fastest.interruptions.wall_seconds / kSecondsPerDay);
    }
  }
  out << printf_string("# fewest GPU-hours: %s\n", row_summary(plan.rows[*plan.cheapest]).c_str());
  out << printf_string("# fastest: %s\n", row_summary(plan.rows[*plan.fastest]).c_str());
}

void write_capacity_csv(std::ostream& out, const CapacityPlan& plan) {
  out << "gpus,plan,candidate,step_seconds,mfu,tokens_per_gpu_per_second,peak_memory_bytes,training_seconds,"
         "wall_seconds,ettr,checkpoint_interval_seconds,expected_failures,gpu_hours,scaling_efficiency,"
         "smallest_memory_bytes,no_plan_reason\n";
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    const CapacityRow& row = plan.rows[i];
    out << row.gpus;
    if (row.best) {
      const SimulatedStep& s = row.step;
      const Goodput& g = row.interruptions;
      out << printf_string(",%s,%s,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g", csv_field(row.best->plan.name).c_str(),
                           csv_field(describe(*row.best)).c_str(), s.step_seconds, s.mfu, s.tokens_per_gpu_per_second,
                           s.peak_memory_bytes, row.training_seconds, g.wall_seconds, g.ettr, g.checkpoint_interval_seconds,
                           g.expected_failures, row.gpu_hours, plan.scaling_efficiency(i));
    } else {
      out << ",,,,,,,,,,,,,";
    }
    out << printf_string(",%.9g,%s\n", row.smallest_memory_bytes, csv_field(row.no_plan_reason).c_str());
  }
}

nlohmann::json capacity_to_json(const CapacityHeading& heading, const CapacityPlan& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t i = 0; i < plan.rows.size(); ++i) {
    const CapacityRow& row = plan.rows[i];
    nlohmann::json entry = {{"gpus", row.gpus},
                            {"candidates", row.candidates},
                            {"smallest_memory_bytes", row.smallest_memory_bytes}};
    if (row.best) {
      entry["best"] = simulated_plan_to_json(*row.best, row.step);
      entry["best"]["candidate"] = describe(*row.best);
      entry["training_seconds"] = row.training_seconds;
      entry["interruptions"] = goodput_to_json(row.interruptions);
      entry["gpu_hours"] = row.gpu_hours;
      entry["scaling_efficiency"] = plan.scaling_efficiency(i);
    } else {
      entry["best"] = nullptr;
      if (!row.no_plan_reason.empty()) entry["no_plan_reason"] = row.no_plan_reason;
    }
    rows.push_back(std::move(entry));
  }
  const auto gpus_of = [&](const std::optional<std::size_t>& row) -> nlohmann::json {
    return row ? nlohmann::json(plan.rows[*row].gpus) : nlohmann::json(nullptr);
  };
  return {{"model", heading.model},
          {"cluster", heading.cluster},
          {"profile", heading.profile},
          {"memory_limit_bytes", heading.memory_limit_bytes},
          {"tokens", plan.budget.tokens},
          {"tokens_per_step", plan.tokens_per_step},
          {"steps", plan.steps},
          {"deadline_seconds", plan.budget.deadline_seconds ? nlohmann::json(*plan.budget.deadline_seconds)
                                                            : nlohmann::json(nullptr)},
          {"reliability", reliability_to_json(plan.budget.reliability)},
          {"rows", rows},
          {"fewest_gpus_in_time", gpus_of(plan.fewest_in_time)},
          {"fewest_gpu_hours", gpus_of(plan.cheapest)},
          {"fastest", gpus_of(plan.fastest)}};
}

}  // namespace shardsim::sim
