// JobScale: `--scale`, a smaller model and batch with the plan left alone,
// so that a plan made for a 1024-GPU job can be exercised on the hardware at
// hand (DESIGN.md, "One IR, two backends": the simulator predicts the same
// scaled Program the executor runs).
//
//   --scale layers=2,hidden=512,seq=256,micro_batches=2
//
// Keys (each optional): layers; hidden (head_dim is kept, so heads =
// hidden / head_dim, and kv_heads shrink with heads in the same ratio; when
// hidden is below head_dim, one head of head_dim = hidden); ffn (default: the
// model's ffn_hidden times hidden'/hidden); vocab; seq (the sequence length);
// micro_batches (gradient accumulation steps: the global batch becomes
// micro_batches x micro-batch x data-parallel size; default: unchanged).
// A model with multi-head latent attention keeps its heads' widths (query-
// key and value head sizes, rotary part): its heads shrink with hidden
// (round(heads x hidden' / hidden), at least one) and so do its latents'
// ranks. A MoE model keeps its experts and routing; their widths shrink as
// the MLP width does, and the leading dense layers are cut so that at least
// one MoE layer remains.
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/training.h"

#include <cstdint>
#include <optional>
#include <string>

namespace shardsim::workloads {

struct JobScale {
  std::optional<int> layers;
  std::optional<std::int64_t> hidden, ffn_hidden, vocab, sequence_length, micro_batches;

  bool empty() const;
  std::string describe() const;  // "layers 2, hidden 512, ..." for names and reports
};

// Throws std::invalid_argument naming `option` and the key at fault.
JobScale parse_job_scale(const std::string& text, const std::string& option = "--scale");

// The model and training config shrunk as `scale` says (validated: InputError
// naming the scaled model when the result is not a valid model).
void apply_job_scale(const JobScale& scale, int data_parallel, ModelSpec& model, TrainingConfig& training);

}  // namespace shardsim::workloads
