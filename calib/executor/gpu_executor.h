// execute_on_gpu: the GPU backend of the executor (CUDA, cuBLASLt, NCCL),
// either one MPI process per GPU (the local rank picks the device; the NCCL
// unique id goes out over MPI_Bcast), or, when no MPI launcher started the
// process, one process over the local GPUs (rank r on GPU r, a host thread
// each, rank_threads.h). ncclCommSplit makes one communicator per group of
// each of the Program's communicators.
//
// The host enqueues the rank's ops in program order, as a framework's one
// host thread does, each on a CUDA stream of its Program stream:
//   dependencies on other streams   cudaStreamWaitEvent on their end events;
//   gemm               cuBLASLt GEMMs of the op's dtype and m x n x k, as
//                      many as make its FLOPs, on random operands;
//   attention          cuDNN's fused flash attention (calib/cuda/
//                      fused_attention.h) over as many matrices as make its
//                      FLOPs; where cuDNN cannot run it, strided-batched
//                      cuBLASLt GEMMs of the same FLOPs, and the run's
//                      device says which;
//   element-wise / optimizer   a kernel that reads and writes the op's bytes;
//   collective   the NCCL call with the op's group, bytes (in the training
//                dtype) and root;
//   memory       device buffers from a pool kept across steps, so an
//                allocation that does not fit fails as it would in training.
// Each op is timed by CUDA events before and after it on its stream, from
// a step-start event every stream waits for. The host waits polling the
// events: a step that makes no progress for the stall timeout, an NCCL
// asynchronous error or a stop signal aborts the communicators and ends the
// run with ExecutionError naming each stream's stuck op.
// Built only with CUDA + NCCL, into the module of gpu_backend.h.
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"

namespace shardsim::calib {

// CUDA devices visible to this process (0 when there is no driver).
int visible_gpus();

// With MPI running, collective over MPI_COMM_WORLD (size = program.ranks);
// without, every rank here, on as many local GPUs.
MeasuredRun execute_on_gpu(const workloads::Program& program, const ExecutionOptions& options);

}  // namespace shardsim::calib
