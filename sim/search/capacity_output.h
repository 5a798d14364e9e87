// What `shardsim capacity` writes: a table for a terminal (one row per GPU
// count, then the answers: fewest GPUs in time, fewest GPU-hours, fastest),
// the rows as CSV, and the whole plan as JSON. Deterministic, as the search's.
#pragma once

#include "sim/search/capacity_plan.h"

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>

namespace shardsim::sim {

struct CapacityHeading {
  std::string model;
  double parameters = 0;
  std::string cluster;
  std::string profile;
  double memory_limit_bytes = 0;
  std::size_t simulate = 0;  // fastest estimates simulated per count
};

void print_capacity_table(std::ostream& out, const CapacityHeading& heading, const CapacityPlan& plan);
void write_capacity_csv(std::ostream& out, const CapacityPlan& plan);
nlohmann::json capacity_to_json(const CapacityHeading& heading, const CapacityPlan& plan);

}  // namespace shardsim::sim
