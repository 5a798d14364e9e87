// Units shared by every shardsim library.
//
// Simulated time is an integer count of picoseconds so that runs are
// bit-for-bit reproducible and same-time events can be ordered exactly.
// Everything else is SI in doubles: bytes, seconds, bytes_per_second.
// Datasheets quote network links in bits per second and NVLink as a
// bidirectional total; the conversions below say which is which.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace shardsim {

using TimePs = std::int64_t;

inline constexpr TimePs kPicosecondsPerSecond = 1'000'000'000'000;
inline constexpr TimePs kTimeNever = std::numeric_limits<TimePs>::max();

// Rounds to the nearest picosecond; durations shorter than 0.5 ps vanish.
inline TimePs picoseconds_from_seconds(double seconds) {
  return static_cast<TimePs>(std::llround(seconds * static_cast<double>(kPicosecondsPerSecond)));
}

inline double seconds_from_picoseconds(TimePs t) {
  return static_cast<double>(t) / static_cast<double>(kPicosecondsPerSecond);
}

inline double microseconds_from_picoseconds(TimePs t) { return static_cast<double>(t) / 1e6; }

// Network datasheets (InfiniBand HDR 200 Gb/s) give bits per second per direction.
inline constexpr double bytes_per_second_from_bits_per_second(double bits_per_second) {
  return bits_per_second / 8.0;
}

// GPU datasheets give NVLink and PCIe as a bidirectional total (A100: 600 GB/s);
// a directed link carries half of it.
inline constexpr double per_direction_from_bidirectional(double bidirectional_bytes_per_second) {
  return bidirectional_bytes_per_second / 2.0;
}

}  // namespace shardsim
