#include "sim/report/timeline_plot.h"

#include "sim/report/png_canvas.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace shardsim::sim {

namespace {

constexpr int kWidth = 1600;
constexpr int kLabelWidth = 150;
constexpr int kRight = 20;
constexpr int kLaneHeight = 18;
constexpr int kTitleHeight = 22;
constexpr int kAxisHeight = 28;
constexpr int kLegendHeight = 24;

// Class colours; collectives lighter than kernels.
Rgb colour_of(const TimelineOpRow& row) {
  static const std::map<std::string, Rgb> colours = {
      {"gemm", {31, 119, 180}},         {"attention", {148, 103, 189}}, {"elementwise", {44, 160, 44}},
      {"optimizer", {255, 127, 14}},    {"all_gather", {23, 190, 207}}, {"reduce_scatter", {214, 39, 40}},
      {"all_reduce", {140, 86, 75}},    {"broadcast", {188, 189, 34}},  {"reduce", {227, 119, 194}},
      {"all_to_all", {127, 127, 127}},  {"send_recv", {100, 100, 100}}};
  const auto it = colours.find(row.op_class);
  return it == colours.end() ? Rgb{160, 160, 160} : it->second;
}

struct Lanes {
  std::vector<std::string> streams;  // compute first, then in order of first appearance
  std::vector<const TimelineOpRow*> rows;
  int lane_of(const std::string& stream) const {
    return static_cast<int>(std::find(streams.begin(), streams.end(), stream) - streams.begin());
  }
};

Lanes lanes_of(const TimelineFile& file, int rank) {
  Lanes lanes;
  for (const TimelineOpRow& row : file.ops) {
    if (row.rank != rank || row.kind == "memory") continue;
    if (std::find(lanes.streams.begin(), lanes.streams.end(), row.stream) == lanes.streams.end()) {
      lanes.streams.push_back(row.stream);
    }
    lanes.rows.push_back(&row);
  }
  // The compute lane on top, the communication streams below it.
  std::stable_partition(lanes.streams.begin(), lanes.streams.end(), [](const std::string& s) { return s == "compute"; });
  return lanes;
}

}  // namespace

std::string timeline_png(const std::vector<TimelinePanel>& panels, int rank) {
  std::vector<Lanes> lanes;
  double span = 0;
  int height = kAxisHeight + kLegendHeight + 10;
  for (const TimelinePanel& panel : panels) {
    lanes.push_back(lanes_of(*panel.timeline, rank));
    span = std::max(span, panel.timeline->step_seconds);
    for (const TimelineOpRow* row : lanes.back().rows) span = std::max(span, row->end_seconds);
    height += kTitleHeight + kLaneHeight * static_cast<int>(std::max<std::size_t>(1, lanes.back().streams.size())) + 8;
  }
  if (span <= 0) span = 1;

  PngCanvas canvas(kWidth, height);
  const int plot_width = kWidth - kLabelWidth - kRight;
  const auto x_of = [&](double seconds) {
    return kLabelWidth + static_cast<int>(std::lround(seconds / span * plot_width));
  };

  int y = 6;
  for (std::size_t p = 0; p < panels.size(); ++p) {
    canvas.text(6, y, panels[p].title + " (rank " + std::to_string(rank) + ")", kBlack);
    y += kTitleHeight - 6;
    const Lanes& l = lanes[p];
    const int top = y;
    for (std::size_t s = 0; s < l.streams.size(); ++s) {
      const int lane_y = top + static_cast<int>(s) * kLaneHeight;
      canvas.line(kLabelWidth, lane_y + kLaneHeight - 1, kWidth - kRight, lane_y + kLaneHeight - 1, kGrid);
      canvas.text(6, lane_y + 3, l.streams[s], kBlack);
    }
    for (const TimelineOpRow* row : l.rows) {
      if (row->start_seconds < 0 || row->end_seconds < row->start_seconds) continue;
      const int lane_y = top + l.lane_of(row->stream) * kLaneHeight;
      const int x1 = x_of(row->start_seconds), x2 = std::max(x1, x_of(row->end_seconds));
      canvas.fill(x1, lane_y + 2, x2, lane_y + kLaneHeight - 3, colour_of(*row));
    }
    y = top + kLaneHeight * static_cast<int>(std::max<std::size_t>(1, l.streams.size())) + 8;
  }

  // Time axis in milliseconds.
  canvas.line(kLabelWidth, y, kWidth - kRight, y, kBlack);
  const double step = tick_step(span, 10);
  for (double t = 0; t <= span * (1 + 1e-9); t += step) {
    const int x = x_of(t);
    canvas.line(x, y, x, y + 4, kBlack);
    char label[32];
    std::snprintf(label, sizeof label, "%g ms", t * 1e3);
    canvas.text(x - 10, y + 6, label, kBlack);
  }
  y += kAxisHeight;
  int x = kLabelWidth;
  for (const char* name : {"gemm", "attention", "elementwise", "optimizer", "all_gather", "reduce_scatter", "all_reduce",
                           "broadcast"}) {
    TimelineOpRow sample;
    sample.op_class = name;
    canvas.fill(x, y + 2, x + 12, y + 12, colour_of(sample));
    canvas.text(x + 16, y + 1, name, kBlack);
    x += 30 + 7 * static_cast<int>(std::string(name).size());
  }

  return canvas.png();
}

}  // namespace shardsim::sim
