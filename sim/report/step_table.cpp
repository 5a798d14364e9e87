#include "sim/report/step_table.h"

#include <cstdio>
#include <string>
#include <vector>

namespace shardsim::cli {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void print_memory(const workloads::MemoryBytes& bytes) {
  for (int c = 0; c < workloads::kMemoryCategoryCount; ++c) {
    const double value = bytes[static_cast<std::size_t>(c)];
    if (value != 0) {
      std::printf("  %-28s %10.2f GiB\n", std::string(workloads::to_string(static_cast<workloads::MemoryCategory>(c))).c_str(),
                  value / kGiB);
    }
  }
}

// Uneven pipelines: each stage's layers, summed over its chunks (chunk c of
// stage s is virtual stage c p + s).
void print_stage_layers_line(const nlohmann::json& d) {
  const auto split = d.at("virtual_stage_layers").get<std::vector<int>>();
  const int p = d.at("pipeline_parallel").get<int>();
  std::vector<int> per_stage(static_cast<std::size_t>(p), 0);
  for (std::size_t vs = 0; vs < split.size(); ++vs) per_stage[vs % static_cast<std::size_t>(p)] += split[vs];
  std::string line;
  for (int layers : per_stage) line.append(" ").append(std::to_string(layers));
  const std::string layout =
      d.contains("pipeline_layout") ? ", layout " + d.at("pipeline_layout").get<std::string>() : "";
  std::printf("# uneven pipeline: layers per stage%s (virtual stage 0: %d, last: %d)%s\n", line.c_str(), split.front(),
              split.back(), layout.c_str());
}

}  // namespace

void print_ulysses_line(int ulysses) {
  std::printf("# DeepSpeed-Ulysses: each micro-batch's sequence split over %d consecutive GPUs, all-to-alls around "
              "attention\n",
              ulysses);
}

void print_experts_line(const nlohmann::json& experts) {
  const nlohmann::json& f = experts.at("factors");
  const std::string dispatcher = experts.value("dispatcher", "all_to_all");
  std::printf("# experts: %s over %d GPUs, each expert on %d; f_P %d, f_G %d, f_OS %d over those; capacity factor %g%s\n",
              experts.at("layout").get<std::string>().c_str(), experts.at("parallel").get<int>(),
              experts.at("data_parallel").get<int>(), f.at("parameters").get<int>(), f.at("gradients").get<int>(),
              f.at("optimizer").get<int>(), experts.at("capacity_factor").get<double>(),
              dispatcher == "all_gather" ? "; tokens all-gathered" : "");
}

