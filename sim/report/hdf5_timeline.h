// A step Timeline as HDF5 (FORMATS.md): chunked, growable 1-D datasets of
// compound rows, readable with h5py and pandas.DataFrame(f["ops"][:]).
//   /ops     one row per op of the recorded ranks: rank, op (index in the
//            rank's program), name, kind (compute | collective | memory),
//            class (gemm, attention, elementwise, optimizer; the collective;
//            or the memory category), stream, start_seconds, end_seconds,
//            moving_seconds (a collective: when its last member issued it
//            and its data began to move, waiting for the others before;
//            -1 for other ops, and in files written before the column),
//            flops, bytes (HBM bytes of a kernel, buffer bytes of a
//            collective, +allocated / -freed bytes of a memory op),
//            group_size, call (collective call id shared by its members, -1
//            otherwise);
//   /memory  per recorded rank, its memory after every allocation or free:
//            rank, time_seconds, category, delta_bytes, total_bytes;
//   /links   per link (flow mode): link, kind, bytes (data that crossed it,
//            whatever protocol carried it), capacity_bytes_per_second,
//            utilisation (bytes / (capacity x step time)).
// The root group carries the run's summary as attributes: summary_json
// (the `shardsim run --json` object), step_seconds, schema ("shardsim-timeline-1").
// The file is written beside `path` and renamed into place when complete.
#pragma once

#include "topology/cluster.h"
#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::sim {

void write_hdf5_timeline(const std::string& path, const workloads::Program& program, const workloads::Timeline& timeline,
                         const std::vector<int>& ranks, const topology::Cluster& cluster, const nlohmann::json& summary);

// One row of /ops, as read back.
struct TimelineOpRow {
  int rank = 0;
  std::uint32_t op = 0;
  std::string name, kind, op_class, stream;
  double start_seconds = -1, end_seconds = -1;
  double moving_seconds = -1;  // collectives; -1 where not known
  double flops = 0, bytes = 0;
  int group_size = 1;
  std::int64_t call = -1;
};

struct TimelineFile {
  std::string path;
  std::vector<TimelineOpRow> ops;  // in the file's order: by rank, then op
  nlohmann::json summary;          // the summary_json attribute
  double step_seconds = 0;
};

// Reads a file written by write_hdf5_timeline (InputError naming the path
// and what is missing or of another schema).
TimelineFile read_hdf5_timeline(const std::string& path);

}  // namespace shardsim::sim
