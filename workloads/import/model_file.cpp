#include "workloads/import/model_file.h"

#include "topology/base/json_input.h"
#include "topology/base/presets.h"
#include "workloads/import/hf_config.h"

namespace shardsim::workloads {

namespace {

// A transformers config.json: its model_type, or, where that was dropped,
// the keys every transformers config carries and no shardsim model file
// has, so that the message is about model_type, not shardsim's "name".
bool is_transformers_config(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  if (document.contains("model_type")) return true;
  if (document.contains("name") || document.contains("layers")) return false;
  return document.contains("architectures") || document.contains("num_hidden_layers") ||
         document.contains("hidden_size");
}

}  // namespace

ModelSpec load_model(const std::string& file_or_preset) {
  const std::string file = resolve_preset(file_or_preset, "workloads/models", "model");
  const nlohmann::json document = load_json_file(file);
  if (is_transformers_config(document)) return parse_hf_config(document, file);
  return parse_model_spec(document, file);
}

}  // namespace shardsim::workloads
