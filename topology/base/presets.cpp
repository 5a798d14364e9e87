#include "topology/base/presets.h"

#include "topology/base/json_input.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#ifndef SHARDSIM_DATA_DIR
#error "SHARDSIM_DATA_DIR must be defined by the build"
#endif

namespace shardsim {

namespace fs = std::filesystem;

std::string data_directory() {
  if (const char* env = std::getenv("SHARDSIM_DATA_DIR"); env != nullptr && *env != '\0') return env;
  return SHARDSIM_DATA_DIR;
}

std::vector<std::string> list_presets(const std::string& subdirectory, const std::string& extension) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(data_directory()) / subdirectory, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == extension) {
      names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_preset(const std::string& file_or_name, const std::string& subdirectory, const std::string& what,
                           const std::string& extension) {
  std::error_code ec;
  if (fs::is_regular_file(file_or_name, ec)) return file_or_name;
  const fs::path preset = fs::path(data_directory()) / subdirectory / (file_or_name + extension);
  // Presets may sit in subfolders ("measured/cpu-2core"); a path that names
  // no file and no preset falls through to the error.
  if (!fs::path(file_or_name).is_absolute() && fs::is_regular_file(preset, ec)) {
    return preset.string();
  }
  std::string available;
  for (const auto& name : list_presets(subdirectory, extension)) available += (available.empty() ? "" : ", ") + name;
  throw_input_error(file_or_name, "",
                    "no such " + what + " file or preset (presets: " +
                        (available.empty() ? "none found in " + data_directory() : available) + ")");
}

}  // namespace shardsim
