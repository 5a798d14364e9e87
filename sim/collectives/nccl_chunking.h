// NCCL's chunking of NVLS calls: how many operations run at once and the
// chunk each moves at a time, as enqueue.cc decides them. The numbers are
// NCCL's (NVIDIA/nccl at commit 5067397c, cited line by line in the .cpp);
// the pipeline they feed is the profile's (calib::ChunkPipeline).
#pragma once

namespace shardsim::sim {

// NVLS runs channels x heads operations at once (enqueue.cc calcCollChunking's
// concurrentOps). Inside one node every GPU heads an equal share
// (graph/search.cc: "Force intra-node NVLS algorithm to pull evenly from all
// GPUs"); across nodes each node has one head per NVLS channel's NIC.
int nvls_concurrent_ops(int channels, int heads);

// The chunk NCCL moves per operation for an all-reduce of `buffer_bytes`:
// NVLS inside one node, NVLS tree across `nodes` nodes. NCCL shrinks the
// chunk as the buffer shrinks so every operation still has a few chunks
// to pipeline.
double nvls_chunk_bytes(double buffer_bytes, int concurrent_ops);
double nvls_tree_chunk_bytes(double buffer_bytes, int concurrent_ops, int nodes);

}  // namespace shardsim::sim
