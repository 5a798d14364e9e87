// Program: one training step as every rank runs it, the IR both backends
// execute (DESIGN.md, "One IR, two backends").
//
// A rank's program is a DAG of ops. Each op runs on one of the rank's streams
// (like a CUDA stream: ops of one stream run one after another in program
// order) and also waits for the ops listed in `deps` (like CUDA events), which
// may sit on other streams. Ops are
//   compute     a kernel with its FLOPs and the HBM bytes it moves (and, for
//               GEMMs, the m x n x k shape the efficiency depends on);
//   collective  a call on one group of a communicator, with its buffer bytes
//               in nccl-tests' convention (collective_algorithm.h). As in
//               NCCL, the k-th call a rank makes on a group meets the k-th call
//               of every other member of that group;
//   memory      an allocation (bytes > 0) or a free (bytes < 0) of a category.
//
// An op's name and dependency list are views into its rank program's
// storage, where RankProgram::append copies them: a program of millions of
// ops is then a few large blocks, built and freed in one piece, not two small
// heap allocations per op (the plan search compiles hundreds of programs).
//
// Data-parallel training is SPMD, so ranks share op lists: `programs` holds
// the distinct lists and `program_of_rank` says which one each rank runs. A
// collective names a communicator, a partition of the ranks into groups; each
// rank calls it on the group it belongs to. Memory that lives through the
// whole step (parameters, gradients, optimizer states under the plan's
// factors) is `resident`; memory ops add what comes and goes on top.
#pragma once

#include "workloads/ir/collective_kind.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <memory_resource>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace shardsim::workloads {

enum class OpKind : std::uint8_t { compute, collective, memory };

// What kind of kernel, for the kernel-time model and for per-class error
// reports (GEMMs, attention, element-wise, the optimizer step).
enum class KernelClass : std::uint8_t { gemm, attention, elementwise, optimizer };

enum class Dtype : std::uint8_t { bf16, fp16, fp8, fp32 };

// The fused kernel an attention op is priced as: the profile's own
// (compute.attention_efficiency: the kernel its figure is of, or the one the
// probe timed), or a FlashAttention generation the profile lists under
// compute.attention_kernels. Which one runs is the software's choice, so the
// training config names it (attention_kernel), not the profile.
enum class AttentionKernel : std::uint8_t { profile, flash_attention_2, flash_attention_3 };

enum class MemoryCategory : std::uint8_t {
  parameters,             // this rank's shard of the bf16 parameters
  secondary_parameters,   // ZeRO++ hpZ copy
  gradients,              // this rank's shard of the gradients
  optimizer_states,       // fp32 master weights and Adam moments
  activations,            // kept from forward for backward
  gathered_parameters,    // gathered for a module, freed after it
  communication_buffers,  // gradients waiting for their reduction
};
inline constexpr int kMemoryCategoryCount = 7;

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
};

// Plain values but for `name` and `deps`, which RankProgram::append sets.
// The one-byte fields of every kind come first, where they pack.
struct Op {
  OpKind kind = OpKind::compute;
  KernelClass kernel = KernelClass::elementwise;                // compute
  Dtype dtype = Dtype::bf16;                                    // compute
  AttentionKernel attention_kernel = AttentionKernel::profile;  // attention only
  CollectiveOp collective = CollectiveOp::all_reduce;           // collective
  MemoryCategory memory = MemoryCategory::activations;          // memory
  int stream = 0;
  std::string_view name;                // in the rank program's storage
  std::span<const std::uint32_t> deps;  // indices of earlier ops of the same rank program, ditto

  // compute
  double flops = 0;
  double hbm_bytes = 0;
  GemmShape gemm;  // gemm only

  // collective
  int communicator = -1;
  int root = 0;  // position in the group, for broadcast and reduce

  double bytes = 0;  // a collective's buffer; a memory op's allocation (> 0) or free (< 0)
};

// A partition of the ranks into groups of equal size.
struct Communicator {
  std::string name;
  std::vector<std::vector<int>> groups;  // rank lists, ascending
  std::vector<int> group_of_rank;        // index into groups, -1 if the rank is in none

  int group_size() const { return groups.empty() ? 0 : static_cast<int>(groups.front().size()); }
  const std::vector<int>& group_of(int rank) const { return groups[static_cast<std::size_t>(group_of_rank[rank])]; }
};

