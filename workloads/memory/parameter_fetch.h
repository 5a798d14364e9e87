// When sharded parameters are gathered and freed inside one micro-batch: the
// schedule the step compiler emits and the memory model takes its peak from.
//
// A micro-batch visits entries: the forward modules in order, then the
// backward groups in reverse (one module, or a whole layer under full
// recompute, whose recompute forward keeps the layer gathered for the
// gradients that follow). Policies:
//   on_demand    each entry gathers its modules when it starts and frees them
//                when it ends (the gather/scatter overlap switched off);
//   layer_ahead  TECHNIQUES.md section 2 (AMSP and FSDP plans): the
//                first module of forward layer i also gathers layer i+1, a
//                backward entry also gathers the next entry; freed after use;
//   deepspeed    DeepSpeed ZeRO-3's PartitionedParameterCoordinator, as
//                ZeRO, MiCS and ZeRO++ plans fetch (ideal or as implemented:
//                it is how they fetch, not a limitation), replayed on the
//                recorded trace. Every submodule's pre-hook fetches what it
//                needs, then pops the trace queue and gathers what is not yet
//                available until it has issued stage3_prefetch_bucket_size
//                elements or the live total reaches
//                stage3_max_live_parameters; after its module a parameter is
//                released unless the queue already passed a later use of it,
//                or its next use comes within stage3_max_reuse_distance
//                elements of traversal (so the last layers of the forward
//                stay gathered into the backward). Hooks fire once per
//                parameter tensor here (`rounds`); since a round takes whole
//                modules, the window grows to max_live_parameters within a
//                few modules, as it does in DeepSpeed, whose container
//                modules fire hooks too (partitioned_param_coordinator.py,
//                fetch_sub_module and __params_to_release).
// Modules with nothing to gather (elements 0: unsharded, or every tensor
// persistent) are never gathered.
#pragma once

#include "workloads/inputs/model.h"
#include "workloads/inputs/plan.h"

#include <array>
#include <cstddef>
#include <functional>
#include <vector>

namespace shardsim::workloads {

enum class FetchPolicy { on_demand, layer_ahead, deepspeed };

struct FetchEntry {
  std::vector<std::size_t> modules;  // forward: one; backward: a group
  int layer = -1;                    // the modules' layer (forward grouping of layer_ahead)
  bool backward = false;
  int rounds = 1;                    // DeepSpeed pre-hooks that fire at this entry
};

struct FetchLimits {
  double prefetch_elements = 0;
  double max_live_elements = 0;
  double max_reuse_distance_elements = 0;
};

struct FetchSchedule {
  struct Gather {
    std::size_t module = 0;
    bool serves_backward = false;  // the use it is for: forward or backward
  };
  std::vector<std::vector<Gather>> gather_at;         // per entry, issued as it starts, in order
  std::vector<std::vector<std::size_t>> free_after;   // per entry, freed as it ends
};

// The entries of one micro-batch over the compiler's modules, the head's
// layer `head_layer` (ModelSpec::head_layer). A layer that reruns its
// forward whole in backward (`reruns_layer`, TrainingConfig::reruns_whole_layer)
// makes one backward entry of its modules (an MTP depth's input with them).
using LayerPredicate = std::function<bool(int layer)>;
std::vector<FetchEntry> micro_batch_entries(const std::vector<ModuleParameters>& modules, int head_layer,
                                            const LayerPredicate& reruns_layer);

// Elements each module gathers: its tensors, and those it borrows, above the
// persistence threshold (DeepSpeed keeps tensors of at most that many
// elements whole on every GPU). Persistent elements count owned tensors only.
std::vector<double> gathered_elements(const std::vector<ModuleParameters>& modules, double persistence_threshold);
double persistent_elements(const std::vector<ModuleParameters>& modules, double persistence_threshold);

// The policy a plan's gathers follow, and its limits in elements.
FetchPolicy fetch_policy(const Plan& plan);
FetchLimits fetch_limits(const Plan& plan, double bytes_per_value);

FetchSchedule schedule_fetches(const std::vector<FetchEntry>& entries, const std::vector<double>& elements,
                               FetchPolicy policy, const FetchLimits& limits);

// All of the above for one plan over a model's modules, as the step compiler
// emits it and the memory model peaks it; unsharded (f_P = 1), nothing is
// gathered or persistent.
struct ParameterFetches {
  std::vector<FetchEntry> entries;
  std::vector<double> elements;  // gathered per module
  double persistent_elements = 0;
  FetchSchedule schedule;
};
ParameterFetches plan_parameter_fetches(const std::vector<ModuleParameters>& modules, int head_layer,
                                        const LayerPredicate& reruns_layer,
                                        const Plan& plan, double bytes_per_value, bool sharded);

// The modules as a plan's gathers see them: under expert parallelism, routed
// experts whose group shards no parameters (expert factor f'_P = 1, plan.h)
// are held whole and gather nothing.
std::vector<ModuleParameters> gathered_modules(std::vector<ModuleParameters> modules, const Plan& plan,
                                               int expert_parameter_factor);

// The GPUs a gather spans: the f_P group, or ZeRO++'s secondary (hpZ) group
// when the gather is issued in the backward.
int gather_group(int parameter_factor, int secondary_group, bool issued_in_backward);

// The most gathered bytes alive at once, a gather of module m costing
// bytes_per_element[m][issued in the backward] per element while it lives.
double peak_gathered_bytes(const std::vector<FetchEntry>& entries, const FetchSchedule& schedule,
                           const std::vector<double>& elements,
                           const std::vector<std::array<double, 2>>& bytes_per_element);

}  // namespace shardsim::workloads
