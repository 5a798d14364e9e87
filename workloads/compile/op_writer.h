// OpWriter: appends ops to one rank program the way the step compilers do.
// Kernels go on the compute stream, each also waiting for the ops a
// compiler blocked on the next kernel (a reduction the backward must not
// outrun, model-parallel calls a block's output needs), or, marked so in a
// kernel list, on a side compute stream; collectives and memory ops go on
// any stream. The compilers' builders derive from it.
#pragma once

#include "workloads/ir/program.h"
#include "workloads/kernels/transformer_kernels.h"

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

// The entries of a kernel list that OpWriter::run_range writes: [begin,
// end), all of them or one half of a backward (KernelSpec::weight_gradient),
// the kernels on the compute stream or on `kernel_stream`.
struct ListRange {
  enum class Half : std::uint8_t { all, input_gradient, weight_gradient };
  std::size_t begin = 0, end = 0;
  Half half = Half::all;
  int kernel_stream = -1;  // -1: the compute stream
};

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
  // `spec` on the compute stream (or on `stream`), its side-stream marks left
  // to run(). Off the compute stream it also waits for the kernel before it,
  // which stream order no longer implies, and so does the kernel after it.
  OpIndex compute_kernel(const KernelSpec& spec, std::string_view prefix, std::vector<OpIndex> deps, int stream = -1) {
    if (stream < 0) stream = compute_stream_;
    if (last_compute_ && program_.ops[*last_compute_].stream != stream) deps.push_back(*last_compute_);
    deps.insert(deps.end(), blocking_.begin(), blocking_.end());
    blocking_.clear();
    name_.assign(prefix).append(spec.name);
    last_compute_ = add(kernel_op(spec, stream), name_, deps);
    if (stream == compute_stream_) last_on_compute_stream_ = last_compute_;
    return *last_compute_;
  }
  // The working tensors a module's kernel list holds while it runs
  // (ModuleWork::forward_working, backward_working): allocated in order
  // before its first kernel, freed in reverse after its last, on the
  // compute stream.
  void allocate_working(std::string_view prefix, const std::vector<double>& tensors) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      memory(std::string(prefix) + "working" + std::to_string(i) + ".alloc", MemoryCategory::activations, tensors[i],
             compute_stream_);
    }
  }
  void free_working(std::string_view prefix, const std::vector<double>& tensors) {
    for (std::size_t i = tensors.size(); i-- > 0;) {
      memory(std::string(prefix) + "working" + std::to_string(i) + ".free", MemoryCategory::activations, -tensors[i],
             compute_stream_);
    }
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
    ListCalls calls(list);
    run_range(list, {0, list.size()}, prefix, deps, route, calls);
  }

  // The calls of one kernel list written so far, by their place in it, and
  // which of them a kernel of the list waits for: what lets a list be written
  // in several ranges, other ops between them.
  struct ListCalls {
    explicit ListCalls(const std::vector<KernelSpec>& list) : at(list.size()), waited(list.size(), false) {
      for (std::size_t i = 0; i < list.size(); ++i) {
        const KernelSpec& spec = list[i];
        if (!spec.call && !spec.on_side_stream && spec.waits_for_call > 0) {
          waited[call_before(list, i, spec.waits_for_call)] = true;
        }
      }
    }
    // The place of the k-th latest call listed before entry i, side-stream
    // calls left out.
    static std::size_t call_before(const std::vector<KernelSpec>& list, std::size_t i, int k) {
      while (i-- > 0) {
        if (list[i].call && !list[i].on_side_stream && --k == 0) return i;
      }
      throw std::logic_error("OpWriter: " + list.front().name + "...: a kernel waits for a call its list lacks");
    }
    std::vector<std::optional<OpIndex>> at;
    std::vector<bool> waited;
  };

  // Entries [range.begin, range.end) of `list`, as run() writes a whole one;
  // once the range reaching the list's end is written, the list's calls that
  // none of its kernels waits for hold up the next kernel. A side-stream
  // chain starts and ends inside one range.
  template <typename Route>
  void run_range(const std::vector<KernelSpec>& list, const ListRange& range, std::string_view prefix,
                 std::vector<OpIndex>& deps, Route route, ListCalls& calls) {
    using Half = ListRange::Half;
    std::optional<OpIndex> side;  // the side chain's latest entry, until a kernel joins it
    for (std::size_t i = range.begin; i < range.end; ++i) {
      const KernelSpec& spec = list[i];
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
        // Calls belong to the input-gradient half: a weight-gradient pass finds them written.
        if (range.half == Half::weight_gradient) continue;
        const CallRoute to = route(spec.call->group);
        name_.assign(prefix).append(spec.name);
        calls.at[i] = collective(name_, spec.call->op, to.communicator, spec.call->bytes, to.stream,
                                 after_last_compute());
        continue;
      }
      if ((range.half == Half::input_gradient && spec.weight_gradient) ||
          (range.half == Half::weight_gradient && !spec.weight_gradient)) {
        continue;
      }
      std::vector<OpIndex> kernel_deps = std::exchange(deps, {});
      if (spec.waits_for_call > 0) {
        const std::optional<OpIndex> call = calls.at[ListCalls::call_before(list, i, spec.waits_for_call)];
        if (!call) throw std::logic_error("OpWriter: " + spec.name + " waits for a call not written yet");
        kernel_deps.push_back(*call);
      }
      if (spec.joins_side_stream) {
        if (!side) throw std::logic_error("OpWriter: " + spec.name + " joins a side stream that runs nothing");
        kernel_deps.push_back(*std::exchange(side, std::nullopt));
      }
      compute_kernel(spec, prefix, std::move(kernel_deps), range.kernel_stream);
    }
    if (side) throw std::logic_error("OpWriter: a side-stream chain of " + std::string(prefix) + " is never joined");
    if (range.end < list.size() || range.half == Half::weight_gradient) return;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (calls.at[i] && !calls.waited[i]) blocking_.push_back(*calls.at[i]);
    }
  }

  // What a pass's kernels and calls follow, kept apart for each of two
  // passes written interleaved (Megatron-Core's combined 1F1B): its last
  // kernel, and the calls its next kernel waits for.
  struct PassState {
    std::optional<OpIndex> last_compute;
    std::vector<OpIndex> blocking;
  };
  // Runs `write` with `state` as the writer's, then keeps what it left there.
  template <typename Write>
  void as_pass(PassState& state, Write write) {
    std::swap(last_compute_, state.last_compute);
    std::swap(blocking_, state.blocking);
    write();
    std::swap(last_compute_, state.last_compute);
    std::swap(blocking_, state.blocking);
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
