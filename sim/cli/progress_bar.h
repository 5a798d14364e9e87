// A one-line progress bar with an ETA on stderr, drawn only when stderr is a
// terminal: piped and redirected output stays byte-for-byte deterministic.
// advance() may be called from several threads at once.
#pragma once

#include "sim/search/plan_search.h"

#include <chrono>
#include <memory>
#include <mutex>
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
  std::mutex mutex_;  // advance() and draw()
  std::size_t done_ = 0;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

// A search's phases (estimating, simulating), one bar each.
class SearchProgressBar : public sim::SearchProgress {
 public:
  void phase(const std::string& label, std::size_t total) override {
    bar_.reset();
    bar_ = std::make_unique<ProgressBar>(label, total);
  }
  void advance() override { bar_->advance(); }

 private:
  std::unique_ptr<ProgressBar> bar_;
};

}  // namespace shardsim::cli
