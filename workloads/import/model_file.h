// A model from whatever file describes it: a shardsim model file, a Hugging
// Face config.json (told apart by its "model_type", or, without one, by
// transformers' own keys and no shardsim "name" or "layers"), or a bundled
// preset.
#pragma once

#include "workloads/inputs/model.h"

#include <string>

namespace shardsim::workloads {

// A path to a shardsim model file or an HF config.json, or a bundled preset
// name (workloads/models/<name>.json).
ModelSpec load_model(const std::string& file_or_preset);

}  // namespace shardsim::workloads
