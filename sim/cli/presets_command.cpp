#include "sim/cli/commands.h"

#include "topology/presets.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace shardsim::cli {

void add_presets_command(CLI::App& app, int& exit_code) {
  CLI::App* command = app.add_subcommand("presets", "List the bundled cluster and profile presets");
  command->footer("Example:\n  shardsim presets");
  command->callback([&exit_code] {
    std::cout << "# presets under " << data_directory() << "\n";
    std::cout << "clusters (topology/clusters):";
    for (const auto& name : list_presets("topology/clusters")) std::cout << ' ' << name;
    std::cout << "\nprofiles (calib/profiles):";
    for (const auto& name : list_presets("calib/profiles")) std::cout << ' ' << name;
    std::cout << '\n';
    exit_code = 0;
  });
}

}  // namespace shardsim::cli
