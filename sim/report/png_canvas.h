// PngCanvas: the little drawing shardsim's plots need (rectangles, lines,
// dots, libgd's built-in small font) on a white true-colour image, encoded
// as PNG bytes; the CLI writes them atomically like its other outputs.
#pragma once

#include <memory>
#include <string>

struct gdImageStruct;

namespace shardsim::sim {

struct Rgb {
  int r = 0, g = 0, b = 0;
};

class PngCanvas {
 public:
  // std::runtime_error when the image cannot be created.
  PngCanvas(int width, int height);
  ~PngCanvas();
  PngCanvas(const PngCanvas&) = delete;
  PngCanvas& operator=(const PngCanvas&) = delete;

  int width() const { return width_; }
  int height() const { return height_; }

  void fill(int x1, int y1, int x2, int y2, Rgb colour);
  void frame(int x1, int y1, int x2, int y2, Rgb colour);
  void line(int x1, int y1, int x2, int y2, Rgb colour);
  void dot(int x, int y, int radius, Rgb colour);
  // Small fixed-width font, `y` at the top of the text.
  void text(int x, int y, const std::string& s, Rgb colour);
  static int text_width(const std::string& s);
  static int text_height();

  // The image as a PNG file's bytes.
  std::string png() const;

 private:
  int width_, height_;
  std::unique_ptr<gdImageStruct, void (*)(gdImageStruct*)> image_;
};

inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kGrid{225, 225, 225};

// 1, 2 or 5 times a power of ten: about `count` ticks over `span`.
double tick_step(double span, int count);

}  // namespace shardsim::sim
