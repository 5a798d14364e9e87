#include "sim/collectives/nvls.h"

#include "sim/collectives/cost_model.h"
#include "sim/collectives/nccl_chunking.h"
#include "sim/collectives/tree.h"

#include <algorithm>

namespace shardsim::sim {

namespace {

// One GPU's NVLink traffic with its switch, per byte its transfer carries.
struct SwitchTraffic {
  GpuId gpu = 0;
  double to_switch = 0;
  double from_switch = 0;
};

// One lockstep transfer of an NVLS all-reduce.
struct NvlsTransfer {
  double share = 1;  // of the buffer
  std::vector<SwitchTraffic> switch_traffic;
  std::vector<Hop> network_hops;  // NVLS tree: the channel's tree edges, both ways
  int depth = 0;                  // of that tree
};

// Inside one node every GPU heads its own slice. The load is the same on
// every GPU, so one transfer carries the whole buffer.
std::vector<NvlsTransfer> single_node_transfers(const GroupLayout& group) {
  const double n = group.size();
  NvlsTransfer transfer;
  for (GpuId gpu : group.ranks) transfer.switch_traffic.push_back({gpu, (n + 1) / n, (n + 1) / n});
  return {transfer};
}

// Per (channel, tree): every GPU's buffer share is read by the switch and the
// result multicast back to it; the channel's head on each node also receives
// the node's sum and stores the total, and sends and receives along the tree.
std::vector<NvlsTransfer> tree_transfers(const GroupLayout& group) {
  const auto& channels = group.channels;
  const int nodes = group.node_count();
  const auto [tree_a, tree_b] = double_binary_tree(nodes);
  const double share = 1.0 / (2.0 * static_cast<double>(channels.size()));
  std::vector<NvlsTransfer> out;
  for (const auto& channel : channels) {
    for (const BinaryTree* tree : {&tree_a, &tree_b}) {
      NvlsTransfer transfer;
      transfer.share = share;
      transfer.depth = tree->depth();
      for (int j = 0; j < nodes; ++j) {
        const GpuId head = channel[static_cast<std::size_t>(j)].order.front();
        for (GpuId gpu : group.gpus_by_node[static_cast<std::size_t>(j)]) {
          const double headed = gpu == head ? 1.0 : 0.0;
          transfer.switch_traffic.push_back({gpu, 1.0 + headed, 1.0 + headed});
        }
      }
      transfer.network_hops = tree_edge_hops(*tree, channel);
      out.push_back(std::move(transfer));
    }
  }
  return out;
}

std::vector<NvlsTransfer> transfers_of(Algorithm algorithm, const GroupLayout& group) {
  return algorithm == Algorithm::nvls ? single_node_transfers(group) : tree_transfers(group);
}

// Which latencies a call's time is made of: NCCL's tuning model's (a switch
// step, and the tree's network steps), or, where the profile has a chunk
// pipeline, the pipeline's base latency and fill in place of the switch step.
enum class Timing { tuning_model, chunk_pipeline };

Timing timing_of(const calib::ProtocolParams& params, bool tuning) {
  return params.chunk_pipeline && !tuning ? Timing::chunk_pipeline : Timing::tuning_model;
}

// The switch step (load-reduce and multicast count as one, as in NCCL's
// model; none under a chunk pipeline, whose fill is that step) plus, across
// nodes, up and down the tree at the mean latency of its hops.
// `network_latencies` follows transfer.network_hops.
TimePs transfer_latency(const CollectiveContext& context, const calib::ProtocolParams& params, Timing timing,
                        const NvlsTransfer& transfer, const std::vector<TimePs>& network_latencies) {
  const auto& first_node = context.group.gpus_by_node.front();
  const TimePs switch_step = timing == Timing::chunk_pipeline
                                 ? 0
                                 : step_latency(context.cluster, params, {first_node[0], first_node[1]});
  if (network_latencies.empty()) return switch_step;
  double network = 0;
  for (TimePs t : network_latencies) network += static_cast<double>(t);
  network /= static_cast<double>(network_latencies.size());
  return switch_step + static_cast<TimePs>(2.0 * transfer.depth * network);
}

double launch_seconds(const calib::ProtocolParams& params, Timing timing) {
  return timing == Timing::chunk_pipeline ? params.chunk_pipeline->base_latency_seconds : params.base_latency_seconds;
}

// The chunk pipeline of a call on the context's group; none under the tuning model.
SizeCorrection pipeline_correction(Algorithm algorithm, const CollectiveContext& context,
                                   const calib::ProtocolParams& params, Timing timing) {
  SizeCorrection correction;
  if (timing != Timing::chunk_pipeline) return correction;
  const calib::ChunkPipeline& pipeline = *params.chunk_pipeline;
  // Heads: every GPU inside one node; one per channel (its NIC) on each node across nodes.
  const int heads = algorithm == Algorithm::nvls ? context.group.size()
                                                 : static_cast<int>(context.group.channels.size());
  correction.pipeline.concurrent_ops = nvls_concurrent_ops(pipeline.channels, heads);
  correction.pipeline.nodes = context.group.node_count();
  correction.pipeline.fill_chunks = pipeline.fill_chunks;
  correction.pipeline.chunk_overhead_seconds = pipeline.chunk_overhead_seconds;
  return correction;
}

TransferPlan nvls_plan(Algorithm algorithm, const CollectiveContext& context, const CollectiveCall& call,
                       Protocol protocol) {
  const auto& params = protocol_params(context.profile, call.op, algorithm, protocol);
  const Timing timing = timing_of(params, false);
  TransferPlan plan{call.op, algorithm, protocol, picoseconds_from_seconds(launch_seconds(params, timing)), {}, {}};
  if (context.group.size() < 2) return plan;
  plan.size_correction = pipeline_correction(algorithm, context, params, timing);
  Phase phase;
  TransferBuilder builder(context.router, params);
  for (const NvlsTransfer& transfer : transfers_of(algorithm, context.group)) {
    for (const SwitchTraffic& t : transfer.switch_traffic) builder.add_switch_traffic(t.gpu, t.to_switch, t.from_switch);
    std::vector<TimePs> latencies;
    for (const Hop& hop : transfer.network_hops) latencies.push_back(builder.add_hop(hop));
    phase.transfers.push_back(
        builder.take(transfer.share, transfer_latency(context, params, timing, transfer, latencies)));
  }
  plan.phases.push_back(std::move(phase));
  return plan;
}

CollectiveCost nvls_cost(Algorithm algorithm, const CollectiveContext& context, const CollectiveCall& call,
                         Protocol protocol, bool tuning) {
  const auto& params = protocol_params(context.profile, call.op, algorithm, protocol);
  const Timing timing = timing_of(params, tuning);
  if (context.group.size() < 2) return {{{AlphaBeta{launch_seconds(params, timing), 0}}}, {}};
  const auto transfers = transfers_of(algorithm, context.group);
  // Lockstep, as for trees: the last transfer to start sets the pace.
  TimePs start = 0;
  for (const NvlsTransfer& transfer : transfers) {
    std::vector<TimePs> latencies;
    for (const Hop& hop : transfer.network_hops) latencies.push_back(step_latency(context.cluster, params, hop));
    start = std::max(start, transfer_latency(context, params, timing, transfer, latencies));
  }
  LinkLoadCounter load(context.cluster);
  for (const NvlsTransfer& transfer : transfers) {
    for (const SwitchTraffic& t : transfer.switch_traffic) {
      load.add_switch_traffic(t.gpu, t.to_switch * transfer.share, t.from_switch * transfer.share, start);
    }
    for (const Hop& hop : transfer.network_hops) load.add(hop, transfer.share, start);
  }
  return {{with_launch(load.cost_lines(effective_speeds(context.cluster, context.profile, params.bandwidth_factor)),
                       launch_seconds(params, timing))},
          pipeline_correction(algorithm, context, params, timing)};
}

std::optional<CollectiveCost> nvls_tuning_cost(Algorithm algorithm, const CollectiveContext& context,
                                               const CollectiveCall& call, Protocol protocol) {
  if (!protocol_params(context.profile, call.op, algorithm, protocol).chunk_pipeline) return std::nullopt;
  return nvls_cost(algorithm, context, call, protocol, true);
}

}  // namespace

std::string NvlsAlgorithm::group_refusal(CollectiveOp, const GroupLayout& group) const {
  if (group.node_count() != 1) return "nvls runs inside one node; across nodes NCCL uses nvls_tree";
  if (group.size() < 2) return "nvls needs at least 2 GPUs";
  return "";
}

TransferPlan NvlsAlgorithm::plan(const CollectiveContext& context, const CollectiveCall& call, Protocol protocol) const {
  return nvls_plan(Algorithm::nvls, context, call, protocol);
}

CollectiveCost NvlsAlgorithm::cost(const CollectiveContext& context, const CollectiveCall& call,
                                   Protocol protocol) const {
  return nvls_cost(Algorithm::nvls, context, call, protocol, false);
}

std::optional<CollectiveCost> NvlsAlgorithm::tuning_cost(const CollectiveContext& context, const CollectiveCall& call,
                                                         Protocol protocol) const {
  return nvls_tuning_cost(Algorithm::nvls, context, call, protocol);
}

std::string NvlsTreeAlgorithm::group_refusal(CollectiveOp, const GroupLayout& group) const {
  if (group.node_count() < 2) return "nvls_tree spans nodes; inside one node NCCL uses nvls";
  if (!group.uniform() || group.max_gpus_per_node() < 2) {
    return "nvls_tree needs the same number of GPUs, at least 2, on every node";
  }
  return "";
}

TransferPlan NvlsTreeAlgorithm::plan(const CollectiveContext& context, const CollectiveCall& call,
                                     Protocol protocol) const {
  return nvls_plan(Algorithm::nvls_tree, context, call, protocol);
}

CollectiveCost NvlsTreeAlgorithm::cost(const CollectiveContext& context, const CollectiveCall& call,
                                       Protocol protocol) const {
  return nvls_cost(Algorithm::nvls_tree, context, call, protocol, false);
}

std::optional<CollectiveCost> NvlsTreeAlgorithm::tuning_cost(const CollectiveContext& context,
                                                             const CollectiveCall& call, Protocol protocol) const {
  return nvls_tuning_cost(Algorithm::nvls_tree, context, call, protocol);
}

}  // namespace shardsim::sim
