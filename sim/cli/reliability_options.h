// The reliability options `shardsim run --tokens` and `shardsim capacity`
// share: how often GPUs fail, how fast checkpoints are written, how long a
// restart takes (sim/search/interruptions.h, whose defaults they start from).
#pragma once

#include "sim/search/interruptions.h"

namespace CLI {
class App;
}

namespace shardsim::cli {

// Adds --failures-per-gpu-day, --checkpoint-bytes-per-second, --restart-seconds
// and --checkpoint-seconds, each checked to be a finite number >= 0 (the
// bandwidth > 0).
void add_reliability_options(CLI::App& command, sim::ReliabilityInputs& inputs);

}  // namespace shardsim::cli
