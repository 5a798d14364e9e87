#include "sim/cli/commands.h"

#include "topology/base/presets.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <utility>
#include <vector>

namespace shardsim::cli {

void add_presets_command(CLI::App& app, int& exit_code) {
  CLI::App* command = app.add_subcommand("presets", "List the bundled clusters, profiles, models, plans and training configs");
  command->footer("Example:\n  shardsim presets");
  command->callback([&exit_code] {
    std::cout << "# presets under " << data_directory() << "\n";
    std::cout << "clusters (topology/clusters):";
    for (const auto& name : list_presets("topology/clusters")) std::cout << ' ' << name;
    for (const auto& [title, folder] : std::vector<std::pair<std::string, std::string>>{
             {"profiles", "calib/profiles"},
             {"models", "workloads/models"},
             {"plans", "workloads/plans"},
             {"training configs", "workloads/training"}}) {
      std::cout << "\n" << title << " (" << folder << "):";
      for (const auto& name : list_presets(folder)) std::cout << ' ' << name;
    }
    std::cout << "\nMegatron-LM launches (workloads/megatron, for --megatron):";
    for (const auto& name : list_presets("workloads/megatron", ".sh")) std::cout << ' ' << name;
    std::cout << '\n';
    exit_code = 0;
  });
}

}  // namespace shardsim::cli
