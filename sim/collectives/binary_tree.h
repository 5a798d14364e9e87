// The double binary tree NCCL spreads an all-reduce over nodes with.
//
// Tree A is the in-order binary tree on positions 0..m-1 in which position
// p sits at height = trailing zeros of p+1 (leaves on even p, the root at the
// largest power of two <= m, minus one). Tree B relabels it so that most of
// A's leaves are B's inner nodes: mirrored (p -> m-1-p) when m is even,
// shifted (p -> p+1 mod m) when m is odd. Each node then sends and receives
// about the same in the two trees together, which is why a tree all-reduce
// can reach ring bandwidth at logarithmic latency.
#pragma once

#include <utility>
#include <vector>

namespace shardsim::sim {

struct BinaryTree {
  std::vector<int> parent;  // per position; -1 for the root

  int size() const { return static_cast<int>(parent.size()); }
  int root() const;
  std::vector<int> children(int position) const;
  int depth() const;  // edges on the longest root-to-leaf path
};

BinaryTree in_order_binary_tree(int size);
std::pair<BinaryTree, BinaryTree> double_binary_tree(int size);

}  // namespace shardsim::sim
