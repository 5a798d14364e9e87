#include "workloads/import/model_file.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/import/hf_config.h"

namespace shardsim::workloads {

ModelSpec load_model(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "workloads/models", "model");
  const nlohmann::json document = load_json_file(file);
  if (document.is_object() && document.contains("model_type")) return parse_hf_config(document, file);
  return parse_model_spec(document, file);
}

}  // namespace shardsim::workloads
