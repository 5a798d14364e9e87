// --threads: how many threads a command that evaluates independent work
// (search, capacity, scenarios) runs it on. The output never depends on it.
#pragma once

namespace CLI {
class App;
}

namespace shardsim::cli {

// Adds --threads into `threads`; left at 0, threads_to_use() picks.
void add_threads_option(CLI::App& command, int& threads);

// `option` when set; else every CPU this process may run on, or one per
// process under an mpirun of several (which already has the CPUs it was
// given).
int threads_to_use(int option, int processes);

}  // namespace shardsim::cli
