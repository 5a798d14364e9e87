#include "sim/collectives/binary_tree.h"

#include <algorithm>
#include <stdexcept>

namespace shardsim::sim {

int BinaryTree::root() const {
  for (int p = 0; p < size(); ++p) {
    if (parent[static_cast<std::size_t>(p)] < 0) return p;
  }
  return -1;
}

std::vector<int> BinaryTree::children(int position) const {
  std::vector<int> out;
  for (int p = 0; p < size(); ++p) {
    if (parent[static_cast<std::size_t>(p)] == position) out.push_back(p);
  }
  return out;
}

int BinaryTree::depth() const {
  int deepest = 0;
  for (int p = 0; p < size(); ++p) {
    int d = 0;
    for (int q = p; parent[static_cast<std::size_t>(q)] >= 0; q = parent[static_cast<std::size_t>(q)]) ++d;
    deepest = std::max(deepest, d);
  }
  return deepest;
}

BinaryTree in_order_binary_tree(int size) {
  if (size < 1) throw std::invalid_argument("a tree needs at least one node");
  BinaryTree tree;
  tree.parent.assign(static_cast<std::size_t>(size), -1);
  // Work with labels q = p + 1 in [1, size]; q's height is the position of
  // its lowest set bit b, its parent the label with lowest bit 2b next to it.
  // A parent beyond `size` does not exist: climb until one does.
  for (int q = 1; q <= size; ++q) {
    int label = q;
    while (true) {
      const int bit = label & -label;
      if (bit > size) {
        label = 0;  // no ancestor inside the tree: q is the root
        break;
      }
      label = (label | (bit << 1)) & ~bit;
      if (label <= size) break;
    }
    tree.parent[static_cast<std::size_t>(q - 1)] = label == 0 ? -1 : label - 1;
  }
  return tree;
}

std::pair<BinaryTree, BinaryTree> double_binary_tree(int size) {
  BinaryTree a = in_order_binary_tree(size);
  BinaryTree b;
  b.parent.assign(static_cast<std::size_t>(size), -1);
  auto relabel = [size](int p) { return size % 2 == 0 ? size - 1 - p : (p + 1) % size; };
  for (int p = 0; p < size; ++p) {
    const int parent = a.parent[static_cast<std::size_t>(p)];
    b.parent[static_cast<std::size_t>(relabel(p))] = parent < 0 ? -1 : relabel(parent);
  }
  return {std::move(a), std::move(b)};
}

}  // namespace shardsim::sim
