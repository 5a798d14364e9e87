// OpWriter: appends ops to one rank program the way the step compilers do.
// Kernels go on the compute stream, each also waiting for the ops a
// compiler blocked on the next kernel (a reduction the backward must not
// outrun, model-parallel calls a block's output needs); collectives and
// memory ops go on any stream. The compilers' builders derive from it.
#pragma once

#include "workloads/program.h"
#include "workloads/transformer_kernels.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace shardsim::workloads {

// An op's place in its rank program's list.
using OpIndex = std::uint32_t;

class OpWriter {
 protected:
  OpWriter(std::vector<Op>& ops, int compute_stream) : ops_(ops), compute_stream_(compute_stream) {}

  OpIndex add(Op op) {
    ops_.push_back(std::move(op));
    return static_cast<OpIndex>(ops_.size() - 1);
  }
  OpIndex collective(const std::string& name, CollectiveOp kind, int communicator, double bytes, int stream,
                     std::vector<OpIndex> deps, int root = 0) {
    return add(collective_op(name, kind, communicator, bytes, stream, std::move(deps), root));
  }
  OpIndex memory(const std::string& name, MemoryCategory category, double bytes, int stream,
                 std::vector<OpIndex> deps = {}) {
    const OpIndex index = add(memory_op(name, category, bytes, stream, std::move(deps)));
    if (stream == compute_stream_) last_on_compute_stream_ = index;
    return index;
  }
  OpIndex kernel(const KernelSpec& spec, const std::string& prefix, std::vector<OpIndex> deps) {
    if (spec.call) throw std::logic_error("OpWriter: " + spec.name + " is a call, not a kernel");
    Op op = kernel_op(spec, prefix + spec.name, compute_stream_, std::move(deps));
    op.deps.insert(op.deps.end(), blocking_.begin(), blocking_.end());
    blocking_.clear();
    last_compute_ = add(std::move(op));
    last_on_compute_stream_ = last_compute_;
    return *last_compute_;
  }
  // Where a call of a kernel list runs.
  struct CallRoute {
    int communicator = -1;
    int stream = 0;
  };

  // A kernel list with its calls (transformer_kernels.h): a call follows the
  // kernel before it, over the communicator and on the stream `route(group)`
  // gives; a kernel waits for the call it names. `deps` go to the first
  // kernel. Calls no kernel of the list waits for hold up the next kernel.
  template <typename Route>
  void run(const std::vector<KernelSpec>& list, const std::string& prefix, std::vector<OpIndex>& deps, Route route) {
    std::vector<OpIndex> calls;
    std::vector<bool> waited;
    for (const KernelSpec& spec : list) {
      if (spec.call) {
        const CallRoute to = route(spec.call->group);
        calls.push_back(collective(prefix + spec.name, spec.call->op, to.communicator, spec.call->bytes, to.stream,
                                   after_last_compute()));
        waited.push_back(false);
        continue;
      }
      std::vector<OpIndex> kernel_deps = std::exchange(deps, {});
      if (spec.waits_for_call > 0) {
        const std::size_t which = calls.size() - static_cast<std::size_t>(spec.waits_for_call);
        kernel_deps.push_back(calls[which]);
        waited[which] = true;
      }
      kernel(spec, prefix, std::move(kernel_deps));
    }
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (!waited[i]) blocking_.push_back(calls[i]);
    }
  }

  std::vector<OpIndex> after_last_compute() const {
    return last_compute_ ? std::vector<OpIndex>{*last_compute_} : std::vector<OpIndex>{};
  }

  std::vector<Op>& ops_;
  int compute_stream_;
  std::optional<OpIndex> last_compute_;
  std::optional<OpIndex> last_on_compute_stream_;  // a kernel or a memory op
  std::vector<OpIndex> blocking_;                  // the next kernel waits for these
};

}  // namespace shardsim::workloads
