#include "sim/report/curve_plot.h"

#include "sim/report/png_canvas.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace shardsim::sim {

namespace {

constexpr int kColumns = 3;
constexpr int kPanelWidth = 440;
constexpr int kPanelHeight = 270;
constexpr int kHeadingHeight = 26;
constexpr int kLeft = 62;    // room for the rate labels
constexpr int kBottom = 34;  // room for the size labels
constexpr int kTop = 22;     // room for the title
constexpr int kRight = 14;
constexpr Rgb kMeasured{31, 119, 180};
constexpr Rgb kFitted{214, 39, 40};

// Where a panel's points land.
struct Axes {
  int left, top, width, height;
  double log_x_min, log_x_max, rate_max;

  int x_of(double x) const {
    const double span = std::max(log_x_max - log_x_min, 1e-9);
    return left + static_cast<int>(std::lround((std::log10(x) - log_x_min) / span * width));
  }
  int y_of(double rate) const { return top + height - static_cast<int>(std::lround(rate / rate_max * height)); }
};

void draw_panel(PngCanvas& canvas, int origin_x, int origin_y, const CurvePanel& panel) {
  const calib::MeasuredCurve& curve = *panel.curve;
  std::vector<calib::LinePoint> points;
  for (const calib::LinePoint& p : curve.points) {
    if (p.x > 0 && p.seconds > 0) points.push_back(p);
  }
  char title[160];
  std::snprintf(title, sizeof title, "%s  R^2 %.4f, worst %.1f%%", panel.title.c_str(), curve.fit.r_squared,
                100 * curve.fit.worst_relative_error);
  canvas.text(origin_x + 8, origin_y + 4, title, kBlack);
  if (points.empty()) return;

  double x_min = points.front().x, x_max = points.front().x, rate_max = 0;
  for (const auto& p : points) {
    x_min = std::min(x_min, p.x);
    x_max = std::max(x_max, p.x);
    rate_max = std::max(rate_max, p.x / p.seconds);
  }
  constexpr int kSamples = 120;
  const double log_min = std::floor(std::log10(x_min)), log_max = std::max(std::ceil(std::log10(x_max)), log_min + 1);
  std::vector<std::pair<double, double>> fitted;  // (x, rate) along the fit
  for (int i = 0; i <= kSamples; ++i) {
    const double x = std::pow(10.0, std::log10(x_min) + (std::log10(x_max) - std::log10(x_min)) * i / kSamples);
    const double t = curve.fit.seconds(x);
    if (t > 0) fitted.emplace_back(x, x / t);
  }
  for (const auto& [x, rate] : fitted) rate_max = std::max(rate_max, rate);
  const double tick = tick_step(rate_max * 1.05, 5);
  const Axes axes{origin_x + kLeft,
                  origin_y + kTop,
                  kPanelWidth - kLeft - kRight,
                  kPanelHeight - kTop - kBottom,
                  log_min,
                  log_max,
                  std::ceil(rate_max * 1.05 / tick) * tick};

  for (double rate = 0; rate <= axes.rate_max * (1 + 1e-9); rate += tick) {
    const int y = axes.y_of(rate);
    canvas.line(axes.left, y, axes.left + axes.width, y, kGrid);
    const std::string label = si_text(rate);
    canvas.text(axes.left - 4 - PngCanvas::text_width(label), y - PngCanvas::text_height() / 2, label, kBlack);
  }
  for (double decade = log_min; decade <= log_max + 1e-9; decade += 1) {
    const int x = axes.x_of(std::pow(10.0, decade));
    canvas.line(x, axes.top, x, axes.top + axes.height, kGrid);
    const std::string label = si_text(std::pow(10.0, decade));
    canvas.text(x - PngCanvas::text_width(label) / 2, axes.top + axes.height + 4, label, kBlack);
  }
  canvas.frame(axes.left, axes.top, axes.left + axes.width, axes.top + axes.height, kBlack);
  const std::string x_label = "size (" + panel.x_unit + "), rate (" + panel.rate_unit + ")";
  canvas.text(axes.left + axes.width - PngCanvas::text_width(x_label), axes.top + axes.height + 18, x_label, kBlack);

  for (std::size_t i = 1; i < fitted.size(); ++i) {
    canvas.line(axes.x_of(fitted[i - 1].first), axes.y_of(fitted[i - 1].second), axes.x_of(fitted[i].first),
                axes.y_of(fitted[i].second), kFitted);
  }
  for (const auto& p : points) canvas.dot(axes.x_of(p.x), axes.y_of(p.x / p.seconds), 2, kMeasured);
}

}  // namespace

std::string si_text(double value) {
  static const char* const prefixes[] = {"", " k", " M", " G", " T", " P", " E"};
  int power = 0;
  double scaled = std::fabs(value);
  while (scaled >= 1000 && power < 6) {
    scaled /= 1000;
    ++power;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%s", value < 0 ? -scaled : scaled, prefixes[power]);
  return text;
}

std::string curves_png(const std::string& heading, const std::vector<CurvePanel>& panels) {
  if (panels.empty()) throw std::invalid_argument("no measured curves to plot");
  const int columns = std::min<int>(kColumns, static_cast<int>(panels.size()));
  const int rows = (static_cast<int>(panels.size()) + kColumns - 1) / kColumns;
  PngCanvas canvas(columns * kPanelWidth, kHeadingHeight + rows * kPanelHeight);
  canvas.text(8, 6, heading, kBlack);
  const std::string fit_label = "fit: t = alpha + x / rate, drawn as x / t";
  int x = canvas.width() - 8 - PngCanvas::text_width(fit_label) - 24 - PngCanvas::text_width("measured") - 30;
  canvas.dot(x, 12, 2, kMeasured);
  canvas.text(x + 8, 6, "measured", kBlack);
  x += 8 + PngCanvas::text_width("measured") + 16;
  canvas.line(x, 12, x + 16, 12, kFitted);
  canvas.text(x + 22, 6, fit_label, kBlack);
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const int column = static_cast<int>(i) % kColumns, row = static_cast<int>(i) / kColumns;
    draw_panel(canvas, column * kPanelWidth, kHeadingHeight + row * kPanelHeight, panels[i]);
  }
  return canvas.png();
}

}  // namespace shardsim::sim
