#include "sim/step/timeline_plot.h"

#include "topology/json_input.h"

#include <gd.h>
#include <gdfonts.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <unistd.h>

namespace shardsim::sim {

namespace {

constexpr int kWidth = 1600;
constexpr int kLabelWidth = 150;
constexpr int kRight = 20;
constexpr int kLaneHeight = 18;
constexpr int kTitleHeight = 22;
constexpr int kAxisHeight = 28;
constexpr int kLegendHeight = 24;

struct Rgb {
  int r, g, b;
};

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

// 1, 2 or 5 times a power of ten: about `count` ticks over `span`.
double tick_step(double span, int count) {
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

void text(gdImagePtr image, int x, int y, const std::string& s, int colour) {
  gdImageString(image, gdFontGetSmall(), x, y, reinterpret_cast<unsigned char*>(const_cast<char*>(s.c_str())), colour);
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

void write_timeline_png(const std::string& path, const std::vector<TimelinePanel>& panels, int rank) {
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

  std::unique_ptr<gdImage, void (*)(gdImagePtr)> image(gdImageCreateTrueColor(kWidth, height), gdImageDestroy);
  if (!image) throw_input_error(path, "", "cannot create the image");
  gdImagePtr im = image.get();
  const int white = gdTrueColor(255, 255, 255), black = gdTrueColor(0, 0, 0), grid = gdTrueColor(225, 225, 225);
  gdImageFilledRectangle(im, 0, 0, kWidth - 1, height - 1, white);
  const int plot_width = kWidth - kLabelWidth - kRight;
  const auto x_of = [&](double seconds) {
    return kLabelWidth + static_cast<int>(std::lround(seconds / span * plot_width));
  };

  int y = 6;
  for (std::size_t p = 0; p < panels.size(); ++p) {
    text(im, 6, y, panels[p].title + " (rank " + std::to_string(rank) + ")", black);
    y += kTitleHeight - 6;
    const Lanes& l = lanes[p];
    const int top = y;
    for (std::size_t s = 0; s < l.streams.size(); ++s) {
      const int lane_y = top + static_cast<int>(s) * kLaneHeight;
      gdImageLine(im, kLabelWidth, lane_y + kLaneHeight - 1, kWidth - kRight, lane_y + kLaneHeight - 1, grid);
      text(im, 6, lane_y + 3, l.streams[s], black);
    }
    for (const TimelineOpRow* row : l.rows) {
      if (row->start_seconds < 0 || row->end_seconds < row->start_seconds) continue;
      const int lane_y = top + l.lane_of(row->stream) * kLaneHeight;
      const Rgb c = colour_of(*row);
      const int x1 = x_of(row->start_seconds), x2 = std::max(x1, x_of(row->end_seconds));
      gdImageFilledRectangle(im, x1, lane_y + 2, x2, lane_y + kLaneHeight - 3, gdTrueColor(c.r, c.g, c.b));
    }
    y = top + kLaneHeight * static_cast<int>(std::max<std::size_t>(1, l.streams.size())) + 8;
  }

  // Time axis in milliseconds.
  gdImageLine(im, kLabelWidth, y, kWidth - kRight, y, black);
  const double step = tick_step(span, 10);
  for (double t = 0; t <= span * (1 + 1e-9); t += step) {
    const int x = x_of(t);
    gdImageLine(im, x, y, x, y + 4, black);
    char label[32];
    std::snprintf(label, sizeof label, "%g ms", t * 1e3);
    text(im, x - 10, y + 6, label, black);
  }
  y += kAxisHeight;
  int x = kLabelWidth;
  for (const char* name : {"gemm", "attention", "elementwise", "optimizer", "all_gather", "reduce_scatter", "all_reduce",
                           "broadcast"}) {
    TimelineOpRow sample;
    sample.op_class = name;
    const Rgb c = colour_of(sample);
    gdImageFilledRectangle(im, x, y + 2, x + 12, y + 12, gdTrueColor(c.r, c.g, c.b));
    text(im, x + 16, y + 1, name, black);
    x += 30 + 7 * static_cast<int>(std::string(name).size());
  }

  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  std::FILE* out = std::fopen(temporary.c_str(), "wb");
  if (out == nullptr) throw_input_error(path, "", "cannot be written");
  gdImagePng(im, out);
  const bool failed = std::ferror(out) != 0;
  std::fclose(out);
  std::error_code ec;
  if (failed) {
    std::filesystem::remove(temporary, ec);
    throw_input_error(path, "", "cannot be written");
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw_input_error(path, "", "cannot be written");
  }
}

}  // namespace shardsim::sim
