// Hugging Face transformers config.json -> ModelSpec.
//
// Reads the fields that fix a model's shapes: hidden_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (missing: = heads), head_dim
// (missing: hidden / heads), intermediate_size, vocab_size,
// max_position_embeddings, tie_word_embeddings (missing: the family's
// default in transformers), the MoE fields (num_local_experts | num_experts |
// n_routed_experts, num_experts_per_tok, moe_intermediate_size,
// n_shared_experts, shared_expert_intermediate_size, first_k_dense_replace)
// and DeepSeek's MLA fields. GPT-2 configs use n_embd, n_layer, n_head,
// n_positions, n_inner. Every other key (dropout, rope scaling, token ids...)
// leaves the shapes alone and is ignored. The family (model_type) decides the
// MLP, norm, position and bias layout; an unknown family is refused rather
// than guessed.
#pragma once

#include "workloads/inputs/model.h"

#include <nlohmann/json.hpp>

#include <string>

namespace shardsim::workloads {

ModelSpec parse_hf_config(const nlohmann::json& document, const std::string& file);

}  // namespace shardsim::workloads
