// Raw measurements: what the probes (GPU and CPU) and the nccl-tests
// importer write, and what `shardsim calib fit` reads. One JSON document,
// "format": "shardsim-measurements-1", every time in seconds and every size
// in bytes:
//
//   machine        where it ran (host, device, backend, software versions);
//   gemm           {dtype, m, n, k, batch, seconds}: C[m,n] = A[m,k] B[k,n],
//                  `batch` of them in one call (attention's GEMMs, one per
//                  head; optional, 1 when absent);
//   copies         {kind, bytes, seconds}; kind device_copy (a buffer copied
//                  inside device memory, so 2 x bytes of traffic),
//                  host_to_device, device_to_host, host_copy (as device_copy,
//                  in host memory);
//   kernel_launch_seconds   one empty kernel, launch to completion, per sample;
//   attention      {dtype, batch, heads, sequence, head_dim, causal, flops, seconds};
//   collectives    nccl-tests rows: {op, algorithm, ranks, nodes, bytes
//                  (nccl-tests' size: the whole array for all-gather and
//                  reduce-scatter), type, in_place, seconds, wrong}; wrong is
//                  null when the run did not check results;
//   interference   {dtype, m, n, k, alone_seconds, with_collective_seconds,
//                  op, bytes}: one GEMM timed alone and while a collective
//                  runs on another stream of the same device.
// Files merge by concatenation, so a GPU probe run and a multi-node
// nccl-tests import fit into one profile.
#pragma once

#include "workloads/ir/collective_kind.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace shardsim::calib {

struct MachineInfo {
  std::string host;
  std::string device;   // "NVIDIA H200", "x86_64 CPU, 2 cores"
  std::string backend;  // "cuda", "cpu", "nccl-tests"
  std::string software; // library versions
};

struct GemmMeasurement {
  std::string dtype;  // bf16, fp16, tf32, fp8, fp32, fp64
  long long m = 0, n = 0, k = 0;
  double seconds = 0;
  long long batch = 1;  // independent GEMMs of this shape in the one call timed

  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  }
};

struct CopyMeasurement {
  std::string kind;  // device_copy, host_to_device, device_to_host, host_copy
  double bytes = 0;
  double seconds = 0;

  // Bytes through the memory that bounds the copy: a copy inside one
  // memory reads and writes it.
  double traffic_bytes() const { return (kind == "device_copy" || kind == "host_copy") ? 2 * bytes : bytes; }
};

struct AttentionMeasurement {
  std::string dtype;
  int batch = 0, heads = 0, sequence = 0, head_dim = 0;
  bool causal = false;
  double flops = 0;  // as the probe counted them (forward, causal halving included)
  double seconds = 0;
};

struct CollectiveMeasurement {
  workloads::CollectiveOp op = workloads::CollectiveOp::all_reduce;
  std::string algorithm = "auto";  // what NCCL_ALGO forced, or "auto"; "mpi" for the CPU probe
  int ranks = 1;
  int nodes = 1;
  double bytes = 0;
  std::string type = "float";
  bool in_place = false;
  double seconds = 0;
  std::optional<double> wrong;  // nullopt: not checked
  std::string source;           // log file and line, or probe
};

struct InterferenceMeasurement {
  std::string dtype;
  long long m = 0, n = 0, k = 0;
  double alone_seconds = 0;
  double with_collective_seconds = 0;
  workloads::CollectiveOp op = workloads::CollectiveOp::all_reduce;
  double bytes = 0;
};

struct Measurements {
  MachineInfo machine;
  std::vector<GemmMeasurement> gemm;
  std::vector<CopyMeasurement> copies;
  std::vector<double> kernel_launch_seconds;
  std::vector<AttentionMeasurement> attention;
  std::vector<CollectiveMeasurement> collectives;
  std::vector<InterferenceMeasurement> interference;

  // Appends `other`'s points; the machine stays this one's unless empty.
  void merge(const Measurements& other);
};

inline constexpr const char* kMeasurementsFormat = "shardsim-measurements-1";

nlohmann::json measurements_to_json(const Measurements& measurements);
// Throws InputError naming `file` and the field.
Measurements parse_measurements(const nlohmann::json& document, const std::string& file);
Measurements load_measurements(const std::string& file);

}  // namespace shardsim::calib
