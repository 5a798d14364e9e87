// execute_on_cpu: the CPU backend of the executor. It runs a Program for
// real, one MPI process per rank (DESIGN.md, "One IR, two backends").
//
// Each rank plays its program as the simulator does. Each stream runs its ops
// in program order. An op starts once it heads its stream and every op in
// its deps has ended:
//   compute     runs on the rank's compute queue (compute_queue.h: one
//               thread, CpuKernels' Eigen GEMMs with the op's shapes and
//               streaming passes with its bytes), one at a time. The main
//               thread enqueues a kernel once each of its deps has ended or
//               is ahead of it in the queue, as a host enqueues kernels
//               ahead of a GPU, and meanwhile keeps communication going;
//   collective  a non-blocking MPI collective (MPI_Iallreduce, ...) on an
//               MPI communicator made for each group of the Program's
//               communicators, with the op's bytes in nccl-tests' convention.
//               It occupies its stream from its issue to its completion. A
//               rank issues its calls on one communicator in program order,
//               as a framework's single host thread does with NCCL, so every
//               member issues them in the same order;
//   memory      allocates or frees at once, from a pool that keeps buffers
//               across steps (like PyTorch's caching allocator), or, behind
//               queued kernels it depends on, in the queue as they end;
//               resident memory is allocated before the first step.
// Only the main thread calls MPI (MPI_THREAD_FUNNELED is enough), polling
// non-blocking calls, which is also what makes them progress.
//
// Warm-up steps run first, then the measured steps. Every step starts
// after a barrier. Times are seconds from that rank's step start. A step
// takes as long as its slowest rank, and the median step's op timings are
// kept. A collective in flight past the stall timeout ends the run with
// ExecutionError, as does a rank that cannot start anything for that long;
// the message names the op, its group and the ranks. Before anything runs,
// the program's peak memory times the ranks on each host is checked against
// the host's available memory (std::invalid_argument suggesting --scale).
#pragma once

#include "calib/executor/measured_run.h"
#include "workloads/ir/program.h"

namespace shardsim::calib {

// Collective over MPI_COMM_WORLD, whose size must equal program.ranks
// (std::invalid_argument otherwise). MPI must be initialised.
MeasuredRun execute_on_cpu(const workloads::Program& program, const ExecutionOptions& options);

// The program's peak memory on `rank` in program order: its resident bytes
// plus the largest running sum of its memory ops.
double program_peak_memory_bytes(const workloads::Program& program, int rank);

}  // namespace shardsim::calib
