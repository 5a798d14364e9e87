// OpWriter: appends ops to one rank program the way the step compilers do.
// Kernels go on the compute stream, each also waiting for the ops a
// compiler blocked on the next kernel (a reduction the backward must not
// outrun, model-parallel calls a block's output needs), or, marked so in a
// kernel list, on a side compute stream; collectives and memory ops go on
// any stream. The compilers' builders derive from it.
#pragma once

#include "workloads/program.h"
#include "workloads/transformer_kernels.h"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardsim::workloads {

// An op's place in its rank program's list.
using OpIndex = std::uint32_t;

class OpWriter {
 protected:
  OpWriter(RankProgram& program, int compute_stream) : program_(program), compute_stream_(compute_stream) {}

  OpIndex add(const Op& op, std::string_view name, std::span<const OpIndex> deps) {
    return program_.append(op, name, deps);
  }
  OpIndex add(const Op& op, std::string_view name, std::initializer_list<OpIndex> deps) {
    return program_.append(op, name, deps);
  }
  OpIndex collective(std::string_view name, CollectiveOp kind, int communicator, double bytes, int stream,
                     std::span<const OpIndex> deps, int root = 0) {
    return add(collective_op(kind, communicator, bytes, stream, root), name, deps);
  }
  OpIndex collective(std::string_view name, CollectiveOp kind, int communicator, double bytes, int stream,
                     std::initializer_list<OpIndex> deps, int root = 0) {
    return collective(name, kind, communicator, bytes, stream, std::span(deps.begin(), deps.size()), root);
  }
  OpIndex memory(std::string_view name, MemoryCategory category, double bytes, int stream,
                 std::span<const OpIndex> deps) {
    const OpIndex index = add(memory_op(category, bytes, stream), name, deps);
    if (stream == compute_stream_) last_on_compute_stream_ = index;
    return index;
  }
  OpIndex memory(std::string_view name, MemoryCategory category, double bytes, int stream,
                 std::initializer_list<OpIndex> deps = {}) {
    return memory(name, category, bytes, stream, std::span(deps.begin(), deps.size()));
  }
  OpIndex kernel(const KernelSpec& spec, std::string_view prefix, std::vector<OpIndex> deps) {
    if (spec.call) throw std::logic_error("OpWriter: " + spec.name + " is a call, not a kernel");
    if (spec.on_side_stream || spec.joins_side_stream) {
      throw std::logic_error("OpWriter: " + spec.name + " belongs to a side-stream chain, which only run() writes");
    }
    return compute_kernel(spec, prefix, std::move(deps));
  }
  // `spec` on the compute stream, its side-stream marks left to run().
  OpIndex compute_kernel(const KernelSpec& spec, std::string_view prefix, std::vector<OpIndex> deps) {
    deps.insert(deps.end(), blocking_.begin(), blocking_.end());
    blocking_.clear();
    name_.assign(prefix).append(spec.name);
    last_compute_ = add(kernel_op(spec, compute_stream_), name_, deps);
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
  // Side-stream entries chain on `side_stream_` from the last kernel before
  // the first of them (and what the list's next kernel would wait for), up
  // to the kernel that joins them; kernels name only the calls off the chain.
  template <typename Route>
  void run(const std::vector<KernelSpec>& list, std::string_view prefix, std::vector<OpIndex>& deps, Route route) {
    std::vector<OpIndex> calls;
    std::vector<bool> waited;
    std::optional<OpIndex> side;  // the side chain's latest entry, until a kernel joins it
    for (const KernelSpec& spec : list) {
      if (spec.on_side_stream) {
        if (side_stream_ < 0) throw std::logic_error("OpWriter: " + spec.name + " needs a side compute stream");
        std::vector<OpIndex> after = side ? std::vector<OpIndex>{*side} : after_last_compute();
        if (!side) {
          after.insert(after.end(), deps.begin(), deps.end());
          after.insert(after.end(), blocking_.begin(), blocking_.end());
        }
        name_.assign(prefix).append(spec.name);
        if (spec.call) {
          const CallRoute to = route(spec.call->group);
          side = collective(name_, spec.call->op, to.communicator, spec.call->bytes, to.stream, after);
        } else {
          side = add(kernel_op(spec, side_stream_), name_, after);
        }
        continue;
      }
      if (spec.call) {
        const CallRoute to = route(spec.call->group);
        name_.assign(prefix).append(spec.name);
        calls.push_back(collective(name_, spec.call->op, to.communicator, spec.call->bytes, to.stream,
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
      if (spec.joins_side_stream) {
        if (!side) throw std::logic_error("OpWriter: " + spec.name + " joins a side stream that runs nothing");
        kernel_deps.push_back(*std::exchange(side, std::nullopt));
      }
      compute_kernel(spec, prefix, std::move(kernel_deps));
    }
    if (side) throw std::logic_error("OpWriter: a side-stream chain of " + std::string(prefix) + " is never joined");
    for (std::size_t i = 0; i < calls.size(); ++i) {
      if (!waited[i]) blocking_.push_back(calls[i]);
    }
  }

  std::vector<OpIndex> after_last_compute() const {
    return last_compute_ ? std::vector<OpIndex>{*last_compute_} : std::vector<OpIndex>{};
  }

  RankProgram& program_;
  int compute_stream_;
  int side_stream_ = -1;  // set by a builder whose kernel lists have side-stream entries
  std::string name_;  // the op name being put together, kept to reuse its buffer
  std::optional<OpIndex> last_compute_;
  std::optional<OpIndex> last_on_compute_stream_;  // a kernel or a memory op
  std::vector<OpIndex> blocking_;                  // the next kernel waits for these
};

}  // namespace shardsim::workloads
