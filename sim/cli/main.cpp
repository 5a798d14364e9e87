// shardsim: the command-line entry point. Subcommands live in commands.h.
#include "sim/cli/commands.h"
#include "topology/base/json_input.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <stdexcept>

int main(int argc, char** argv) {
  CLI::App app{"shardsim: a discrete-event simulator of LLM training communication on GPU clusters", "shardsim"};
  app.footer(
      "Examples:\n"
      "  shardsim collective --cluster dgx-a100-1024 --op all_reduce     simulated nccl-tests\n"
      "  shardsim memory --model llama-13b --plan amsp-llama13b --gpus 64 peak memory of a plan\n"
      "  shardsim calib fit probe.json --base h200 -o mine.json          a profile from measurements\n"
      "  shardsim presets                                                bundled clusters and profiles\n"
      "  shardsim bench                                                  wall time and peak memory\n"
      "Run 'shardsim <command> --help' for a command's options.");
  app.require_subcommand(1);
  int exit_code = 0;
  shardsim::cli::add_run_command(app, exit_code);
  shardsim::cli::add_search_command(app, exit_code);
  shardsim::cli::add_capacity_command(app, exit_code);
  shardsim::cli::add_scenarios_command(app, exit_code);
  shardsim::cli::add_collective_command(app, exit_code);
  shardsim::cli::add_memory_command(app, exit_code);
  shardsim::cli::add_presets_command(app, exit_code);
  shardsim::cli::add_bench_command(app, exit_code);
  shardsim::cli::add_calib_command(app, exit_code);
  shardsim::cli::add_exec_command(app, exit_code);
  shardsim::cli::add_compare_command(app, exit_code);

  // CLI11 would only say that a subcommand is required; name the stray word.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
      found |= command->get_name() == argv[1];
      known += (known.empty() ? "" : ", ") + command->get_name();
    }
    if (!found) {
      std::cerr << "shardsim: unknown command '" << argv[1] << "' (commands: " << known << ")\n";
      return 2;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const shardsim::InputError& e) {
    std::cerr << "shardsim: " << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << "shardsim: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "shardsim: internal error: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
