#include "sim/cli/search_space_options.h"

#include "topology/placement.h"
#include "workloads/inputs/sharding_systems.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace shardsim::cli {

std::vector<std::string> split_list(const std::string& option, const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) {
    if (item.empty()) throw std::invalid_argument(option + ": empty item in '" + text + "'");
    items.push_back(item);
  }
  if (items.empty()) throw std::invalid_argument(option + ": give at least one value");
  return items;
}

std::vector<long long> positive_integers(const std::string& option, const std::string& text, long long most) {
  std::vector<long long> values;
  for (const auto& item : split_list(option, text)) {
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || value < 1 || value > most) {
      throw std::invalid_argument(option + ": '" + item + "' is not a whole number from 1 to " + std::to_string(most));
    }
    values.push_back(value);
  }
  return values;
}

sim::SearchSpace parse_search_space(const SearchSpaceOptions& options) {
  sim::SearchSpace space;
  if (options.systems != "all") {
    const std::vector<std::string> families = workloads::search_families();
    space.families.clear();
    for (const auto& item : split_list("--systems", options.systems)) {
      if (std::find(families.begin(), families.end(), item) == families.end()) {
        std::string known = "all";
        for (std::size_t i = 0; i < families.size(); ++i) {
          known += (i + 1 == families.size() ? " or " : ", ") + families[i];
        }
        throw std::invalid_argument("--systems: '" + item + "' is not " + known);
      }
      if (!space.searches(item)) space.families.push_back(item);
    }
  }
  space.micro_batch_sizes.clear();
  for (const long long size : positive_integers("--micro-batch-sizes", options.micro_batch_sizes, 1LL << 40)) {
    space.micro_batch_sizes.push_back(size);
  }
  space.recompute.clear();
  for (const auto& item : split_list("--recompute", options.recompute)) {
    if (item == "none") space.recompute.push_back(workloads::Recompute::none);
    else if (item == "selective") space.recompute.push_back(workloads::Recompute::selective);
    else if (item == "full") space.recompute.push_back(workloads::Recompute::full);
    else throw std::invalid_argument("--recompute: '" + item + "' is not none, selective or full");
  }
  space.bucket_bytes.clear();
  for (const auto& item : split_list("--buckets", options.buckets)) {
    std::size_t used = 0;
    double bytes = 0;
    try {
      bytes = std::stod(item, &used);
    } catch (const std::exception&) {
    }
    if (used != item.size() || !(bytes >= 1)) {
      throw std::invalid_argument("--buckets: '" + item + "' is not a size in bytes (examples: 2.5e8, 1e9)");
    }
    space.bucket_bytes.push_back(bytes);
  }
  space.placements.clear();
  for (const auto& item : split_list("--placements", options.placements)) {
    space.placements.push_back(topology::parse_placement_policy(item));
  }
  if (!options.expert_parallel.empty()) {
    for (const long long size : positive_integers("--expert-parallel", options.expert_parallel, 1 << 16)) {
      space.expert_parallel.push_back(static_cast<int>(size));
    }
  }
  if (!options.ulysses.empty()) {
    for (const long long size : positive_integers("--ulysses", options.ulysses, 1 << 16)) {
      space.ulysses.push_back(static_cast<int>(size));
    }
  }
  if (!options.context_parallel.empty()) {
    for (const long long size : positive_integers("--context-parallel", options.context_parallel, 1 << 16)) {
      space.context_parallel.push_back(static_cast<int>(size));
    }
  }
  space.tp_comm_overlap.clear();
  for (const auto& item : split_list("--tp-comm-overlap", options.tp_comm_overlap)) {
    if (item != "off" && item != "on") throw std::invalid_argument("--tp-comm-overlap: '" + item + "' is not off or on");
    space.tp_comm_overlap.push_back(item == "on");
  }
  return space;
}

void add_search_space_options(CLI::App& command, SearchSpaceOptions& options) {
  command.add_option("--systems", options.systems,
                      "all, or a list of: named (ZeRO/FSDP/MiCS/ZeRO++), amsp (factor triples), megatron "
                      "(tensor x pipeline x data), zero-pipeline (ZeroPP)")
      ->capture_default_str();
  command.add_option("--micro-batch-sizes", options.micro_batch_sizes, "Micro-batch sizes to try")->capture_default_str();
  command.add_option("--recompute", options.recompute, "Recompute choices to try")->capture_default_str();
  command.add_option("--buckets", options.buckets, "Reduce/all-gather bucket sizes to try, bytes")->capture_default_str();
  command.add_option("--placements", options.placements, "Placements to try: consecutive, leaf-aware, scattered")
      ->capture_default_str();
  command.add_option("--expert-parallel", options.expert_parallel,
                     "MoE models: expert-parallel sizes to try, each above 1 in both layouts (E+D, D+E); "
                     "default: 1 and the node's GPUs");
  command.add_option("--ulysses", options.ulysses,
                     "DeepSpeed-Ulysses degrees to try with the data-parallel systems (1: without); default: 1, "
                     "and the node's GPUs when the global batch has fewer sequences than the job has GPUs");
  command.add_option("--context-parallel", options.context_parallel,
                     "Megatron-LM layouts: context-parallel degrees to try (1: without); default: 1, and 2, 4 and 8 "
                     "when the global batch has fewer sequences than the job has GPUs");
  command.add_option("--tp-comm-overlap", options.tp_comm_overlap,
                      "Megatron-LM layouts with tensor parallelism: TP comm overlap off, on, or both (off,on)")
      ->capture_default_str();
}

}  // namespace shardsim::cli
