// The terminal table of a training step, simulated (shardsim run) or
// measured (shardsim exec): the job, step time, MFU, tokens per GPU per
// second, peak memory with its breakdown, and one rank's time breakdown.
#pragma once

#include "sim/report/step_report.h"
#include "workloads/ir/program.h"
#include "workloads/ir/timeline.h"

#include <nlohmann/json.hpp>

#include <string>

namespace shardsim::cli {

// The "# experts: ..." header line from a description's "experts" entry
// (workloads::expert_description).
void print_experts_line(const nlohmann::json& experts);
// "# DeepSpeed-Ulysses: ..." for a plan whose sequence is split over u > 1 GPUs.
void print_ulysses_line(int ulysses);

// `title` opens the first line: "shardsim run", "shardsim exec".
void print_step_table(const std::string& title, const workloads::Program& program, const workloads::Timeline& timeline,
                      const sim::StepSummary& summary, const std::string& cluster);

}  // namespace shardsim::cli
