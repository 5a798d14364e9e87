#include "workloads/kernels/transformer_kernels.h"

#include "topology/base/json_input.h"

#include <initializer_list>
#include <string>
#include <utility>

namespace shardsim::workloads {

namespace {

using SplitCount = std::pair<const char*, std::int64_t>;

// "what (count) must divide over the N over GPUs" for the first count that
// `ways` does not divide; empty if it divides them all.
std::string split_problem(int ways, const char* over, std::initializer_list<SplitCount> counts) {
  for (const auto& [what, count] : counts) {
    if (count % ways != 0) {
      return std::string(what) + " (" + std::to_string(count) + ") must divide over the " + std::to_string(ways) + " " +
             over + " GPUs";
    }
  }
  return "";
}

}  // namespace

void require_model_parallel_split(const ModelSpec& model, const TrainingConfig& training,
                                  const ModelParallelism& parallel) {
  const int t = parallel.tensor, u = parallel.ulysses, c = parallel.context;
  if (model.has_mla && u > 1) {
    throw InputError(model.name + ": MLA layers are compiled without DeepSpeed-Ulysses (Ulysses " + std::to_string(u) +
                     ")");
  }
  // The MLA models (DeepSeek-V2/V3) are MoE models, which Megatron-LM runs
  // with sequence parallelism under tensor parallelism; MLA without it is
  // not modelled.
  if (model.has_mla && t > 1 && !parallel.sequence_parallel) {
    throw InputError(model.name + ": MLA layers under tensor parallelism are compiled with sequence parallelism "
                     "(tensor " + std::to_string(t) + ")");
  }
  if (u > 1 && t > 1) throw InputError(model.name + ": DeepSpeed-Ulysses is compiled without tensor parallelism");
  if (c > 1 && !training.flash_attention) {
    throw InputError(model.name + ": context parallelism runs on fused (flash) attention, as Transformer Engine's does");
  }
  if (model.has_moe && t > 1 && !parallel.sequence_parallel) {
    throw InputError(model.name + ": MoE layers under tensor parallelism need sequence parallelism (Megatron-LM "
                     "asserts it)");
  }
  const auto require_split = [&](int ways, const char* over, std::initializer_list<SplitCount> counts) {
    const std::string problem = split_problem(ways, over, counts);
    if (!problem.empty()) throw InputError(model.name + ": " + problem);
  };
  const SplitCount heads{"heads", model.heads}, kv_heads{"kv_heads", model.kv_heads};
  require_split(u, "DeepSpeed-Ulysses", {heads, kv_heads});
  const std::string sequence = sequence_split_problem(training.sequence_length, parallel);
  if (!sequence.empty()) throw InputError(model.name + ": " + sequence);
  require_split(t, "tensor-parallel", {heads, kv_heads, {"ffn_hidden", model.ffn_hidden}});
  if (model.mtp_layers > 0) {
    require_split(t, "tensor-parallel", {{"hidden (the MTP projection's outputs)", model.hidden}});
  }
  if (model.has_moe) {
    require_split(t, "tensor-parallel",
                  {{"shared experts' width", model.moe.shared_experts * model.moe.shared_expert_ffn_hidden}});
  }
}

void require_kernel_implementation(const ModelSpec& model, const TrainingConfig& training,
                                   const ModelParallelism& parallel, KernelImplementation kernels) {
  if (kernels == KernelImplementation::eager && (parallel.tensor > 1 || parallel.context > 1)) {
    throw InputError(model.name + ": eager kernels are compiled without tensor or context parallelism (tensor " +
                     std::to_string(parallel.tensor) + ", context " + std::to_string(parallel.context) +
                     "); use \"kernels\": \"fused\"");
  }
  if (training.recompute == Recompute::ops && (model.has_mla || model.has_moe)) {
    throw InputError(model.name + ": recompute \"ops\" (torchtitan's policy) is modelled for dense layers without "
                     "multi-head latent attention");
  }
}

std::string sequence_split_problem(std::int64_t sequence_length, const ModelParallelism& parallel) {
  const int t = parallel.tensor, u = parallel.ulysses, c = parallel.context;
  const SplitCount sequence{"sequence_length", sequence_length};
  std::string problem = split_problem(u, "DeepSpeed-Ulysses", {sequence});
  // Megatron-LM cuts the sequence into 2c chunks, rank i keeping chunks i and
  // 2c - 1 - i, so that every rank does the same causal attention work.
  if (problem.empty() && c > 1) problem = split_problem(2 * c, "(twice the) context-parallel", {sequence});
  // Sequence parallelism splits each context-parallel rank's tokens over the
  // tensor-parallel group (Megatron-LM asserts that they divide).
  if (problem.empty() && parallel.sequence_parallel && t > 1) {
    problem = split_problem(t * c, c > 1 ? "sequence- and context-parallel" : "sequence-parallel", {sequence});
  }
  return problem;
}

Op kernel_op(const KernelSpec& spec, int stream) {
  Op op = make_op(OpKind::compute, stream);
  op.kernel = spec.kernel;
  op.dtype = spec.dtype;
  op.attention_kernel = spec.attention_kernel;
  op.flops = spec.flops;
  op.hbm_bytes = spec.hbm_bytes;
  op.gemm = spec.gemm;
  return op;
}

double optimizer_bytes_per_parameter(const OptimizerStep& step) {
  constexpr double kMainBytes = 4;    // fp32 main gradients and master weights
  constexpr double kFusedAdam = 28;   // read gradient, master, m, v; write master, m, v
  const double g = step.gradient_bytes_per_value;
  const double to_main_gradients = g < kMainBytes ? g + kMainBytes : 0;
  if (step.torch_foreach) {
    constexpr double kForeachAdamW = 80;  // the eight passes above
    constexpr double kClipGradNorm = 12;  // the norm's read, the scaling's read and write
    return to_main_gradients + kClipGradNorm + kForeachAdamW;
  }
  const double unscale = step.loss_scaling ? 2 * kMainBytes : 0;
  const double norm = kMainBytes;
  const double to_model_weights = kMainBytes + step.weight_bytes_per_value;
  return to_main_gradients + unscale + norm + kFusedAdam + to_model_weights;
}

KernelSpec optimizer_step(const OptimizerStep& step) {
  constexpr double kAdamFlopsPerParameter = 12;
  KernelSpec adam;
  adam.name = "optimizer.adam";
  adam.kernel = KernelClass::optimizer;
  adam.dtype = Dtype::fp32;
  adam.flops = kAdamFlopsPerParameter * step.shard_parameters;
  adam.hbm_bytes = optimizer_bytes_per_parameter(step) * step.shard_parameters + step.zeroed_gradient_bytes;
  return adam;
}

}  // namespace shardsim::workloads
