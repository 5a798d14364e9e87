// Megatron-LM arguments -> Plan and TrainingConfig: the launch a Megatron
// user already has, read as Megatron's argparse would read it.
//
// The file is the flags of a pretrain_gpt.py launch, as a user keeps them: a
// shell script (backslash continuations, # comments, VAR="..." strings and
// bash arrays are read through), or a plain list of flags. Every token
// "--name value" or "--name=value" is a flag, its field the name with "-"
// turned into "_" (FORMATS.md); a flag given twice keeps the last value, as
// argparse does. Flags shardsim does not read (learning rate, data paths,
// logging, torchrun's own) are skipped; a value of a flag it reads must be a
// literal ("$TP" is refused: expand the script's variables first).
//
// What the flags become (Megatron-LM's arguments.py and Megatron-Core's
// DistributedDataParallelConfig):
//   plan: system "megatron", model_parallel {tensor_model_parallel_size,
//     pipeline_model_parallel_size, virtual stages from
//     virtual_pipeline_model_parallel_size, num_layers_per_virtual_pipeline_stage
//     or num_virtual_stages_per_pipeline_rank, sequence_parallel (off when
//     TP = 1, as Megatron turns it off), scatter_gather_pipeline_tensors from
//     --scatter-gather-tensors-in-pipeline (shardsim's switch for the
//     2021-2022 Megatron-LM, whose default it was; launches are otherwise read
//     as Megatron-Core's, which has no such thing)}; factors (1, 1, all) with
//     use_distributed_optimizer, else (1, 1, 1); overlap.optimizer_all_reduce =
//     overlap_grad_reduce, overlap.parameter_broadcast = overlap_param_gather
//     (which needs both before, as Megatron asserts); buckets of
//     ddp_bucket_size parameters, default max(40M, 1M x DP), or one bucket of
//     the whole model without overlap_grad_reduce (Megatron-Core drops
//     bucketing then).
//   training: seq_length, micro_batch_size, global_batch_size, --bf16 /
//     --fp16, fp8_format (fp8 GEMMs), recompute_activations or
//     recompute_granularity selective | full (with recompute_method uniform,
//     or block over every layer of a virtual stage), use_flash_attn /
//     attention_backend. A field the flags do not give keeps the training
//     config's value.
//   experts (MoE models): parallel = expert_model_parallel_size over a
//     stage's GPUs, each expert whole, layout "E+D" (Megatron-Core's order
//     tp-cp-ep-dp-pp), dispatcher from moe_token_dispatcher_type (allgather,
//     Megatron's default, or alltoall), capacity_factor from
//     moe_expert_capacity_factor where balanced routing would feel it (below
//     1, or with moe_pad_expert_input_to_capacity).
//   mtp_layers: mtp_num_layers, the multi-token-prediction depths Megatron
//     builds on the last virtual stage (none without it, whatever the model
//     file says: Megatron trains MTP only when asked).
//   DP = GPUs / (TP x PP x CP).
// Refused with InputError naming the file and the flag: expert tensor
// parallelism above 1, the flex and alltoall_seq dispatchers, a layer-by-layer
// pipeline layout, Megatron's own FSDP, partial block recompute (none of
// them modelled), and a launch whose model flags contradict the model
// simulated. The model is checked against num_layers, hidden_size,
// num_attention_heads, ffn_hidden_size, num_query_groups, kv_channels (not
// for MLA models, whose heads it does not shape), num_experts,
// moe_router_topk, moe_ffn_hidden_size and, for MLA models, q_lora_rank,
// kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim and v_head_dim where given
// (multi_latent_attention refused for other models); when the file names
// the three Megatron requires
// (num_layers, hidden_size, num_attention_heads) it describes the whole
// model, and Megatron's defaults for what it leaves out are checked too
// (tied embeddings unless untie_embeddings_and_output_weights, learned
// positions unless position_embedding_type rope, LayerNorm, linear biases,
// GeLU unless swiglu, ffn_hidden_size 4h or for SwiGLU
// int(8h/3 / 64) x 64, kv_channels h / heads, standard attention unless
// multi_latent_attention).
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/inputs/training.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardsim::workloads {

// One flag as written: its value (none for a switch) and its line.
struct MegatronFlag {
  std::optional<std::string> value;
  int line = 0;
};

// Field name ("tensor_model_parallel_size") -> the flag, the last one given.
using MegatronFlags = std::map<std::string, MegatronFlag>;

MegatronFlags read_megatron_flags(const std::string& text);

struct MegatronJob {
  Plan plan;
  TrainingConfig training;
  int data_parallel = 1;
  // The MTP depths Megatron builds (--mtp-num-layers, none without it), which
  // the simulated model's mtp_layers takes.
  int mtp_layers = 0;
  std::string file;  // the file read, named in later errors about the plan or batch
  // Where the simulation departs from what the flags ask of Megatron-LM
  // (a flag with no effect, an overlap not modelled), for the user to see.
  std::vector<std::string> notes;
};

// The job on `gpus` GPUs, nodes of `gpus_per_node`; `training` gives what
// the flags leave out. Throws InputError naming `file` and the flag.
MegatronJob parse_megatron_args(const std::string& text, const std::string& file, const ModelSpec& model,
                                const TrainingConfig& training, int gpus, int gpus_per_node);
// A file, or a bundled launch (workloads/megatron/<name>.sh).
MegatronJob load_megatron_args(const std::string& file_or_preset, const ModelSpec& model,
                               const TrainingConfig& training, int gpus, int gpus_per_node);

}  // namespace shardsim::workloads
