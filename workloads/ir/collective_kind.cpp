#include "workloads/ir/collective_kind.h"

#include <array>
#include <utility>

namespace shardsim::workloads {

namespace {

template <typename Enum, std::size_t N>
std::optional<Enum> lookup(const std::array<std::pair<Enum, std::string_view>, N>& names, std::string_view name) {
  for (const auto& [value, text] : names) {
    if (text == name) return value;
  }
  return std::nullopt;
}

template <typename Enum, std::size_t N>
std::vector<Enum> values_of(const std::array<std::pair<Enum, std::string_view>, N>& names) {
  std::vector<Enum> values;
  for (const auto& [value, text] : names) values.push_back(value);
  return values;
}

template <typename Enum, std::size_t N>
std::string_view name_of(const std::array<std::pair<Enum, std::string_view>, N>& names, Enum value) {
  for (const auto& [v, text] : names) {
    if (v == value) return text;
  }
  return "?";
}

constexpr std::array<std::pair<CollectiveOp, std::string_view>, kCollectiveOpCount> kOpNames{{
    {CollectiveOp::all_reduce, "all_reduce"},
    {CollectiveOp::all_gather, "all_gather"},
    {CollectiveOp::reduce_scatter, "reduce_scatter"},
    {CollectiveOp::broadcast, "broadcast"},
    {CollectiveOp::reduce, "reduce"},
    {CollectiveOp::all_to_all, "all_to_all"},
    {CollectiveOp::send_recv, "send_recv"},
    {CollectiveOp::send, "send"},
}};
constexpr std::array<std::pair<Algorithm, std::string_view>, 6> kAlgorithmNames{{
    {Algorithm::ring, "ring"},
    {Algorithm::tree, "tree"},
    {Algorithm::hierarchical, "hier"},
    {Algorithm::direct, "direct"},
    {Algorithm::nvls, "nvls"},
    {Algorithm::nvls_tree, "nvls_tree"},
}};
constexpr std::array<std::pair<Protocol, std::string_view>, 3> kProtocolNames{{
    {Protocol::ll, "ll"},
    {Protocol::ll128, "ll128"},
    {Protocol::simple, "simple"},
}};

}  // namespace

const std::vector<CollectiveOp>& all_collective_ops() {
  static const std::vector<CollectiveOp> ops = values_of(kOpNames);
  return ops;
}

const std::vector<CollectiveOp>& nccl_tests_collective_ops() {
  static const std::vector<CollectiveOp> ops = [] {
    std::vector<CollectiveOp> measured = values_of(kOpNames);
    measured.pop_back();  // send
    return measured;
  }();
  return ops;
}

const std::vector<Algorithm>& all_algorithms() {
  static const std::vector<Algorithm> algorithms = values_of(kAlgorithmNames);
  return algorithms;
}

const std::vector<Protocol>& all_protocols() {
  static const std::vector<Protocol> protocols = values_of(kProtocolNames);
  return protocols;
}

std::string_view to_string(CollectiveOp op) { return name_of(kOpNames, op); }
std::string_view to_string(Algorithm algorithm) { return name_of(kAlgorithmNames, algorithm); }
std::string_view to_string(Protocol protocol) { return name_of(kProtocolNames, protocol); }

std::optional<CollectiveOp> parse_collective_op(std::string_view name) { return lookup(kOpNames, name); }
std::optional<Algorithm> parse_algorithm(std::string_view name) { return lookup(kAlgorithmNames, name); }
std::optional<Protocol> parse_protocol(std::string_view name) { return lookup(kProtocolNames, name); }

double bus_bandwidth_factor(CollectiveOp op, int ranks) {
  const double n = ranks;
  switch (op) {
    case CollectiveOp::all_reduce: return 2.0 * (n - 1) / n;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all: return (n - 1) / n;
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce:
    case CollectiveOp::send_recv:
    case CollectiveOp::send: return 1.0;
  }
  return 1.0;
}

}  // namespace shardsim::workloads
