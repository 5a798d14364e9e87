// The vocabulary of collective communication shared by the Program (a
// collective op in a rank's DAG), calibration profiles (parameters per
// collective, algorithm and protocol) and the simulator.
//
// Names follow NCCL: the collectives of nccl-tests plus a one-way
// point-to-point send (ncclSend/ncclRecv, what pipeline stages exchange),
// NCCL's algorithms (ring,
// tree, and on NVSwitch-3 nodes NVLS and NVLS tree, which reduce inside the
// switch) plus the hierarchical scheme training frameworks build from them and
// the direct point-to-point exchange, and NCCL's three protocols (LL: 8-byte
// lines with inline flags, lowest latency; LL128: 128-byte lines; Simple:
// large chunks, full bandwidth).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim::workloads {

// send: the member at `root` sends its buffer to every other member of the
// group (pipelines use groups of two: one send, one receive).
// One byte, so that an Op keeps it beside its other one-byte fields (program.h).
enum class CollectiveOp : std::uint8_t {
  all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, send_recv, send
};
inline constexpr int kCollectiveOpCount = 8;
enum class Algorithm { ring, tree, hierarchical, direct, nvls, nvls_tree };
enum class Protocol { ll, ll128, simple };

const std::vector<CollectiveOp>& all_collective_ops();
// The ones nccl-tests measures (every op but send), which probes sweep and
// profiles calibrate; a send is priced with send_recv's parameters, the same
// point-to-point path one direction at a time.
const std::vector<CollectiveOp>& nccl_tests_collective_ops();
const std::vector<Algorithm>& all_algorithms();
const std::vector<Protocol>& all_protocols();

std::string_view to_string(CollectiveOp op);
std::string_view to_string(Algorithm algorithm);
std::string_view to_string(Protocol protocol);

std::optional<CollectiveOp> parse_collective_op(std::string_view name);
std::optional<Algorithm> parse_algorithm(std::string_view name);
std::optional<Protocol> parse_protocol(std::string_view name);

// nccl-tests' bus-bandwidth factor for n ranks: busbw = algbw * factor
// (all-reduce 2(n-1)/n; reduce-scatter, all-gather, all-to-all (n-1)/n;
// broadcast, reduce, send/recv, send 1).
double bus_bandwidth_factor(CollectiveOp op, int ranks);

// Broadcast and reduce: one member is the root. NCCL runs them as pipelined
// chains from or to it, not as rings around every member.
inline bool is_rooted(CollectiveOp op) { return op == CollectiveOp::broadcast || op == CollectiveOp::reduce; }

}  // namespace shardsim::workloads
