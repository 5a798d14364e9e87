// What the pipeline compilers' tests (Megatron-LM and ZeroPP) and the MoE
// tests share: a small model and its MoE variant, the bytes a Program's
// pipeline sends move, experts whose states stay put, and a simulated step
// that is consistent in both network modes.
#pragma once

#include "fixtures.h"
#include "sim/step/step_simulator.h"
#include "workloads/compile/step_compiler.h"
#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"
#include "workloads/ir/program.h"
#include "workloads/ir/timeline_check.h"
#include "workloads/kernels/transformer_kernels.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardsim::test {

// A model small enough to simulate on 16 GPUs in a blink, whose heads (8),
// MLP width and vocabulary (1024, no padding) divide over every tensor-
// parallel size the tests use.
inline workloads::ModelSpec small_pipeline_model(int layers) {
  workloads::ModelSpec model;
  model.name = "small";
  model.layers = layers;
  model.hidden = 512;
  model.heads = 8;
  model.kv_heads = 8;
  model.head_dim = 64;
  model.ffn_hidden = 1408;
  model.vocab = 1024;
  model.max_positions = 1024;
  return model;
}

// That model with a MoE block in every layer: eight SwiGLU experts of width
// 704, two per token, and no shared experts.
inline workloads::ModelSpec small_moe_model(int layers) {
  workloads::ModelSpec model = small_pipeline_model(layers);
  model.name = "small-moe";
  model.has_moe = true;
  model.moe.experts = 8;
  model.moe.experts_per_token = 2;
  model.moe.expert_ffn_hidden = 704;
  return model;
}

// `plan` on `data` data-parallel replicas of `layers` layers of that model,
// each replica taking `micro_batches` sequences of 512 tokens per step, on
// nodes of 8 GPUs; the caller sets the plan's model_parallel block.
inline workloads::StepConfig pipeline_step(const std::string& plan, int layers, int data, int micro_batches) {
  workloads::StepConfig config;
  config.model = small_pipeline_model(layers);
  config.training.sequence_length = 512;
  config.training.micro_batch_size = 1;
  config.training.global_batch_sequences = static_cast<std::int64_t>(data) * micro_batches;
  config.plan = workloads::load_plan(plan);
  config.data_parallel = data;
  config.gpus_per_node = 8;
  config.plan_file = "plan.json";
  config.training_file = "training.json";
  return config;
}

// The module of that name (transformer_modules' "layer1.attention", ...).
inline const workloads::ModuleWork& named(const std::vector<workloads::ModuleWork>& modules, const std::string& name) {
  const auto it = std::find_if(modules.begin(), modules.end(),
                               [&](const workloads::ModuleWork& m) { return m.name == name; });
  INFO(name);
  REQUIRE(it != modules.end());
  return *it;
}

// The largest working set a module of `chunks` holds while it runs (the
// loss's copies of the logits, on the stage with the head): what a stage's
// peak holds beside its activations.
inline double largest_working_bytes(const std::vector<workloads::ModuleWork>& modules,
                                    const std::vector<std::vector<std::size_t>>& chunks) {
  double working = 0;
  for (const auto& chunk : chunks) {
    for (std::size_t m : chunk) {
      working = std::max({working, modules[m].forward_working_bytes(), modules[m].backward_working_bytes()});
    }
  }
  return working;
}

// The cluster both compilers' tests simulate on.
inline const World& pipeline_world() {
  static const World w("dgx-a100-2node");
  return w;
}

// Bytes of every one-way send, summed over the ranks that send them and
// over the ranks that receive them.
inline std::pair<double, double> send_bytes(const workloads::Program& program) {
  double sent = 0, received = 0;
  for (int rank = 0; rank < program.ranks; ++rank) {
    for (const workloads::Op& op : program.program_of(rank).ops) {
      if (op.kind != workloads::OpKind::collective || op.collective != workloads::CollectiveOp::send) continue;
      const auto& group = program.communicators[static_cast<std::size_t>(op.communicator)].group_of(rank);
      (group[static_cast<std::size_t>(op.root)] == rank ? sent : received) += op.bytes;
    }
  }
  return {sent, received};
}

// Every activation and gradient crosses each of the p v - 1 chunk
// boundaries once per micro-batch, `bytes_per_send` from each of the
// tensor x data-parallel ranks of a stage; as much is received as sent.
inline void require_boundary_sends(const workloads::Program& program, const workloads::StepConfig& config,
                                   double bytes_per_send) {
  const workloads::ModelParallelism& mp = config.plan.model_parallel;
  const auto [sent, received] = send_bytes(program);
  const double boundaries = mp.pipeline * mp.virtual_stages - 1;
  const double micro_batches = static_cast<double>(config.training.global_batch_sequences) / config.data_parallel;
  REQUIRE(sent == Approx(2 * boundaries * micro_batches * bytes_per_send * mp.tensor * config.data_parallel));
  REQUIRE(received == Approx(sent));
}

// Experts that each live on one GPU: rank 0 runs no call on their states
// (gathers, reductions), only their tokens' all-to-alls.
inline void require_expert_states_stay_put(const workloads::Program& program) {
  for (const workloads::Op& op : program.program_of(0).ops) {
    INFO(op.name);
    REQUIRE_FALSE((op.kind == workloads::OpKind::collective && op.name.find("experts") != std::string::npos &&
                   op.collective != workloads::CollectiveOp::all_to_all));
  }
}

inline workloads::Timeline simulate_on(const workloads::Program& program, const World& world, sim::NetworkMode network) {
  sim::StepSimulationOptions options;
  options.network = network;
  return sim::simulate(program, world.cluster(), world.router(), world.profile(), options);
}

// Simulates the step with flow and analytical networks: it fits in memory
// and its timeline runs every op once, after its dependencies, with the
// members of each collective together.
inline void require_consistent_step(const workloads::Program& program, const World& world) {
  for (sim::NetworkMode network : {sim::NetworkMode::flow, sim::NetworkMode::analytical}) {
    const workloads::Timeline timeline = simulate_on(program, world, network);
    REQUIRE_FALSE(timeline.out_of_memory);
    const std::vector<std::string> violations = workloads::timeline_violations(program, timeline);
    INFO((violations.empty() ? "" : violations.front()));
    REQUIRE(violations.empty());
  }
}

// `config`'s MoE layers under Megatron-Core's combined 1F1B (experts over 8
// GPUs, --overlap-moe-expert-parallel-comm --delay-wgrad-compute): the step
// compiles, is valid, and is consistent on both networks.
inline void require_consistent_combined_1f1b(workloads::StepConfig config) {
  config.plan.experts = {8};
  config.plan.experts.overlap_expert_parallel_comm = true;
  config.plan.experts.delay_wgrad_compute = true;
  const workloads::Program program = workloads::compile(config);
  workloads::validate_program(program);
  require_consistent_step(program, pipeline_world());
}

}  // namespace shardsim::test
