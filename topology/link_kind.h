// The kinds of link a cluster is made of. Calibration profiles give each
// kind its own efficiency and per-hop latency.
#pragma once

namespace shardsim::topology {

enum class LinkKind { nvlink, pcie, network };
inline constexpr int kLinkKindCount = 3;

const char* to_string(LinkKind kind);

}  // namespace shardsim::topology
