// The plan-space options `shardsim search` and `shardsim capacity` share
// (sim/search/plan_space.h): systems, micro-batch sizes, recompute choices,
// buckets, placements, expert-parallel, Ulysses and context-parallel degrees,
// TP comm overlap; and the comma-separated lists they are written as.
#pragma once

#include "sim/search/plan_space.h"

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace shardsim::cli {

struct SearchSpaceOptions {
  std::string systems = "all";
  std::string micro_batch_sizes = "1,2,4,8";
  std::string recompute = "none,selective,full";
  std::string buckets = "2.5e8,1e9";
  std::string placements = "consecutive,leaf-aware";
  std::string expert_parallel;   // empty: the space's default
  std::string ulysses;           // empty: the space's default
  std::string context_parallel;  // empty: the space's default
  std::string tp_comm_overlap = "off";
};

void add_search_space_options(CLI::App& command, SearchSpaceOptions& options);

// Throws std::invalid_argument naming the option and the bad item.
sim::SearchSpace parse_search_space(const SearchSpaceOptions& options);

// The items of a comma-separated list; std::invalid_argument naming `option`
// for an empty item or an empty list.
std::vector<std::string> split_list(const std::string& option, const std::string& text);

// A comma-separated list of whole numbers from 1 to `most`.
std::vector<long long> positive_integers(const std::string& option, const std::string& text, long long most);

}  // namespace shardsim::cli
