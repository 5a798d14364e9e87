// TrainingConfig: how a model is trained, apart from how it is sharded.
//
//   {"sequence_length": 4096, "micro_batch_size": 1,
//    "global_batch": {"tokens": 4194304},            (or {"sequences": 1024})
//    "precision": "bf16", "fp8_gemms": false,
//    "recompute": "none", "flash_attention": true,
//    "recompute_modules": ["core_attn"],               (optional; selective only)
//    "recompute_interval": 2,                          (optional; full only)
//    "attention_kernel": "flash_attention_2",         (optional)
//    "dropout": {"attention": 0.1, "hidden": 0.1}}     (optional; none if absent)
//
// precision is the dtype of parameters, gradients and activations ("bf16" or
// "fp16"; mixed precision with fp32 master weights and Adam moments).
// recompute: "none" keeps every activation the backward pass needs;
// "selective" recomputes parts of each layer, by default the attention core
// (Korthikanti et al. 2022), or those recompute_modules names with
// Megatron-Core's --recompute-modules names (RecomputeModules below);
// "full" keeps only each layer's input and recomputes the layer in backward;
// with recompute_interval k only every k-th layer (the k-th, 2k-th, ...), the
// others keeping everything: torchtitan's "selective layer" checkpointing
// (selective_ac_option k; torchtitan/parallelisms/parallelize_llama.py at
// 157a12c5, checkpoint_wrapper, which wraps the blocks whose count, from 1,
// k divides). "ops" is torchtitan's "selective op" checkpointing (the same
// file, _custom_policy): each layer is checkpointed whole, but the outputs of
// its matrix multiplies (aten.mm) are kept, save every second one in
// forward order, and those of the fused attention; everything else is
// rerun in backward (in a LLaMA layer: the norms, rotary embedding, the
// SwiGLU's element-wise ops, the residual adds, and the wk, wo and w3
// GEMMs). It needs flash_attention, the kernel whose output it keeps.
// attention_kernel names the FlashAttention generation that runs,
// "flash_attention_2" or "flash_attention_3" (Hopper only), priced at the
// efficiency the profile gives it (compute.attention_kernels); without it,
// the profile's own fused-attention figure (compute.attention_efficiency).
// The generation matters most on Hopper: FlashAttention-2 reaches 35 % of an
// H100's peak, FlashAttention-3 1.5-2 times that (Shah et al. 2024).
// dropout: the probability of dropping attention probabilities and hidden
// states (Megatron-LM's --attention-dropout and --hidden-dropout; GPT-2/3
// style training). Modern pretraining runs without it, the default. What it
// costs is memory traffic and memory: each dropout writes a one-byte mask in
// forward and reads it in backward, and outside FlashAttention (which draws
// the mask inside its kernel) attention dropout is a pass of its own over
// every score. The probability itself changes no cost; only > 0 matters.
// The gradient accumulation steps follow from the global batch, the
// micro-batch and the data-parallel size.
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/ir/program.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace shardsim::workloads {

// fp32 values: master weights, Adam's moments, the loss, upcasts in eager code.
inline constexpr double kFloat32Bytes = 4;

enum class Recompute { none, selective, full, ops };

// Sixteen times the longest contexts trained on (about 1M tokens): beyond it
// attention's time overflows the simulated clock before a real run is near.
inline constexpr std::int64_t kMaxSequenceLength = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxMicroBatchSize = std::int64_t{1} << 20;  // sequences
inline constexpr std::int64_t kMaxRecomputeInterval = 1 << 20;              // layers

// What selective recompute rebuilds in backward: Megatron-Core's
// --recompute-modules (TransformerConfig.recompute_modules), by its names.
// Two ways of rebuilding, as Megatron-Core's: "core_attn", "mlp" and
// "shared_experts" checkpoint a submodule (its input kept, everything
// inside it dropped and rerun, its model-parallel calls included);
// "layernorm", "mla_up_proj" and "moe_act" discard one output after the
// forward and rerun what made it before the backward that reads it
// (CheckpointWithoutOutput). Each drops what activation_memory.h says.
//   core_attn       the attention core (FlashAttention's forward too: it
//                   keeps nothing a checkpoint would save, and Megatron-Core
//                   reruns it all the same, warning that it is needless)
//   layernorm       the norm before attention and the one before the MLP,
//                   where they are kernels of their own: Transformer
//                   Engine fuses a dense MLP's norm and standard
//                   attention's into the GEMM after them (its
//                   LayerNormLinear, which keeps the norm output anyway),
//                   so only MLA's input norm and a MoE layer's MLP norm
//   mla_up_proj     MLA's up-projections, rotary embedding and the
//                   concatenated query and key (the up-projections'
//                   outputs: the attention core's inputs)
//   moe_act         the routed experts' activation function (its output,
//                   the second grouped GEMM's input)
//   mlp             a dense layer's MLP
//   shared_experts  a MoE layer's shared experts
// "moe" (the whole MoE layer) is not modelled.
struct RecomputeModules {
  bool core_attention = true;
  bool norms = false;
  bool mla_up_projections = false;
  bool moe_activation = false;
  bool dense_mlp = false;
  bool shared_experts = false;

  bool operator==(const RecomputeModules&) const = default;
};

// Megatron-Core's names, in the order RecomputeModules lists them.
inline constexpr const char* kRecomputeModuleNames = "core_attn, layernorm, mla_up_proj, moe_act, mlp, shared_experts";

// The modules named (an empty list: none); an unknown name, or "moe", is
// returned in `problem`.
RecomputeModules parse_recompute_modules(const std::vector<std::string>& names, std::string& problem);

// The names of the modules, space-separated, in kRecomputeModuleNames' order.
std::string recompute_module_names(const RecomputeModules& modules);

// A dropout's mask: one byte per value (torch's bool), written in forward,
// read in backward, kept in between.
constexpr double kDropoutMaskBytesPerValue = 1;

struct TrainingConfig {
  std::int64_t sequence_length = 0;
  std::int64_t micro_batch_size = 0;        // sequences per rank per micro-batch
  std::int64_t global_batch_sequences = 0;  // per optimizer step, over all ranks
  int bytes_per_value = 2;                  // bf16 / fp16
  bool fp16 = false;                        // bf16 otherwise
  bool fp8_gemms = false;
  Recompute recompute = Recompute::none;
  RecomputeModules recompute_modules;  // read under selective recompute only
  int recompute_interval = 1;          // full recompute: every k-th layer
  bool flash_attention = true;
  AttentionKernel attention_kernel = AttentionKernel::profile;  // with flash_attention
  double attention_dropout = 0;  // probability, in [0, 1)
  double hidden_dropout = 0;

  // Whether selective recompute rebuilds `part` (&RecomputeModules::norms, ...).
  bool recomputes(bool RecomputeModules::*part) const {
    return recompute == Recompute::selective && recompute_modules.*part;
  }
  // Whether full recompute rebuilds decoder layer `layer` (from 0) whole.
  bool rebuilds_layer(int layer) const {
    return recompute == Recompute::full && (layer + 1) % recompute_interval == 0;
  }
  // Whether decoder layer `layer` reruns forward work in backward before its
  // last module's backward: rebuilt whole, or under the ops policy.
  bool reruns_whole_layer(int layer) const { return rebuilds_layer(layer) || recompute == Recompute::ops; }
  bool drops_attention() const { return attention_dropout > 0; }
  bool drops_hidden() const { return hidden_dropout > 0; }

  std::int64_t tokens_per_micro_batch() const { return sequence_length * micro_batch_size; }
  std::int64_t global_batch_tokens() const { return global_batch_sequences * sequence_length; }
};

// Throws InputError naming `file` and the field; a global batch in tokens
// must be a whole number of sequences.
TrainingConfig parse_training_config(const nlohmann::json& document, const std::string& file);

// A training config file or preset (workloads/training/<name>.json).
TrainingConfig load_training_config(const std::string& file_or_preset);

// Micro-batches per rank per step: global batch / (micro-batch x data-parallel
// size). Throws InputError (naming `file` and global_batch) unless it divides.
std::int64_t gradient_accumulation_steps(const TrainingConfig& training, int data_parallel, const std::string& file);

// A model with learned position embeddings has rows for max_positions
// tokens and no more; rotary positions have no such table (LLaMA-1's
// max_positions 2048 is the length it was trained at, and runs at 4096 are
// common). Throws InputError naming `file` and sequence_length.
void check_sequence_length(const TrainingConfig& training, const ModelSpec& model, const std::string& file);

std::string to_string(Recompute recompute);

// to_string(recompute), with the modules in parentheses when selective
// recompute rebuilds others than the attention core alone:
// "selective (layernorm mla_up_proj)".
std::string recompute_label(const TrainingConfig& training);

}  // namespace shardsim::workloads
