#include "workloads/inputs/model_flops.h"

namespace shardsim::workloads {

double model_flops_per_step(const ModelSpec& model, const TrainingConfig& training) {
  const double h = static_cast<double>(model.hidden);
  const double f = static_cast<double>(model.ffn_hidden);
  const double s = static_cast<double>(training.sequence_length);
  const double matrices = model.mlp == MlpKind::swiglu ? 3 : 2;
  // Per token: the attention's weights once each, and its core against every
  // position (Q K^T at the query-key width, P V at the value width).
  double attention_weights = 0, core = 0;
  if (model.has_mla) {
    const MlaSpec& m = model.mla;
    const double H = model.heads, qk = static_cast<double>(m.qk_nope_head_dim + m.qk_rope_head_dim);
    const double v = static_cast<double>(m.v_head_dim), q_lora = static_cast<double>(m.q_lora_rank);
    const double kv_lora = static_cast<double>(m.kv_lora_rank), rope = static_cast<double>(m.qk_rope_head_dim);
    attention_weights = (q_lora > 0 ? h * q_lora + q_lora * H * qk : h * H * qk) + h * (kv_lora + rope) +
                        kv_lora * H * (qk - rope + v) + H * v * h;
    core = 2 * s * H * (qk + v);
  } else {
    const double q = static_cast<double>(model.heads * model.head_dim);
    const double kv = static_cast<double>(model.kv_heads * model.head_dim);
    attention_weights = h * (q + 2 * kv) + q * h;
    core = 4 * s * q;
  }
  const double dense_layer = 2 * (attention_weights + matrices * h * f) + core;
  double moe_layer = 0;
  int moe_layers = 0;
  if (model.has_moe) {
    const MoeSpec& moe = model.moe;
    const double active_width = moe.experts_per_token * static_cast<double>(moe.expert_ffn_hidden) +
                                moe.shared_experts * static_cast<double>(moe.shared_expert_ffn_hidden);
    moe_layer = dense_layer - 2 * matrices * h * f + 2 * h * moe.experts + 2 * matrices * h * active_width;
    moe_layers = model.layers - moe.first_dense_layers;
  }
  // Megatron-LM counts each MTP depth as a layer of the last layer's kind,
  // plus its norms and eh_proj, 2 (3h + 2h^2), and one more LM head.
  const double mtp = model.mtp_layers;
  const double mtp_layer = model.moe_layer(model.layers - 1) ? moe_layer : dense_layer;
  const double per_token = (model.layers - moe_layers) * dense_layer + moe_layers * moe_layer +
                           mtp * (mtp_layer + 2 * (3 * h + 2 * h * h)) +
                           (1 + mtp) * 2 * h * static_cast<double>(model.vocab);
  return 3 * per_token * static_cast<double>(training.global_batch_tokens());
}

}  // namespace shardsim::workloads
