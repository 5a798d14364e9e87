#include "workloads/kernels/attention_kernels.h"

namespace shardsim::workloads {

namespace {

// FlashAttention's backward runs five GEMM-sized products to the forward's two.
constexpr double kFlashBackwardOverForward = 2.5;

}  // namespace

double flash_attention_flops(double batch, double heads, double sequence, double head_dim, bool causal, bool backward) {
  const double every_score = 4 * batch * sequence * sequence * (heads * head_dim);
  const double forward = causal ? every_score / 2 : every_score;
  return backward ? kFlashBackwardOverForward * forward : forward;
}

void attention_core(const LayerShapes& x, const TrainingConfig& training, std::vector<KernelSpec>& forward,
                    std::vector<KernelSpec>& backward) {
  // Q K^T at the query-key head size, P V at the value head size; every score.
  const double scores_flops = 2 * x.batch * x.sequence * x.sequence * x.query;
  const double context_flops = 2 * x.batch * x.sequence * x.sequence * x.context;
  // Two products at their mean head size cost what the pair does.
  const double head_dim = (x.query + x.context) / (2 * x.heads);
  if (training.flash_attention) {
    KernelSpec spec;
    spec.name = "attention";
    spec.kernel = KernelClass::attention;
    spec.attention_kernel = training.attention_kernel;
    spec.dtype = x.dtype;
    spec.flops = flash_attention_flops(x.batch, x.heads, x.sequence, head_dim, true, false);
    // q, k, v in, o out, plus fp32 row log-sum-exps.
    spec.hbm_bytes = x.e * x.tokens * (x.query + x.kv + x.value + x.context) + 4 * x.heads * x.tokens;
    spec.gemm = {static_cast<std::int64_t>(x.sequence), static_cast<std::int64_t>(x.sequence),
                 static_cast<std::int64_t>(head_dim)};
    forward.push_back(spec);
    KernelSpec back = spec;
    back.name = "attention.backward";
    back.flops = flash_attention_flops(x.batch, x.heads, x.sequence, head_dim, true, true);
    // Reads q, k, v, o, do and the log-sum-exps; writes dq, dk, dv.
    back.hbm_bytes = x.e * x.tokens * 2 * (x.query + x.kv + x.value + x.context) + 4 * x.heads * x.tokens;
    backward.push_back(back);
    return;
  }
  const double scores = x.batch * x.heads * x.sequence * x.sequence;
  const auto batched = [&](const std::string& name, double flops, double bytes, double head_dim) {
    KernelSpec spec;
    spec.name = name;
    spec.kernel = KernelClass::gemm;
    spec.dtype = x.dtype;
    spec.flops = flops;
    spec.hbm_bytes = bytes;
    spec.gemm = {static_cast<std::int64_t>(x.sequence), static_cast<std::int64_t>(x.sequence),
                 static_cast<std::int64_t>(head_dim)};
    return spec;
  };
  const double qk_head = x.query / x.heads, v_head = x.context / x.heads;
  forward.push_back(batched("attention.scores", scores_flops, x.e * (scores + x.tokens * (x.query + x.kv)), qk_head));
  forward.push_back(elementwise("attention.softmax", x, 2 * scores));
  const bool dropout = training.drops_attention();
  if (dropout) forward.push_back(masked_dropout("attention.dropout", x, scores));
  forward.push_back(
      batched("attention.context", context_flops, x.e * (scores + x.tokens * (x.value + x.context)), v_head));
  // Reads dO, V and P; writes dP and dV.
  backward.push_back(batched("attention.context.backward", 2 * context_flops,
                             x.e * (2 * scores + x.tokens * (2 * x.context + 2 * x.value)), v_head));
  if (dropout) backward.push_back(masked_dropout("attention.dropout.backward", x, scores));
  backward.push_back(elementwise("attention.softmax.backward", x, 3 * scores));
  backward.push_back(batched("attention.scores.backward", 2 * scores_flops,
                             x.e * (2 * scores + x.tokens * (2 * x.query + 2 * x.kv)), qk_head));
}

namespace {

std::vector<KernelSpec> ring_blocks(int c, double bytes_per_step, const std::vector<KernelSpec>& whole,
                                    const std::string& call_name) {
  std::vector<KernelSpec> list;
  for (int block = 0; block < c; ++block) {
    const bool next_exchange = block + 1 < c;
    if (next_exchange) {
      list.push_back(group_call(call_name + ".step" + std::to_string(block + 1), CallGroup::context_parallel,
                                CollectiveOp::send_recv, bytes_per_step));
    }
    for (std::size_t k = 0; k < whole.size(); ++k) {
      KernelSpec spec = whole[k];
      spec.name += ".block" + std::to_string(block);
      spec.flops /= static_cast<double>(c) * c;
      // The block's keys and values came with the exchange listed before the
      // one just issued (or, for the last block, the latest one).
      if (block > 0 && k == 0) spec.waits_for_call = next_exchange ? 2 : 1;
      list.push_back(std::move(spec));
    }
  }
  return list;
}

}  // namespace

void context_parallel_ring(int c, double kv_bytes, std::vector<KernelSpec>& forward, std::vector<KernelSpec>& backward) {
  forward = ring_blocks(c, kv_bytes, forward, "attention.context_parallel");
  backward = ring_blocks(c, 2 * kv_bytes, backward, "attention.context_parallel.backward");
}

}  // namespace shardsim::workloads
