// Why an executor run stops early, shared by the backends: the launcher's
// signals (mpirun ends the survivors with SIGTERM when a rank dies; the run
// loop notices and says what it was waiting for), and the wording of stall
// and stop messages.
#pragma once

#include "workloads/ir/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::calib {

// Records SIGTERM and SIGINT for its lifetime instead of dying at once.
class StopSignalHandlers {
 public:
  StopSignalHandlers();
  ~StopSignalHandlers();
  StopSignalHandlers(const StopSignalHandlers&) = delete;
  StopSignalHandlers& operator=(const StopSignalHandlers&) = delete;
};

// The signal received since the handlers were installed, 0 if none.
int stop_signal();

// "'mb0.all_gather.layer0' (op 12, collective all_gather of 4096 bytes on
// communicator parameters, ranks 0-3)": an op of `rank`'s program, for
// messages.
std::string describe_op(const workloads::Program& program, int rank, std::uint32_t op);
// "rank 3: stopped by signal 15 (...)".
std::string stop_message(int rank);
// "ranks 0-3", "ranks 0,2,4", "rank 5".
std::string describe_ranks(const std::vector<int>& ranks);
// "30 s".
std::string seconds_text(double seconds);

}  // namespace shardsim::calib
