// The GPU probe (CUDA, cuBLASLt, NCCL): what the simulator's GPU numbers
// are, measured.
//   GEMMs         cuBLASLt, bf16 / fp16 / tf32 / fp8 (e4m3, where the GPU
//                 has it), square sizes and the shapes a transformer layer
//                 produces, random data, CUDA-event timing after warm-up,
//                 median of repeats;
//   attention     its GEMMs batched over heads (scores and context), the
//                 kernels attention runs without a fused kernel; and
//                 cuDNN's fused flash attention forward, where cuDNN 9.13.1
//                 or later is on the machine;
//   copies        device_copy (HBM), host_to_device, device_to_host (pinned);
//   launch        back-to-back empty kernels, per kernel;
//   NCCL          all-reduce, all-gather, reduce-scatter, broadcast,
//                 all-to-all and send/recv over sizes: every local GPU in one
//                 process, or one process per GPU under mpirun (the NCCL
//                 unique id broadcast over MPI);
//   interference  a large bf16 GEMM alone and while an NCCL all-reduce loop
//                 runs on another stream of the same GPU.
// Every CUDA, cuBLASLt and NCCL call is checked; a failure throws naming the
// call and the error.
#pragma once

#include "calib/measurements.h"
#include "calib/probe/probe_options.h"

namespace shardsim::calib {

bool gpu_visible();
// Collective over MPI_COMM_WORLD, or this process alone over every local
// GPU when MPI is not running; results are complete on rank 0.
Measurements run_gpu_probe(const ProbeOptions& options);

}  // namespace shardsim::calib
