#include "sim/search/plan_space.h"

#include "topology/json_input.h"

#include <cstdio>
#include <map>
#include <stdexcept>

namespace shardsim::sim {

using workloads::Plan;
using workloads::ShardingSystem;

std::vector<int> mesh_factors(int gpus, int gpus_per_node) {
  std::vector<int> factors;
  for (int f = 1; f <= gpus; ++f) {
    if (gpus % f != 0) continue;
    if (f <= gpus_per_node ? gpus_per_node % f == 0 : f % gpus_per_node == 0) factors.push_back(f);
  }
  return factors;
}

int placement_group_ranks(const Plan& plan, const workloads::ShardingFactors& factors, int gpus) {
  int largest = 0;
  for (int f : {factors.parameters, factors.gradients, factors.optimizer, plan.secondary_parameter_group}) {
    if (f < gpus) largest = std::max(largest, f);
  }
  return largest;
}

namespace {

Plan with_factors(Plan plan, std::string name, int parameters, int gradients, int optimizer) {
  plan.name = std::move(name);
  plan.factors = {parameters, gradients, optimizer};
  return plan;
}

// The systems to try, each with its factors written out (0 = all).
std::vector<Plan> systems(const SearchSpace& space, int gpus, int gpus_per_node) {
  std::vector<Plan> plans;
  const std::vector<int> factors = mesh_factors(gpus, gpus_per_node);
  if (space.named_systems) {
    for (const char* preset : {"zero0", "zero1", "zero2", "zero3", "fsdp-full-shard", "fsdp-shard-grad-op"}) {
      plans.push_back(workloads::load_plan(preset));
    }
    // The presets reduce ZeRO-1/2 gradients to their owners, as DeepSpeed
    // releases before PR #4695 did; current DeepSpeed all-reduces each bucket
    // (multi-rank bucketing, TECHNIQUES.md section 6) by default.
    for (const char* preset : {"zero1", "zero2"}) {
      Plan current = workloads::load_plan(preset);
      current.name += "-multi-rank";
      current.multi_rank_bucketing = true;
      current.sources.push_back("use_multi_rank_bucket_allreduce, DeepSpeed's default since PR #4695");
      plans.push_back(std::move(current));
    }
    const Plan hybrid = workloads::load_plan("fsdp-hybrid-8");
    const Plan mics = workloads::load_plan("mics-8");
    const Plan zeropp = workloads::load_plan("zeropp-hpz8");
    for (int k : factors) {
      if (k == 1 || k == gpus) continue;
      const std::string size = std::to_string(k);
      plans.push_back(with_factors(hybrid, "fsdp-hybrid-" + size, k, k, k));
      plans.push_back(with_factors(mics, "mics-" + size, k, k, k));
      Plan secondary = zeropp;
      secondary.name = "zeropp-hpz" + size;
      secondary.secondary_parameter_group = k;
      plans.push_back(std::move(secondary));
    }
  }
  if (space.amsp) {
    Plan amsp = workloads::load_plan("amsp-llama7b");
    amsp.sources = {"AMSP (TECHNIQUES.md section 2): factor triple enumerated by shardsim search under the dependency "
                    "rule and the mesh filter"};
    for (int p : factors) {
      for (int g : factors) {
        if (g < p || g % p != 0) continue;
        for (int os : factors) {
          if (os < g || os % g != 0) continue;
          plans.push_back(with_factors(amsp, "amsp-" + std::to_string(p) + "-" + std::to_string(g) + "-" + std::to_string(os),
                                       p, g, os));
        }
      }
    }
  }
  return plans;
}

std::string bytes_label(double bytes) {
  char text[32];
  if (bytes >= 1e9) {
    std::snprintf(text, sizeof text, "%g GB", bytes / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%g MB", bytes / 1e6);
  }
  return text;
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const SearchSpace& space, const workloads::TrainingConfig& training,
                                            const topology::Cluster& cluster, int gpus) {
  const int per_node = cluster.gpus_per_node();
  // place_ranks() says why a GPU count cannot be a job here.
  const auto consecutive = std::make_shared<const topology::Placement>(
      topology::place_ranks(cluster, gpus, topology::PlacementPolicy::consecutive));

  std::vector<std::pair<std::int64_t, std::int64_t>> batches;  // (micro-batch size, accumulation)
  for (std::int64_t size : space.micro_batch_sizes) {
    const std::int64_t per_step = size * gpus;
    if (size > 0 && training.global_batch_sequences % per_step == 0) {
      batches.emplace_back(size, training.global_batch_sequences / per_step);
    }
  }
  if (batches.empty()) {
    std::string sizes;
    for (std::int64_t size : space.micro_batch_sizes) sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
    throw std::invalid_argument(std::to_string(gpus) + " GPUs: the global batch of " +
                                std::to_string(training.global_batch_sequences) +
                                " sequences is not a whole number of micro-batches of " + sizes + " per GPU");
  }

  std::map<std::pair<topology::PlacementPolicy, int>, std::shared_ptr<const topology::Placement>> placements;
  auto placement_for = [&](topology::PlacementPolicy policy, int group) {
    auto& placed = placements[{policy, group}];
    if (!placed) placed = std::make_shared<const topology::Placement>(topology::place_ranks(cluster, gpus, policy, group));
    return placed;
  };

  std::vector<Candidate> candidates;
  for (const Plan& system : systems(space, gpus, per_node)) {
    workloads::ShardingFactors factors;
    try {
      factors = workloads::resolve_factors(system, gpus, per_node, system.name);
    } catch (const InputError&) {
      continue;  // e.g. ZeRO++'s secondary group against this GPU count
    }
    const int group = placement_group_ranks(system, factors, gpus);
    for (double bucket : space.bucket_bytes) {
      Plan plan = system;
      plan.buckets.reduce_bytes = bucket;
      plan.buckets.all_gather_bytes = bucket;
      for (const auto& [size, accumulation] : batches) {
        for (workloads::Recompute recompute : space.recompute) {
          // Selective recompute redoes the attention core, which flash
          // attention already recomputes: the same step, listed once.
          if (recompute == workloads::Recompute::selective && training.flash_attention) continue;
          for (topology::PlacementPolicy policy : space.placements) {
            auto placement = policy == topology::PlacementPolicy::consecutive ? consecutive : placement_for(policy, group);
            if (policy != topology::PlacementPolicy::consecutive && *placement == *consecutive) continue;
            Candidate candidate;
            candidate.index = candidates.size();
            candidate.plan = plan;
            candidate.factors = factors;
            candidate.training = training;
            candidate.training.micro_batch_size = size;
            candidate.training.recompute = recompute;
            candidate.accumulation = accumulation;
            candidate.placement = std::move(placement);
            candidates.push_back(std::move(candidate));
          }
        }
      }
    }
  }
  return candidates;
}

std::string describe(const Candidate& candidate) {
  return candidate.plan.name + ", mbs " + std::to_string(candidate.training.micro_batch_size) + ", recompute " +
         workloads::to_string(candidate.training.recompute) + ", buckets " +
         bytes_label(candidate.plan.buckets.reduce_bytes) + ", " +
         std::string(topology::to_string(candidate.placement->policy));
}

}  // namespace shardsim::sim
