#include "sim/collectives/nccl_chunking.h"

#include <algorithm>

namespace shardsim::sim {

namespace {

constexpr double KiB = 1024;
// The Simple protocol's step (init.cc DEFAULT_BUFFSIZE 4 MiB over
// device.h NCCL_STEPS 8): an NVLS chunk starts from one step
// (enqueue.cc:2222-2225, chunkSteps 1 outside rings).
constexpr double kSimpleStepBytes = 4 * 1024 * KiB / 8;
// transport/nvls.cc: NCCL_NVLS_CHUNKSIZE's default.
constexpr double kNvlsChunkBytes = 128 * KiB;

}  // namespace

int nvls_concurrent_ops(int channels, int heads) { return channels * heads; }

double nvls_chunk_bytes(double buffer_bytes, int concurrent_ops) {
  // enqueue.cc:2258-2275 (NCCL_ALGO_NVLS, buffers not registered).
  const double ops = concurrent_ops;
  double chunk = std::min(kSimpleStepBytes, kNvlsChunkBytes);
  if (buffer_bytes < 64 * ops * chunk && chunk > 64 * KiB) chunk = 64 * KiB;
  if (buffer_bytes < 8 * ops * chunk && chunk > 32 * KiB) chunk = 32 * KiB;
  if (buffer_bytes < 2 * ops * chunk && chunk > 16 * KiB) chunk = 16 * KiB;
  return chunk;
}

double nvls_tree_chunk_bytes(double buffer_bytes, int concurrent_ops, int nodes) {
  // transport/nvls.cc ncclNvlsTuning: the tree's largest chunk, 64 KiB from
  // four nodes (SM90; SM100's multi-node tuning is not modelled).
  const double tree_max = nodes >= 4 ? 64 * KiB : kNvlsChunkBytes;
  // enqueue.cc:2276-2285 (NCCL_ALGO_NVLS_TREE).
  const double ops = concurrent_ops;
  double chunk = std::min(kNvlsChunkBytes, tree_max);
  if (buffer_bytes < 32 * ops * chunk && chunk > 256 * KiB) chunk = 256 * KiB;
  if (buffer_bytes < 16 * ops * chunk && chunk > 128 * KiB) chunk = 128 * KiB;
  if (buffer_bytes < 4 * ops * chunk && chunk > 64 * KiB) chunk = 64 * KiB;
  if (buffer_bytes < 1 * ops * chunk && chunk > 32 * KiB) chunk = 32 * KiB;
  return chunk;
}

}  // namespace shardsim::sim
