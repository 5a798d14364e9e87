#include "workloads/compile/pipeline_schedule.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

namespace shardsim::workloads {

std::string microbatch_group_problem(int stages, int micro_batches, int group) {
  if (group < stages || group > micro_batches) {
    return "the micro-batch group must lie between the " + std::to_string(stages) + " pipeline stages and the " +
           std::to_string(micro_batches) + " micro-batches per step, got " + std::to_string(group);
  }
  const int last = micro_batches % group;
  if (last > 0 && last < stages) {
    return std::to_string(micro_batches) + " micro-batches in groups of " + std::to_string(group) +
           " leave a last group of " + std::to_string(last) + ", fewer than the " + std::to_string(stages) +
           " pipeline stages: it would stall the pipeline (Megatron-Core refuses it)";
  }
  return "";
}

namespace {

// The (micro-batch, chunk) of each forward a stage runs, in order, as
// Megatron-Core's get_schedule_table lists them: groups of `group`
// micro-batches visit every chunk in turn, the last group taking the rest.
std::vector<PipelinePass> forward_order(int chunks, int micro_batches, int group) {
  std::vector<PipelinePass> order;
  order.reserve(static_cast<std::size_t>(chunks) * static_cast<std::size_t>(micro_batches));
  for (int first = 0; first < micro_batches; first += group) {
    const int end = std::min(first + group, micro_batches);
    for (int chunk = 0; chunk < chunks; ++chunk) {
      for (int micro_batch = first; micro_batch < end; ++micro_batch) {
        order.push_back({PassKind::forward, micro_batch, chunk});
      }
    }
  }
  return order;
}

}  // namespace

namespace {

// Megatron-Core's 1F1B order, each steady-state forward and the backward
// after it one step; `combined`: one forward more in the warm-up.
std::vector<std::vector<CombinedStep>> one_forward_one_backward(int stages, int chunks, int micro_batches, int group,
                                                                bool combined) {
  if (stages < 1 || chunks < 1 || micro_batches < 1 || group < 0) {
    throw std::invalid_argument("pipeline_schedule: stages, chunks and micro-batches must be positive");
  }
  if (group == 0) group = stages;
  if (chunks > 1 && group == stages && micro_batches % stages != 0) {
    throw std::invalid_argument("pipeline_schedule: interleaving needs micro-batches (" + std::to_string(micro_batches) +
                                ") to be a multiple of the stages (" + std::to_string(stages) +
                                "), or groups of another size");
  }
  if (chunks > 1) {
    if (const std::string problem = microbatch_group_problem(stages, micro_batches, group); !problem.empty()) {
      throw std::invalid_argument("pipeline_schedule: " + problem);
    }
  }
  const std::vector<PipelinePass> forwards = forward_order(chunks, micro_batches, chunks > 1 ? group : micro_batches);
  // The k-th backward runs the k-th forward's micro-batch through the
  // mirrored chunk: backwards visit the chunks in reverse.
  std::vector<PipelinePass> backwards = forwards;
  for (PipelinePass& pass : backwards) {
    pass.kind = PassKind::backward;
    pass.chunk = chunks - 1 - pass.chunk;
  }
  const int total = micro_batches * chunks;
  std::vector<std::vector<CombinedStep>> order(static_cast<std::size_t>(stages));
  for (int stage = 0; stage < stages; ++stage) {
    // Megatron-Core's get_pp_rank_microbatches.
    const int warmup = std::min(total, (combined ? 1 : 0) + (chunks == 1 ? std::min(stages - stage - 1, micro_batches)
                                                                        : (stages - stage - 1) * 2 + (chunks - 1) * group));
    std::vector<CombinedStep>& steps = order[static_cast<std::size_t>(stage)];
    steps.reserve(static_cast<std::size_t>(2 * total));
    std::size_t forward = 0, backward = 0;
    for (; forward < static_cast<std::size_t>(warmup); ++forward) steps.push_back({forwards[forward], std::nullopt});
    while (forward < forwards.size()) steps.push_back({forwards[forward++], backwards[backward++]});
    while (backward < backwards.size()) steps.push_back({std::nullopt, backwards[backward++]});
  }
  return order;
}

}  // namespace

std::vector<std::vector<PipelinePass>> pipeline_schedule(int stages, int chunks, int micro_batches, int group) {
  const auto steps = one_forward_one_backward(stages, chunks, micro_batches, group, false);
  std::vector<std::vector<PipelinePass>> order(steps.size());
  for (std::size_t stage = 0; stage < steps.size(); ++stage) {
    order[stage].reserve(2 * steps[stage].size());
    for (const CombinedStep& step : steps[stage]) {
      if (step.forward) order[stage].push_back(*step.forward);
      if (step.backward) order[stage].push_back(*step.backward);
    }
  }
  return order;
}

std::vector<std::vector<CombinedStep>> combined_1f1b_schedule(int stages, int chunks, int micro_batches, int group) {
  if (stages > 1 && chunks == 1) {
    throw std::invalid_argument("combined_1f1b_schedule: with pipeline stages it needs the interleaved schedule");
  }
  return one_forward_one_backward(stages, chunks, micro_batches, group, true);
}

std::vector<std::vector<PipelinePass>> unit_schedule(int stages, int chunks, int micro_batches, int unit,
                                                     const std::vector<std::vector<PassSeconds>>& seconds,
                                                     int max_pending_weight_passes) {
  if (stages < 1 || chunks < 1 || micro_batches < 1 || unit < 1 || max_pending_weight_passes < 0) {
    throw std::invalid_argument("unit_schedule: stages, chunks, micro-batches and the unit must be positive");
  }
  if (micro_batches % unit != 0) {
    throw std::invalid_argument("unit_schedule: the micro-batches (" + std::to_string(micro_batches) +
                                ") must be a multiple of the scheduling unit (" + std::to_string(unit) + ")");
  }
  const bool shaped = seconds.size() == static_cast<std::size_t>(stages) &&
                      std::all_of(seconds.begin(), seconds.end(), [chunks](const std::vector<PassSeconds>& row) {
                        return row.size() == static_cast<std::size_t>(chunks);
                      });
  if (!seconds.empty() && !shaped) {
    throw std::invalid_argument("unit_schedule: pass times must be given per stage and chunk");
  }
  const auto cost = [&](int stage, const PipelinePass& pass) {
    if (seconds.empty()) return 1.0;
    const PassSeconds& t = seconds[static_cast<std::size_t>(stage)][static_cast<std::size_t>(pass.chunk)];
    return pass.kind == PassKind::forward ? t.forward
           : pass.kind == PassKind::input_gradient ? t.input_gradient
                                                   : t.weight_gradient;
  };

  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  const int last_virtual = stages * chunks - 1;
  const auto slot = [micro_batches](int virtual_stage, int micro_batch) {
    return static_cast<std::size_t>(virtual_stage) * static_cast<std::size_t>(micro_batches) +
           static_cast<std::size_t>(micro_batch);
  };
  // When each (virtual stage, micro-batch)'s F and B end, once scheduled.
  std::vector<double> forward_end(slot(last_virtual + 1, 0), kUnknown);
  std::vector<double> input_gradient_end(forward_end.size(), kUnknown);

  struct Stage {
    std::vector<PipelinePass> forwards, backwards;  // in the order they must run
    std::size_t next_forward = 0, next_backward = 0, next_weight = 0;
    double free_at = 0;
  };
  std::vector<Stage> state(static_cast<std::size_t>(stages));
  for (Stage& stage : state) {
    for (int first = 0; first < micro_batches; first += unit) {
      for (int c = 0; c < chunks; ++c) {
        for (int j = 0; j < unit; ++j) stage.forwards.push_back({PassKind::forward, first + j, c});
      }
      for (int c = chunks - 1; c >= 0; --c) {
        for (int j = 0; j < unit; ++j) stage.backwards.push_back({PassKind::input_gradient, first + j, c});
      }
    }
  }
  const std::size_t activations_bound = static_cast<std::size_t>(unit) * static_cast<std::size_t>(chunks);
  const std::size_t pending_weight_bound =
      max_pending_weight_passes > 0 ? static_cast<std::size_t>(max_pending_weight_passes) : activations_bound;

  std::vector<std::vector<PipelinePass>> order(static_cast<std::size_t>(stages));
  const std::size_t total = 3 * static_cast<std::size_t>(micro_batches) * static_cast<std::size_t>(chunks);
  for (std::size_t scheduled = 0; scheduled < total * static_cast<std::size_t>(stages); ++scheduled) {
    // The stage that can start a pass earliest (the lowest on a tie) runs
    // the pass of highest priority ready then. Every pass still to be
    // scheduled ends after that start, so nothing it could unblock would
    // have been ready sooner: the choice is the one a running pipeline makes.
    int chosen = -1;
    double chosen_start = kUnknown;
    PipelinePass chosen_pass;
    for (int s = 0; s < stages; ++s) {
      const Stage& stage = state[static_cast<std::size_t>(s)];
      double ready[3] = {kUnknown, kUnknown, kUnknown};  // B, F, W: priority order
      PipelinePass pass[3];
      if (stage.next_backward < stage.backwards.size() && stage.next_backward - stage.next_weight < pending_weight_bound) {
        pass[0] = stage.backwards[stage.next_backward];
        const int k = pass[0].chunk * stages + s;
        const double input = k == last_virtual ? forward_end[slot(k, pass[0].micro_batch)]
                                               : input_gradient_end[slot(k + 1, pass[0].micro_batch)];
        ready[0] = std::max(stage.free_at, input);
      }
      if (stage.next_forward < stage.forwards.size() && stage.next_forward - stage.next_weight < activations_bound) {
        pass[1] = stage.forwards[stage.next_forward];
        const int k = pass[1].chunk * stages + s;
        ready[1] = std::max(stage.free_at, k == 0 ? 0.0 : forward_end[slot(k - 1, pass[1].micro_batch)]);
      }
      if (stage.next_weight < stage.next_backward) {
        pass[2] = stage.backwards[stage.next_weight];
        pass[2].kind = PassKind::weight_gradient;
        ready[2] = stage.free_at;
      }
      const double start = *std::min_element(ready, ready + 3);
      if (start < chosen_start) {
        chosen = s;
        chosen_start = start;
        chosen_pass = pass[std::find(ready, ready + 3, start) - ready];
      }
    }
    if (chosen < 0) throw std::logic_error("unit_schedule: no stage can run a pass");
    Stage& stage = state[static_cast<std::size_t>(chosen)];
    const double end = chosen_start + cost(chosen, chosen_pass);
    const int k = chosen_pass.chunk * stages + chosen;
    switch (chosen_pass.kind) {
      case PassKind::forward:
        forward_end[slot(k, chosen_pass.micro_batch)] = end;
        ++stage.next_forward;
        break;
      case PassKind::input_gradient:
        input_gradient_end[slot(k, chosen_pass.micro_batch)] = end;
        ++stage.next_backward;
        break;
      default: ++stage.next_weight; break;
    }
    stage.free_at = end;
    order[static_cast<std::size_t>(chosen)].push_back(chosen_pass);
  }
  return order;
}

}  // namespace shardsim::workloads
