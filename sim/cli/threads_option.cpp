#include "sim/cli/threads_option.h"

#include "sim/search/parallel_for.h"

#include <CLI/CLI.hpp>

namespace shardsim::cli {

void add_threads_option(CLI::App& command, int& threads) {
  command
      .add_option("--threads", threads,
                  "Threads to run on (default: every CPU this process may use; one per process under mpirun); "
                  "the output does not depend on it")
      ->check(CLI::Range(1, 4096));
}

int threads_to_use(int option, int processes) {
  if (option > 0) return option;
  return processes > 1 ? 1 : sim::available_cpus();
}

}  // namespace shardsim::cli
