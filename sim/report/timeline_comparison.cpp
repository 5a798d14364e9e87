#include "sim/report/timeline_comparison.h"

#include "sim/report/step_report.h"
#include "topology/base/json_input.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace shardsim::sim {

namespace {

using RankRows = std::map<int, std::vector<const TimelineOpRow*>>;

RankRows rows_by_rank(const TimelineFile& file) {
  RankRows rows;
  for (const TimelineOpRow& row : file.ops) rows[row.rank].push_back(&row);
  for (auto& [rank, list] : rows) {
    std::sort(list.begin(), list.end(), [](const TimelineOpRow* a, const TimelineOpRow* b) { return a->op < b->op; });
  }
  return rows;
}

double duration(const TimelineOpRow& row) {
  return row.start_seconds < 0 || row.end_seconds < row.start_seconds ? 0 : row.end_seconds - row.start_seconds;
}

// "gemm", "attention", ... for kernels; "<collective> in flight" for calls.
std::string class_label(const TimelineOpRow& row) {
  return row.kind == "collective" ? row.op_class + " in flight" : row.op_class;
}

bool moving_known(const TimelineOpRow& row) {
  return row.moving_seconds >= row.start_seconds && row.moving_seconds <= row.end_seconds && row.start_seconds >= 0;
}

// A call's time from its last member's issue to its end: what a collective
// cost model prices. 0 where not known.
double moving_duration(const TimelineOpRow& row) { return moving_known(row) ? row.end_seconds - row.moving_seconds : 0; }

TimeBreakdown breakdown_of(const std::vector<const TimelineOpRow*>& rows, double step_seconds, int rank) {
  std::vector<ActivityInterval> intervals;
  for (const TimelineOpRow* row : rows) {
    if (row->kind == "memory") continue;
    int what = kComputing;
    TimePs moving = -1;
    if (row->kind == "collective") {
      const auto op = workloads::parse_collective_op(row->op_class);
      if (!op) continue;
      what = static_cast<int>(*op);
      if (moving_known(*row)) moving = picoseconds_from_seconds(row->moving_seconds);
    }
    intervals.push_back(
        {picoseconds_from_seconds(row->start_seconds), picoseconds_from_seconds(row->end_seconds), what, moving});
  }
  return breakdown_of_intervals(std::move(intervals), picoseconds_from_seconds(step_seconds), rank);
}

}  // namespace

double ComparedQuantity::relative_error() const {
  return measured_seconds > 0 ? (predicted_seconds - measured_seconds) / measured_seconds
                              : std::numeric_limits<double>::quiet_NaN();
}

TimelineComparison compare_timelines(const TimelineFile& predicted, const TimelineFile& measured, std::optional<int> rank) {
  const RankRows p = rows_by_rank(predicted), m = rows_by_rank(measured);
  TimelineComparison result;
  for (const auto& [r, rows] : p) {
    if (m.count(r)) result.ranks.push_back(r);
  }
  if (result.ranks.empty()) {
    throw_input_error(measured.path, "ops", "shares no rank with " + predicted.path + " (record the same ranks)");
  }
  for (int r : result.ranks) {
    const auto& a = p.at(r);
    const auto& b = m.at(r);
    if (a.size() != b.size()) {
      throw_input_error(measured.path, "ops",
                        "rank " + std::to_string(r) + " has " + std::to_string(b.size()) + " ops, " + predicted.path +
                            " " + std::to_string(a.size()) + ": not the same program (same --scale, plan and GPUs?)");
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i]->op != b[i]->op || a[i]->name != b[i]->name || a[i]->kind != b[i]->kind) {
        throw_input_error(measured.path, "ops",
                          "rank " + std::to_string(r) + " op " + std::to_string(b[i]->op) + " is '" + b[i]->name +
                              "', in " + predicted.path + " '" + a[i]->name + "': not the same program");
      }
    }
  }
  result.breakdown_rank = rank.value_or(result.ranks.front());
  if (std::find(result.ranks.begin(), result.ranks.end(), result.breakdown_rank) == result.ranks.end()) {
    throw std::invalid_argument("--rank " + std::to_string(result.breakdown_rank) + " is not in both files");
  }

  result.step = {"step time", predicted.step_seconds, measured.step_seconds};

  // Class totals per rank, averaged over the compared ranks; classes in the
  // order they first appear in the program. A collective kind's in-flight
  // time is followed by its time moving data where both files know it for
  // every call of the kind.
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, double>> totals, moving;
  std::map<std::string, bool> moving_known_for_all;
  for (int r : result.ranks) {
    const auto& a = p.at(r);
    const auto& b = m.at(r);
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i]->kind == "memory") continue;
      const std::string label = class_label(*a[i]);
      auto [it, added] = totals.try_emplace(label, 0.0, 0.0);
      if (added) order.push_back(label);
      it->second.first += duration(*a[i]);
      it->second.second += duration(*b[i]);
      if (a[i]->kind != "collective") continue;
      bool& known = moving_known_for_all.try_emplace(label, true).first->second;
      known = known && moving_known(*a[i]) && moving_known(*b[i]);
      moving[label].first += moving_duration(*a[i]);
      moving[label].second += moving_duration(*b[i]);
    }
  }
  const double ranks = static_cast<double>(result.ranks.size());
  for (const std::string& label : order) {
    result.op_classes.push_back({label, totals[label].first / ranks, totals[label].second / ranks});
    if (const auto known = moving_known_for_all.find(label); known != moving_known_for_all.end() && known->second) {
      const std::string kind = label.substr(0, label.find(' '));
      result.op_classes.push_back({kind + " moving data", moving[label].first / ranks, moving[label].second / ranks});
    }
  }

  const auto& a = p.at(result.breakdown_rank);
  const auto& b = m.at(result.breakdown_rank);
  const TimeBreakdown bp = breakdown_of(a, predicted.step_seconds, result.breakdown_rank);
  const TimeBreakdown bm = breakdown_of(b, measured.step_seconds, result.breakdown_rank);
  result.breakdown = {{"compute", bp.compute_seconds, bm.compute_seconds},
                      {"exposed communication", bp.exposed_total(), bm.exposed_total()},
                      {"waiting for other ranks", bp.waiting_seconds, bm.waiting_seconds},
                      {"idle", bp.idle_seconds, bm.idle_seconds},
                      {"communication in flight", bp.communication_seconds, bm.communication_seconds}};
  result.predicted_hidden_fraction = bp.hidden_fraction();
  result.measured_hidden_fraction = bm.hidden_fraction();

  std::vector<OpDifference> differences;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i]->kind == "memory") continue;
    differences.push_back({a[i]->op, a[i]->name, duration(*a[i]), duration(*b[i])});
  }
  const auto gap = [](const OpDifference& d) { return std::abs(d.predicted_seconds - d.measured_seconds); };
  std::stable_sort(differences.begin(), differences.end(),
                   [&](const OpDifference& x, const OpDifference& y) { return gap(x) > gap(y); });
  differences.resize(std::min<std::size_t>(differences.size(), 10));
  result.largest_differences = std::move(differences);
  return result;
}

}  // namespace shardsim::sim
