// How both executor backends realise a memory-bound op (element-wise,
// optimizer): its HBM bytes, half read and half written, streamed through
// a working buffer in passes. The buffer is bounded: the largest such op,
// the optimizer step, touches every parameter, gradient and optimizer state
// (46 bytes a parameter under mixed-precision Adam), which the Program
// already holds as resident memory; a buffer of its size beside them would
// ask for twice the model's memory (a 16-layer LLaMA-7B stack at ZeRO world
// size 1: 161 GB of streaming buffers beside 61 GiB, on a 141 GB H200).
// Each side stays far larger than any last-level cache (60 MB of L2 on an
// H200, a few hundred MB of L3 on the largest server CPUs), so every pass
// still reads and writes memory, not cache.
#pragma once

#include <algorithm>
#include <cstddef>

namespace shardsim::calib {

inline constexpr std::size_t kStreamingBufferBytes = std::size_t{1} << 30;  // each side

// The bytes of each side (read, written) of the working buffer for ops
// that move at most `largest_op_bytes` in all.
inline std::size_t streaming_buffer_bytes(double largest_op_bytes) {
  return std::min(kStreamingBufferBytes, static_cast<std::size_t>(std::max(0.0, largest_op_bytes / 2)));
}

}  // namespace shardsim::calib
