// SizeCorrection: how a collective's time departs, with the size of its
// buffer, from the per-byte plan and closed form its algorithm makes.
//
// Plans and costs are made per byte (collective_algorithm.h). NCCL's own model,
// where the profiles take their latencies from, also corrects by size
// (ncclTopoGetAlgoTime): trees reach less of their bandwidth at medium sizes
// (treeCorrectionFactor), and rings across nodes take longer latencies once a
// call carries more than a few bytes per rank and channel ("plateau effect").
// The flow network and the closed form apply the same correction, so the two
// still agree where nothing contends.
#pragma once

#include "calib/profile.h"
#include "topology/base/units.h"

#include <vector>

namespace shardsim::sim {

// An NVLS call as a pipeline of chunks (calib::ChunkPipeline): with k chunks
// per operation and F fill chunks, the call moves its buffer plus F chunks
// of every operation, and pays the per-chunk overhead k + F times.
struct ChunkPipelineCorrection {
  int concurrent_ops = 0;  // 0: no pipeline
  int nodes = 1;           // more than 1: NVLS tree's chunk rules
  double fill_chunks = 0;
  double chunk_overhead_seconds = 0;

  bool active() const { return concurrent_ops > 0; }
  // The chunk one operation moves; a buffer smaller than one chunk per
  // operation is one partial chunk each.
  double chunk_bytes(double buffer_bytes) const;
  // Chunks per operation, at least one.
  double chunks(double buffer_bytes) const;
  double fill_bytes(double buffer_bytes) const;
  double overhead_seconds(double buffer_bytes) const;
};

struct SizeCorrection {
  std::vector<calib::SizeStep> bandwidth;  // empty: 1 at every size
  double latency_factor = 1;
  double latency_factor_from_bytes = 0;  // of buffer
  ChunkPipelineCorrection pipeline;

  double bandwidth_factor(double buffer_bytes) const;
  double latency_factor_at(double buffer_bytes) const {
    return buffer_bytes >= latency_factor_from_bytes ? latency_factor : 1.0;
  }
  // What to scale a plan's per-byte link weights by. As with a protocol's
  // bandwidth factor (transfer_plan.h), a fraction c of the bandwidth is
  // modelled as each payload byte holding the links 1/c as long; a chunk
  // pipeline's fill adds its chunks' bytes.
  double wire_scale(double buffer_bytes) const {
    return (buffer_bytes + pipeline.fill_bytes(buffer_bytes)) / bandwidth_factor(buffer_bytes);
  }
  // Payload per byte on the wire, so the links' payload tallies stay the buffer's.
  double payload_per_wire_byte(double buffer_bytes) const;
  TimePs latency(TimePs latency, double buffer_bytes) const;
  // Time added once per call, not per transfer: the pipeline's per-chunk overheads.
  double added_seconds(double buffer_bytes) const { return pipeline.overhead_seconds(buffer_bytes); }
};

}  // namespace shardsim::sim
