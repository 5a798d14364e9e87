// BufferPool: the buffers a Program's memory ops allocate and free, kept
// across steps by (category, size), as PyTorch's caching allocator keeps
// them: only the first step pays for allocation, and a step measures the
// kernels, not the allocator. `Buffer` is a movable owner of the memory
// (host bytes, a device buffer), made by the `make(bytes)` given.
#pragma once

#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <utility>
#include <vector>

namespace shardsim::calib {

template <typename Buffer>
class BufferPool {
 public:
  explicit BufferPool(std::function<Buffer(std::size_t)> make) : make_(std::move(make)) {}

  void allocate(int category, double bytes) {
    const Key key{category, static_cast<std::size_t>(std::llround(bytes))};
    auto& cached = free_[key];
    if (cached.empty()) {
      live_[key].push_back(make_(key.second));
    } else {
      live_[key].push_back(std::move(cached.back()));
      cached.pop_back();
    }
  }

  // Frees a buffer of the category and size; where the program frees in
  // other pieces than it allocated, whole buffers of the category, oldest
  // size first, until the bytes are covered.
  void release(int category, double bytes) {
    const auto size = static_cast<std::size_t>(std::llround(bytes));
    auto exact = live_.find({category, size});
    if (exact != live_.end() && !exact->second.empty()) {
      free_[exact->first].push_back(std::move(exact->second.back()));
      exact->second.pop_back();
      return;
    }
    std::size_t freed = 0;
    for (auto it = live_.lower_bound({category, 0}); it != live_.end() && it->first.first == category && freed < size;
         ++it) {
      while (!it->second.empty() && freed < size) {
        freed += it->first.second;
        free_[it->first].push_back(std::move(it->second.back()));
        it->second.pop_back();
      }
    }
  }

 private:
  using Key = std::pair<int, std::size_t>;
  std::function<Buffer(std::size_t)> make_;
  std::map<Key, std::vector<Buffer>> live_, free_;
};

}  // namespace shardsim::calib
