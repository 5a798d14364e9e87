// What `shardsim search` writes: the ranked table and the Pareto front for a
// terminal, every candidate as CSV and as an HDF5 compound table
// (/candidates, readable with pandas.DataFrame(f["candidates"][:])), and the
// ranked table as JSON. Every writer is deterministic: the same SearchResult
// gives the same bytes, however many processes produced it.
#pragma once

#include "sim/search/plan_search.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace shardsim::sim {

struct SearchHeading {
  std::string model;
  double parameters = 0;
  std::string cluster;
  std::string profile;
  int gpus = 0;
  double memory_limit_bytes = 0;
};

void print_search_table(std::ostream& out, const SearchHeading& heading, const SearchResult& result, std::size_t top);
// Every rejected candidate with its reason.
void print_rejections(std::ostream& out, const SearchResult& result, double memory_limit_bytes);
void write_search_csv(std::ostream& out, const SearchResult& result);
void write_search_hdf5(const std::string& path, const SearchHeading& heading, const SearchResult& result);
// One simulated plan: what it chose and how its step went.
nlohmann::json simulated_plan_to_json(const Candidate& candidate, const SimulatedStep& step);
nlohmann::json search_to_json(const SearchHeading& heading, const SearchResult& result, std::size_t top);

}  // namespace shardsim::sim
