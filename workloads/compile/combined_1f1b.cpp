#include "workloads/compile/combined_1f1b.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardsim::workloads {

namespace {

using Half = ListRange::Half;
using Ranges = std::vector<KernelRange>;

// One layer's nodes, forward and backward.
struct LayerNodes {
  Ranges attn, dispatch, mlp, combine;
  Ranges combine_backward, mlp_backward, dispatch_backward, mlp_dw, attn_backward, attn_dw;
};

// Where a list holds its calls over the expert-parallel group.
std::vector<std::size_t> expert_calls(const std::vector<KernelSpec>& list) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (list[i].call && list[i].call->group == CallGroup::expert_parallel) at.push_back(i);
  }
  return at;
}

class NodeBuilder {
 public:
  NodeBuilder(const std::vector<ModuleWork>& modules, bool delay) : modules_(modules), delay_(delay) {}

  LayerNodes forward_nodes(const std::vector<std::size_t>& layer) const {
    LayerNodes nodes;
    const auto [experts, calls] = experts_of(layer, true);
    for (std::size_t m : layer) {
      const std::size_t size = modules_[m].forward.size();
      if (m != experts) {
        // Before the experts (or, in a dense layer, the MLP block) is the attn
        // node; a dense layer's MLP block, its last module, is its mlp node.
        const bool mlp_node = experts == kNone && m == layer.back() && layer.size() > 1;
        (mlp_node ? nodes.mlp : nodes.attn).push_back(forward(m, 0, size));
        continue;
      }
      nodes.attn.push_back(forward(m, 0, calls[0]));
      nodes.dispatch.push_back(forward(m, calls[0], calls[0] + 1));
      nodes.mlp.push_back(forward(m, calls[0] + 1, calls[1]));
      nodes.combine.push_back(forward(m, calls[1], size));
      nodes.combine.back().on_communication_stream = true;
    }
    return nodes;
  }

  LayerNodes backward_nodes(const std::vector<std::size_t>& layer) const {
    LayerNodes nodes;
    const auto [experts, calls] = experts_of(layer, false);
    for (auto it = layer.rbegin(); it != layer.rend(); ++it) {
      const std::size_t m = *it;
      const std::size_t size = modules_[m].backward.size();
      const bool mlp_node = experts == kNone && m == layer.back() && layer.size() > 1;
      if (m != experts) {
        backward(m, 0, size, mlp_node ? nodes.mlp_backward : nodes.attn_backward, mlp_node ? &nodes.mlp_dw : &nodes.attn_dw);
        continue;
      }
      // What the experts rerun (their activation, moe_act) goes with the
      // experts' backward, on the compute stream.
      backward(m, 0, calls[0] + 1, nodes.combine_backward, nullptr, false);
      nodes.combine_backward.back().on_communication_stream = true;
      backward(m, calls[0] + 1, calls[1], nodes.mlp_backward, &nodes.mlp_dw, true);
      backward(m, calls[1], calls[1] + 1, nodes.dispatch_backward, nullptr);
      backward(m, calls[1] + 1, size, nodes.attn_backward, &nodes.attn_dw);
    }
    return nodes;
  }

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  // The layer's routed-experts module and its two all-to-alls in the
  // forward (or backward) list; kNone in a dense layer, or without expert
  // parallelism, where nothing is sent.
  std::pair<std::size_t, std::vector<std::size_t>> experts_of(const std::vector<std::size_t>& layer,
                                                              bool forward_list) const {
    for (std::size_t m : layer) {
      if (!modules_[m].routed_experts) continue;
      std::vector<std::size_t> calls = expert_calls(forward_list ? modules_[m].forward : modules_[m].backward);
      if (calls.empty()) return {kNone, {}};
      if (calls.size() != 2) {
        throw std::logic_error("combined_1f1b_order: " + modules_[m].name + " makes " + std::to_string(calls.size()) +
                               " expert-parallel calls, not a dispatch and a combine");
      }
      return {m, calls};
    }
    return {kNone, {}};
  }

  static KernelRange forward(std::size_t module, std::size_t begin, std::size_t end) {
    return {.forward_pass = true, .module = module, .list = KernelListKind::forward, .entries = {begin, end}};
  }

  // Entries [begin, end) of the module's backward (its recompute list first,
  // when `with_recompute`, by default when the range opens the list) into
  // `node`, or, under delayed weight gradients, their weight-gradient half
  // into `dw` (null: a node with no dw of its own, dispatch and combine).
  void backward(std::size_t module, std::size_t begin, std::size_t end, Ranges& node, Ranges* dw,
                std::optional<bool> with_recompute = std::nullopt) const {
    const ModuleWork& work = modules_[module];
    if (with_recompute.value_or(begin == 0) && !work.recompute.empty()) {
      node.push_back({.forward_pass = false, .module = module, .list = KernelListKind::recompute,
                      .entries = {0, work.recompute.size()}});
    }
    const bool split = delay_ && dw && std::any_of(work.backward.begin() + static_cast<std::ptrdiff_t>(begin),
                                                             work.backward.begin() + static_cast<std::ptrdiff_t>(end),
                                                             [](const KernelSpec& spec) { return spec.weight_gradient; });
    const KernelRange range{.forward_pass = false, .module = module, .list = KernelListKind::backward,
                            .entries = {begin, end, split ? Half::input_gradient : Half::all}};
    node.push_back(range);
    if (split) {
      dw->push_back(range);
      dw->back().entries.half = Half::weight_gradient;
    }
  }

