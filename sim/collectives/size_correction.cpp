#include "sim/collectives/size_correction.h"

#include "sim/collectives/nccl_chunking.h"

#include <algorithm>
#include <cmath>

namespace shardsim::sim {

double SizeCorrection::bandwidth_factor(double buffer_bytes) const {
  if (bandwidth.empty()) return 1.0;
  const auto after = std::upper_bound(bandwidth.begin(), bandwidth.end(), buffer_bytes,
                                      [](double bytes, const calib::SizeStep& step) { return bytes < step.from_bytes; });
  return after == bandwidth.begin() ? after->factor : (after - 1)->factor;
}

double ChunkPipelineCorrection::chunk_bytes(double buffer_bytes) const {
  if (!active()) return 0;
  const double chunk = nodes > 1 ? nvls_tree_chunk_bytes(buffer_bytes, concurrent_ops, nodes)
                                 : nvls_chunk_bytes(buffer_bytes, concurrent_ops);
  return std::min(chunk, buffer_bytes / concurrent_ops);
}

double ChunkPipelineCorrection::chunks(double buffer_bytes) const {
  const double chunk = chunk_bytes(buffer_bytes);
  if (chunk <= 0) return active() ? 1.0 : 0.0;
  return std::max(1.0, buffer_bytes / (chunk * concurrent_ops));
}

double ChunkPipelineCorrection::fill_bytes(double buffer_bytes) const {
  return active() ? fill_chunks * chunk_bytes(buffer_bytes) * concurrent_ops : 0.0;
}

double ChunkPipelineCorrection::overhead_seconds(double buffer_bytes) const {
  return active() ? (chunks(buffer_bytes) + fill_chunks) * chunk_overhead_seconds : 0.0;
}

double SizeCorrection::payload_per_wire_byte(double buffer_bytes) const {
  const double factor = bandwidth_factor(buffer_bytes);
  const double with_fill = buffer_bytes + pipeline.fill_bytes(buffer_bytes);
  return with_fill > buffer_bytes ? factor * buffer_bytes / with_fill : factor;
}

TimePs SizeCorrection::latency(TimePs latency, double buffer_bytes) const {
  const double factor = latency_factor_at(buffer_bytes);
  return factor == 1.0 ? latency : static_cast<TimePs>(std::llround(static_cast<double>(latency) * factor));
}

}  // namespace shardsim::sim
