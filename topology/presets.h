// Bundled presets: JSON files shipped in the source tree (topology/clusters,
// calib/profiles, later workloads/models and workloads/plans) that a user can
// name instead of giving a path.
#pragma once

#include <string>
#include <vector>

namespace shardsim {

// $SHARDSIM_DATA_DIR when set, else the source tree this binary was built from.
std::string data_directory();

// `file_or_name` itself when it is an existing file; otherwise
// <data>/<subdirectory>/<name>.json. Throws InputError naming the available
// presets when neither exists. `what` is the kind of thing ("cluster").
std::string resolve_preset(const std::string& file_or_name, const std::string& subdirectory,
                           const std::string& what);

// Preset names (file stems) in <data>/<subdirectory>, sorted.
std::vector<std::string> list_presets(const std::string& subdirectory);

}  // namespace shardsim
