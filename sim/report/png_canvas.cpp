#include "sim/report/png_canvas.h"

#include <gd.h>
#include <gdfonts.h>

#include <cmath>
#include <memory>
#include <stdexcept>

namespace shardsim::sim {

namespace {

int colour_of(Rgb c) { return gdTrueColor(c.r, c.g, c.b); }

}  // namespace

PngCanvas::PngCanvas(int width, int height)
    : width_(width), height_(height), image_(gdImageCreateTrueColor(width, height), gdImageDestroy) {
  if (!image_) throw std::runtime_error("cannot create a " + std::to_string(width) + " x " + std::to_string(height) + " image");
  gdImageFilledRectangle(image_.get(), 0, 0, width - 1, height - 1, gdTrueColor(255, 255, 255));
}

PngCanvas::~PngCanvas() = default;

void PngCanvas::fill(int x1, int y1, int x2, int y2, Rgb colour) {
  gdImageFilledRectangle(image_.get(), x1, y1, x2, y2, colour_of(colour));
}

void PngCanvas::frame(int x1, int y1, int x2, int y2, Rgb colour) {
  gdImageRectangle(image_.get(), x1, y1, x2, y2, colour_of(colour));
}

void PngCanvas::line(int x1, int y1, int x2, int y2, Rgb colour) {
  gdImageLine(image_.get(), x1, y1, x2, y2, colour_of(colour));
}

void PngCanvas::dot(int x, int y, int radius, Rgb colour) {
  gdImageFilledEllipse(image_.get(), x, y, 2 * radius + 1, 2 * radius + 1, colour_of(colour));
}

void PngCanvas::text(int x, int y, const std::string& s, Rgb colour) {
  gdImageString(image_.get(), gdFontGetSmall(), x, y, reinterpret_cast<unsigned char*>(const_cast<char*>(s.c_str())),
                colour_of(colour));
}

int PngCanvas::text_width(const std::string& s) { return gdFontGetSmall()->w * static_cast<int>(s.size()); }

int PngCanvas::text_height() { return gdFontGetSmall()->h; }

std::string PngCanvas::png() const {
  int size = 0;
  const std::unique_ptr<void, void (*)(void*)> bytes(gdImagePngPtr(image_.get(), &size), gdFree);
  if (!bytes) throw std::runtime_error("cannot encode the image as PNG");
  return std::string(static_cast<const char*>(bytes.get()), static_cast<std::size_t>(size));
}

double tick_step(double span, int count) {
  const double raw = span / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

}  // namespace shardsim::sim