struct RankProgram {
  std::vector<Op> ops;
  std::vector<double> resident_bytes = std::vector<double>(kMemoryCategoryCount, 0.0);  // by MemoryCategory

  // Appends `op` named `name` after `deps`, both copied into this program's
  // storage (`op`'s own name and deps are ignored); returns its index.
  std::uint32_t append(Op op, std::string_view name, std::span<const std::uint32_t> deps);
  std::uint32_t append(Op op, std::string_view name, std::initializer_list<std::uint32_t> deps = {}) {
    return append(op, name, std::span<const std::uint32_t>(deps.begin(), deps.size()));
  }

 private:
  // Never moves what it holds, so the views stay valid as ops are appended;
  // copies of the program share it. Made by the first append.
  std::shared_ptr<std::pmr::monotonic_buffer_resource> storage_;
};

struct Program {
  int ranks = 0;
  std::vector<std::string> streams;  // stream index -> name
  std::vector<Communicator> communicators;
  std::vector<RankProgram> programs;
  std::vector<int> program_of_rank;
  nlohmann::json description = nlohmann::json::object();  // what it was compiled from, for reports

  const RankProgram& program_of(int rank) const {
    return programs[static_cast<std::size_t>(program_of_rank[static_cast<std::size_t>(rank)])];
  }
  std::size_t total_ops() const;
};

// Ops as the compilers write them, to be appended with their names and
// dependencies: what every op has, then a collective's or a memory op's own
// fields (kernel_op in transformer_kernels.h fills a kernel's).
Op make_op(OpKind kind, int stream);
Op collective_op(CollectiveOp kind, int communicator, double bytes, int stream, int root = 0);
Op memory_op(MemoryCategory category, double bytes, int stream);

// Groups ranks 0..ranks-1 by key(rank): ranks with equal keys form a group,
// groups ordered by their smallest rank. Every group must be the same size
// (std::logic_error otherwise).
template <typename Key>
Communicator make_communicator(std::string name, int ranks, Key key);

// Checks what both backends rely on: deps point backwards, streams and
// communicators exist, every rank of a group runs the same sequence of
// calls on it (same collective, bytes and root). std::logic_error naming the
// op otherwise: a compiler bug, not bad user input.
void validate_program(const Program& program);

// Bytes one rank sends over the step, counted from its collectives with the
// bandwidth-optimal (ring) volumes: all-reduce 2(n-1)/n of the buffer,
// all-gather and reduce-scatter (n-1)/n, broadcast the buffer from the root
// (its share of the pipeline from each forwarding rank), all-to-all (n-1)/n,
// send (n-1) times the buffer from the root and nothing from the others.
double bytes_sent_per_rank(const Program& program, int rank);

std::string_view to_string(OpKind kind);
std::string_view to_string(KernelClass kernel);
std::string_view to_string(Dtype dtype);
std::string_view to_string(AttentionKernel kernel);
// The FlashAttention generation an input names ("flash_attention_2",
// "flash_attention_3"); nullopt for anything else, "profile" included.
std::optional<AttentionKernel> find_flash_attention(std::string_view name);
inline constexpr const char* kFlashAttentionNames = "flash_attention_2, flash_attention_3";
std::string_view to_string(MemoryCategory category);
double bytes_per_element(Dtype dtype);

// Plain JSON, readable by people and by the executor; from_json checks the
// document (InputError naming `file` and the field) and validate_program()s it.
nlohmann::json program_to_json(const Program& program);
Program program_from_json(const nlohmann::json& document, const std::string& file);

// --- implementation of the template ---------------------------------------

template <typename Key>
Communicator make_communicator(std::string name, int ranks, Key key) {
  Communicator communicator;
  communicator.name = std::move(name);
  communicator.group_of_rank.assign(static_cast<std::size_t>(ranks), -1);
  std::map<decltype(key(0)), std::size_t> group_of_key;
  for (int rank = 0; rank < ranks; ++rank) {
    const auto [it, added] = group_of_key.try_emplace(key(rank), communicator.groups.size());
    if (added) communicator.groups.emplace_back();
    communicator.groups[it->second].push_back(rank);
    communicator.group_of_rank[static_cast<std::size_t>(rank)] = static_cast<int>(it->second);
  }
  for (const auto& group : communicator.groups) {
    if (group.size() != communicator.groups.front().size()) {
      throw std::logic_error("communicator " + communicator.name + ": groups of different sizes");
    }
  }
  return communicator;
}

}  // namespace shardsim::workloads
