#include "sim/cli/progress_bar.h"

#include <cstdio>
#include <unistd.h>

namespace shardsim::cli {

ProgressBar::ProgressBar(std::string label, std::size_t total)
    : label_(std::move(label)), total_(total), enabled_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (enabled_ && done_ > 0) std::fprintf(stderr, "\r\033[K");
}

void ProgressBar::advance() {
  const std::lock_guard lock(mutex_);
  ++done_;
  if (enabled_) draw();
}

void ProgressBar::draw() const {
  constexpr int kWidth = 30;
  const double fraction = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Only worth showing once a run is long enough to wonder about.
  if (elapsed < 1.0 && done_ < total_) return;
  const double eta = fraction > 0 ? elapsed / fraction - elapsed : 0.0;
  const int filled = static_cast<int>(fraction * kWidth);
  std::fprintf(stderr, "\r%s [%.*s%*s] %zu/%zu  ETA %.0fs\033[K", label_.c_str(), filled,
               "##############################", kWidth - filled, "", done_, total_, eta);
  std::fflush(stderr);
}

}  // namespace shardsim::cli
