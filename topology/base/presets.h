// Bundled presets: files shipped in the source tree (topology/clusters,
// calib/profiles, workloads/models, workloads/plans, workloads/training as
// JSON; workloads/megatron as Megatron-LM launch scripts) that a user can
// name instead of giving a path.
#pragma once

#include <string>
#include <vector>

namespace shardsim {

// $SHARDSIM_DATA_DIR when set, else the source tree this binary was built from.
std::string data_directory();

// `file_or_name` itself when it is an existing file; otherwise
// <data>/<subdirectory>/<name><extension>. Throws InputError naming the
// available presets when neither exists. `what` is the kind of thing
// ("cluster").
std::string resolve_preset(const std::string& file_or_name, const std::string& subdirectory, const std::string& what,
                           const std::string& extension = ".json");

// Preset names (file stems of the files with `extension`) in
// <data>/<subdirectory>, sorted.
std::vector<std::string> list_presets(const std::string& subdirectory, const std::string& extension = ".json");

}  // namespace shardsim
