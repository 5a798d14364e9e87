// What the probes measure, shared by the CPU and GPU backends.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace shardsim::calib {

struct ProbeOptions {
  bool quick = false;            // small sizes and few repeats (CI)
  double max_bytes = 1 << 30;    // largest collective / copy
  int warmup = 3;
  int repeats = 10;              // timings per point; the median is kept
  // CPU probe: each timing covers back-to-back calls for at least this long
  // and keeps their mean, as nccl-tests averages its iterations. A single
  // short call on a host with more ranks than cores often runs before the
  // others are scheduled, at a whole core's speed; a run's kernels, back to
  // back on every rank, share the cores, and so do the calls of a batch.
  double min_timed_seconds = 0.02;
  // GPU GEMMs and attention: back-to-back calls for at least this long
  // before each shape is timed, and timings of back-to-back calls lasting
  // min_timed_seconds. A GPU at its power limit lowers its clock within
  // about 0.15 s of large GEMMs (an H200's bf16 GEMMs then run 12-20 %
  // slower than a lone call does), and a training step is one long run of
  // kernels, so that is the speed its GEMMs see.
  double warmup_seconds = 0.15;
  // Called with one line of progress or an nccl-tests-style table row.
  std::function<void(const std::string&)> print = [](const std::string&) {};
};

// m, n, k grids: powers of two squares plus the shapes a transformer layer
// produces for the given hidden size (QKV, output projection, MLP) at a few
// token counts.
struct GemmShape3 {
  long long m = 0, n = 0, k = 0;
};
std::vector<GemmShape3> probe_gemm_shapes(long long max_square, long long hidden, long long max_tokens);

// Every GEMM a LLaMA-style layer of `hidden` runs in training, as the
// Program writes them (workloads/kernels/tensor_parallel_gemms.h): the forward
// (tokens x out x in), the input gradient (tokens x in x out) and the weight
// gradient (in x out x tokens) of QKV, the attention output, MLP gate + up and
// MLP down, each whole and split over each tensor-parallel degree given
// (column-parallel QKV and gate + up split out, row-parallel output and down
// split in), at token counts 256, 1024, ... up to `max_tokens`. GEMMs of the
// same FLOPs run up to 15 % apart on an H200 by their shape alone (a down
// projection's input gradient against its forward), which a curve by FLOPs
// cannot tell apart; profiles keep these points for ops of the same shape.
std::vector<GemmShape3> layer_gemm_shapes(long long hidden, long long max_tokens,
                                          const std::vector<int>& tensor_parallel_degrees);

double median_of(std::vector<double> values);

}  // namespace shardsim::calib
