// A one-line progress bar with an ETA on stderr, drawn only when stderr is a
// terminal: piped and redirected output stays byte-for-byte deterministic.
#pragma once

#include <chrono>
#include <string>

namespace shardsim::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::size_t total);
  ~ProgressBar();  // clears the line
  void advance();

 private:
  void draw() const;

  std::string label_;
  std::size_t total_;
  std::size_t done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace shardsim::cli
