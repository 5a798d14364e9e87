// The subcommands of the shardsim CLI. Each registers its options on the
// app and a callback that runs it and sets `exit_code`. Errors travel as
// exceptions to main(), which turns bad input into exit code 2.
#pragma once

namespace CLI {
class App;
}

namespace shardsim::cli {

void add_collective_command(CLI::App& app, int& exit_code);
void add_memory_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_presets_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_scenarios_command(CLI::App& app, int& exit_code);
void add_calib_command(CLI::App& app, int& exit_code);
// Registered by add_calib_command under `calib` (fit_runs_command.cpp).
void add_fit_runs_command(CLI::App& calib, int& exit_code);
void add_exec_command(CLI::App& app, int& exit_code);
void add_compare_command(CLI::App& app, int& exit_code);
void add_search_command(CLI::App& app, int& exit_code);
void add_capacity_command(CLI::App& app, int& exit_code);

}  // namespace shardsim::cli
