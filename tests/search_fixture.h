// TinySearch: the search on a 2-node A100 cluster over a small plan space and
// a 4-layer LLaMA-7B-wide model, for tests of the search and of what runs it.
#pragma once

#include "calib/profile.h"
#include "sim/search/plan_search.h"
#include "topology/base/json_input.h"
#include "topology/cluster.h"
#include "topology/routing.h"
#include "workloads/import/model_file.h"
#include "workloads/inputs/job_scale.h"

#include <memory>

namespace shardsim::test {

struct TinySearch {
  topology::ClusterSpec spec = topology::load_cluster_spec("dgx-a100-2node");
  std::unique_ptr<topology::Cluster> cluster;
  std::unique_ptr<topology::Router> router;
  calib::Profile profile = calib::load_profile("a100");
  sim::SearchRequest request;

  explicit TinySearch(double memory_limit_bytes = 0) {
    if (memory_limit_bytes > 0) spec.node.gpu_memory_bytes = memory_limit_bytes;
    cluster = std::make_unique<topology::Cluster>(spec);
    router = std::make_unique<topology::Router>(*cluster);
    request.gpus = 16;
    request.model = workloads::load_model("llama-7b");
    request.training = workloads::load_training_config("seq4096-mbs1-4m-tokens");
    // A 4-layer LLaMA-7B-wide model, 64 sequences of 1024 tokens per step.
    workloads::apply_job_scale(workloads::parse_job_scale("layers=4,seq=1024,micro_batches=4"), 16, request.model,
                               request.training);
    request.space.micro_batch_sizes = {1, 2};
    request.space.recompute = {workloads::Recompute::none, workloads::Recompute::full};
    request.space.bucket_bytes = {1e8, 1e9};
    request.space.placements = {topology::PlacementPolicy::consecutive};
  }
};


}  // namespace shardsim::test