  const std::vector<ModuleWork>& modules_;
  bool delay_;
};

// A chunk's modules: the embedding's, each layer's (an MTP depth's input
// module with its layer), the head's.
struct ChunkLayers {
  std::vector<std::size_t> pre, post;
  std::vector<std::vector<std::size_t>> layers;
};

ChunkLayers chunk_layers(const std::vector<ModuleWork>& modules, int head_layer, const std::vector<std::size_t>* chunk) {
  ChunkLayers split;
  if (!chunk) return split;
  for (std::size_t m : *chunk) {
    const int layer = modules[m].layer;
    if (layer < 0) {
      split.pre.push_back(m);
    } else if (layer >= head_layer) {
      split.post.push_back(m);
    } else if (!split.layers.empty() && modules[split.layers.back().front()].layer == layer) {
      split.layers.back().push_back(m);
    } else {
      split.layers.push_back({m});
    }
  }
  return split;
}

void append(Ranges& to, const Ranges& ranges) { to.insert(to.end(), ranges.begin(), ranges.end()); }

}  // namespace

const std::vector<KernelSpec>& kernel_list(const ModuleWork& work, KernelListKind kind) {
  switch (kind) {
    case KernelListKind::forward: return work.forward;
    case KernelListKind::recompute: return work.recompute;
    case KernelListKind::backward: return work.backward;
  }
  throw std::logic_error("kernel_list: unknown list");
}

CombinedOrder combined_1f1b_order(const std::vector<ModuleWork>& modules, int head_layer,
                                  const std::vector<std::size_t>* forward, const std::vector<std::size_t>* backward,
                                  bool delay_weight_gradients) {
  const NodeBuilder nodes(modules, delay_weight_gradients);
  const ChunkLayers f = chunk_layers(modules, head_layer, forward), b = chunk_layers(modules, head_layer, backward);
  // The embedding's forward and the head's backward: the pre- and
  // post-process nodes, which the first pair starts from. Their weight
  // gradients are never delayed.
  const NodeBuilder whole(modules, false);
  Ranges pre_forward, post_backward, pre_backward, post_forward;
  for (std::size_t m : f.pre) append(pre_forward, whole.forward_nodes({m}).attn);
  for (std::size_t m : f.post) append(post_forward, whole.forward_nodes({m}).attn);
  for (auto it = b.post.rbegin(); it != b.post.rend(); ++it) append(post_backward, whole.backward_nodes({*it}).attn_backward);
  for (auto it = b.pre.rbegin(); it != b.pre.rend(); ++it) append(pre_backward, whole.backward_nodes({*it}).attn_backward);

  CombinedOrder order;
  Ranges& out = order.before_sends;
  Ranges pending_forward = pre_forward, pending_backward = post_backward, pending_dw;
  const std::size_t paired = std::min(f.layers.size(), b.layers.size());
  for (std::size_t i = 0; i < paired; ++i) {
    const LayerNodes fl = nodes.forward_nodes(f.layers[i]);
    const LayerNodes bl = nodes.backward_nodes(b.layers[b.layers.size() - 1 - i]);
    append(out, pending_forward);
    append(out, pending_backward);
    append(out, bl.combine_backward);
    append(out, pending_dw);
    append(out, fl.attn);
    append(out, fl.dispatch);
    append(out, bl.mlp_backward);
    append(out, bl.dispatch_backward);
    append(out, bl.mlp_dw);
    append(out, fl.mlp);
    pending_forward = fl.combine;
    pending_backward = bl.attn_backward;
    pending_dw = bl.attn_dw;
  }
  append(out, pending_backward);
  for (std::size_t j = b.layers.size() - paired; j-- > 0;) {
    const LayerNodes bl = nodes.backward_nodes(b.layers[j]);
    for (const Ranges* node : {&bl.combine_backward, &bl.mlp_backward, &bl.dispatch_backward, &bl.mlp_dw,
                               &bl.attn_backward, &bl.attn_dw}) {
      append(out, *node);
    }
  }
  append(out, pre_backward);
  append(out, pending_forward);
  for (std::size_t i = paired; i < f.layers.size(); ++i) {
    const LayerNodes fl = nodes.forward_nodes(f.layers[i]);
    for (const Ranges* node : {&fl.attn, &fl.dispatch, &fl.mlp, &fl.combine}) append(out, *node);
  }
  append(out, post_forward);
  order.after_sends = pending_dw;

  // Mark each module's first forward range and last backward range.
  std::map<std::size_t, KernelRange*> first_forward, last_backward;
  for (Ranges* ranges : {&order.before_sends, &order.after_sends}) {
    for (KernelRange& range : *ranges) {
      if (range.forward_pass) {
        first_forward.try_emplace(range.module, &range);
      } else if (range.list == KernelListKind::backward) {
        last_backward[range.module] = &range;
      }
    }
  }
  for (auto& [module, range] : first_forward) range->starts_module = true;
  for (auto& [module, range] : last_backward) range->finishes_module = true;
  return order;
}

}  // namespace shardsim::workloads