void print_step_table(const std::string& title, const workloads::Program& program, const workloads::Timeline& timeline, const sim::StepSummary& summary,
                 const std::string& cluster) {
  const nlohmann::json& d = program.description;
  const nlohmann::json& o = d.at("overlap");
  const auto on = [](const nlohmann::json& flag) { return flag.get<bool>() ? "on" : "off"; };
  const int mtp = d.value("mtp_layers", 0);
  const std::string depths = mtp == 0 ? "" : mtp == 1 ? ", 1 MTP layer" : ", " + std::to_string(mtp) + " MTP layers";
  std::printf("# %s: %s (%.3f B parameters%s) on %s, %d GPUs, %d data-parallel\n", title.c_str(),
              d.at("model").get<std::string>().c_str(), d.at("parameters").get<double>() / 1e9, depths.c_str(),
              cluster.c_str(), program.ranks, d.at("data_parallel").get<int>());
  if (d.contains("tensor_parallel")) {
    std::printf("# plan %s (megatron): tensor %d%s%s%s, pipeline %d x %d virtual stages, %s%s%s; overlap: gradient reduce "
                "%s, parameter gather %s\n",
                d.at("plan").get<std::string>().c_str(), d.at("tensor_parallel").get<int>(),
                d.at("sequence_parallel").get<bool>() ? " + sequence parallel" : "",
                d.at("tp_comm_overlap").get<bool>() ? " + TP comm overlap" : "",
                d.contains("context_parallel")
                    ? (", context " + std::to_string(d.at("context_parallel").get<int>())).c_str()
                    : "",
                d.at("pipeline_parallel").get<int>(),
                d.at("virtual_stages").get<int>(),
                d.at("distributed_optimizer").get<bool>() ? "distributed optimizer" : "replicated optimizer",
                d.contains("gradient_accumulation_fusion") ? ", gradients added into main_grad per micro-batch" : "",
                d.contains("scatter_gather_pipeline_tensors") ? ", pipeline tensors scattered and gathered" : "",
                on(o.at("gradient_reduce")), on(o.at("parameter_gather")));
  } else {
    if (d.contains("scheduling_unit")) {
      std::printf("# TP-free pipeline %d x %d virtual stages, scheduling units of %d micro-batches\n",
                  d.at("pipeline_parallel").get<int>(), d.at("virtual_stages").get<int>(),
                  d.at("scheduling_unit").get<int>());
    }
    std::printf("# plan %s (%s, %s): f_P %d, f_G %d, f_OS %d; overlap: gather/scatter %s, optimizer all-reduce %s, "
              "parameter broadcast %s\n",
              d.at("plan").get<std::string>().c_str(), d.at("system").get<std::string>().c_str(),
              d.at("behaviour").get<std::string>().c_str(), d.at("factors").at("parameters").get<int>(),
              d.at("factors").at("gradients").get<int>(), d.at("factors").at("optimizer").get<int>(),
              on(o.at("gather_scatter")), on(o.at("optimizer_all_reduce")), on(o.at("parameter_broadcast")));
  }
  if (d.contains("virtual_stage_layers")) print_stage_layers_line(d);
  if (d.contains("rank_order")) {
    std::printf("# rank order %s (fastest first): pipelines on consecutive ranks, data parallelism outermost\n",
                d.at("rank_order").get<std::string>().c_str());
  }
  if (d.contains("microbatch_group_size")) {
    std::printf("# interleaved schedule: micro-batches through the chunks in groups of %d (the last takes the rest)\n",
                d.at("microbatch_group_size").get<int>());
  }
  if (d.contains("experts")) print_experts_line(d.at("experts"));
  if (d.value("shared_expert_overlap", false)) {
    std::printf("# shared experts beside the token dispatch, on a compute stream of their own\n");
  }
  if (d.value("overlap_expert_parallel_comm", false)) {
    std::printf("# combined 1F1B: each forward merged with a backward of another micro-batch, layer by layer, their "
                "all-to-alls beside each other's compute%s\n",
                d.value("delay_wgrad_compute", false) ? "; weight gradients delayed" : "");
  }
  if (d.contains("ulysses")) print_ulysses_line(d.at("ulysses").get<int>());
  // Said where a plan leaves Megatron-style fused kernels and bf16/fp16 reduction.
  const bool eager = d.value("kernels", "fused") == "eager", reduce_dtype = d.contains("reduce_dtype");
  if (eager || reduce_dtype) {
    std::string line = eager ? "PyTorch eager kernels, a kernel per op as torchtitan's Llama" : "";
    if (reduce_dtype) {
      line += std::string(eager ? "; " : "") + "gradients reduced in " +
              (d.at("reduce_dtype") == "fp32" ? "fp32" : "the training dtype");
    }
    std::printf("# %s\n", line.c_str());
  }
  if (d.contains("hierarchical_parameter_gather")) {
    std::printf("# MiCS hierarchical parameter gather: a group spanning nodes gathers across nodes, then inside each\n");
  }
  if (d.contains("quantized")) {
    const nlohmann::json& q = d.at("quantized");
    std::printf("# ZeRO++ quantized communication: parameter gathers in int8 (qwZ) %s, gradients as int4 all-to-alls "
                "across nodes (qgZ) %s\n",
                on(q.at("weights")), on(q.at("gradients")));
  }
  // The kernel is named only where the training config chose one over the profile's own.
  const std::string kernel = d.at("attention_kernel").get<std::string>();
  const std::string flash =
      !d.at("flash_attention").get<bool>() ? "off" : kernel == "profile" ? "on" : "on (" + kernel + ")";
  std::printf("# training: sequence %lld, micro-batch %lld, %lld micro-batches per step, %lld tokens per step; "
              "recompute %s, flash attention %s\n",
              d.at("sequence_length").get<long long>(), d.at("micro_batch_size").get<long long>(),
              d.at("gradient_accumulation_steps").get<long long>(), d.at("tokens_per_step").get<long long>(),
              d.at("recompute").get<std::string>().c_str(), flash.c_str());
  if (timeline.out_of_memory) {
    const workloads::OutOfMemory& oom = *timeline.out_of_memory;
    double total = 0;
    for (double bytes : oom.by_category) total += bytes;
    std::printf("OUT OF MEMORY on rank %d at %.3f ms, op %s: %.2f GiB needed, the GPU holds %.2f GiB\n", oom.rank,
                seconds_from_picoseconds(oom.when) * 1e3, oom.op.c_str(), total / kGiB, oom.capacity_bytes / kGiB);
    print_memory(oom.by_category);
    return;
  }
  std::printf("%-30s %12.4f s\n", "step time", summary.step_seconds);
  std::printf("%-30s %12.2f %%\n", "MFU", 100 * summary.mfu);
  std::printf("%-30s %12.1f\n", "tokens per GPU per second", summary.tokens_per_gpu_per_second);
  std::printf("%-30s %12.2f GiB of %.2f GiB (rank %d)\n", "peak memory", summary.peak_memory.total_bytes / kGiB,
              summary.gpu_memory_bytes / kGiB, summary.peak_memory_rank);
  print_memory(summary.peak_memory.by_category);
  if (summary.reserved_memory_bytes > 0) {
    std::printf("%-30s %12.2f GiB (PyTorch's caching allocator%s)%s\n", "reserved memory",
                summary.reserved_memory_bytes / kGiB,
                program.description.value("expandable_segments", false) ? ", expandable segments" : "",
                summary.allocator_out_of_memory ? ": OUT OF MEMORY, no room for a new segment" : "");
  }
  const sim::TimeBreakdown& b = summary.breakdown;
  const auto share = [&](double seconds) { return summary.step_seconds > 0 ? 100 * seconds / summary.step_seconds : 0.0; };
  std::printf("time breakdown of rank %d\n", b.rank);
  std::printf("  %-28s %10.4f s %6.1f %%\n", "compute", b.compute_seconds, share(b.compute_seconds));
  for (workloads::CollectiveOp op : workloads::all_collective_ops()) {
    const double seconds = b.exposed_seconds[static_cast<std::size_t>(op)];
    if (seconds > 0) {
      std::printf("  %-28s %10.4f s %6.1f %%\n", ("exposed " + std::string(workloads::to_string(op))).c_str(), seconds,
                  share(seconds));
    }
  }
  if (b.waiting_seconds > 0) {
    std::printf("  %-28s %10.4f s %6.1f %%\n", "waiting for other ranks", b.waiting_seconds, share(b.waiting_seconds));
  }
  std::printf("  %-28s %10.4f s %6.1f %%\n", "idle", b.idle_seconds, share(b.idle_seconds));
  std::printf("  %-28s %10.4f s (%.0f %% of it hidden behind compute)\n", "communication in flight",
              b.communication_seconds, 100 * b.hidden_fraction());
  std::printf("%-30s %12.2f GB (leaf-to-spine links, all ranks)\n", "bytes across the spine", timeline.spine_bytes / 1e9);
}

}  // namespace shardsim::cli
