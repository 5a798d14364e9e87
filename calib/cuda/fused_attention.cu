#include "calib/cuda/fused_attention.h"

#include "calib/cuda/lt_gemm.h"

#include <cuda_bf16.h>

#include <dlfcn.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define SHARDSIM_HAVE_CUDNN_HEADERS 1
#endif

namespace shardsim::calib {

#ifdef SHARDSIM_HAVE_CUDNN_HEADERS

namespace {

constexpr const char* kCudnnLibrary = "libcudnn.so.9";

// The entry points the probe calls, looked up in libcudnn.so.9 at run time.
struct CudnnLibrary {
  std::string why_not;  // empty once every entry point is found
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
};

CudnnLibrary open_cudnn() {
  CudnnLibrary library;
  // Never closed: cuDNN keeps the sub-libraries it opened itself.
  void* handle = dlopen(kCudnnLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    library.why_not = std::string("cannot open ") + kCudnnLibrary + ": " + dlerror();
    return library;
  }
  const auto find = [&](auto& entry, const char* name) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(handle, name));
    if (entry == nullptr && library.why_not.empty()) {
      library.why_not = std::string(kCudnnLibrary) + " has no " + name + " (cuDNN 9 is needed)";
    }
  };
  find(library.get_version, "cudnnGetVersion");
  find(library.error_string, "cudnnGetErrorString");
  find(library.last_error, "cudnnGetLastErrorString");
  find(library.create, "cudnnCreate");
  find(library.destroy, "cudnnDestroy");
  find(library.set_stream, "cudnnSetStream");
  find(library.create_descriptor, "cudnnBackendCreateDescriptor");
  find(library.destroy_descriptor, "cudnnBackendDestroyDescriptor");
  find(library.set_attribute, "cudnnBackendSetAttribute");
  find(library.get_attribute, "cudnnBackendGetAttribute");
  find(library.finalize, "cudnnBackendFinalize");
  find(library.execute, "cudnnBackendExecute");
  return library;
}

const CudnnLibrary& cudnn() {
  static const CudnnLibrary library = open_cudnn();
  if (!library.why_not.empty()) throw std::runtime_error(library.why_not);
  return library;
}

// Throws naming the call and what it was for, with cuDNN's status and its
// own explanation of the last failure.
void check(cudnnStatus_t status, const char* call, const std::string& what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::array<char, 1024> detail{};
  cudnn().last_error(detail.data(), detail.size());
  std::string message = std::string(call) + "(" + what + "): " + cudnn().error_string(status);
  if (detail[0] != '\0') message += " (" + std::string(detail.data()) + ")";
  throw std::runtime_error(message);
}

class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    check(cudnn().create_descriptor(type, &descriptor_), "cudnnBackendCreateDescriptor", what_);
  }
  ~Descriptor() {
    if (descriptor_ != nullptr) cudnn().destroy_descriptor(descriptor_);
  }
  Descriptor(Descriptor&& other) noexcept
      : descriptor_(std::exchange(other.descriptor_, nullptr)), what_(std::move(other.what_)) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Descriptor& operator=(Descriptor&&) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor_; }

  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count, const void* values) {
    check(cudnn().set_attribute(descriptor_, name, type, count, values), "cudnnBackendSetAttribute", what_);
  }
  void set(cudnnBackendAttributeName_t name, const Descriptor& value) {
    const cudnnBackendDescriptor_t raw = value.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  }
  void finalize() { check(cudnn().finalize(descriptor_), "cudnnBackendFinalize", what_); }
  // False where cuDNN turns the descriptor down, as it does engine
  // configurations that do not suit the graph.
  bool try_finalize() { return cudnn().finalize(descriptor_) == CUDNN_STATUS_SUCCESS; }

 private:
  cudnnBackendDescriptor_t descriptor_ = nullptr;
  std::string what_;
};

// Packed row-major strides, as the operands are allocated.
Descriptor tensor(std::int64_t uid, const std::string& what, cudnnDataType_t type, std::array<std::int64_t, 4> dimensions,
                  bool by_value = false) {
  std::array<std::int64_t, 4> strides{};
  strides[3] = 1;
  for (int i = 2; i >= 0; --i) strides[static_cast<std::size_t>(i)] = strides[static_cast<std::size_t>(i) + 1] * dimensions[static_cast<std::size_t>(i) + 1];
  const std::int64_t alignment = by_value ? 4 : 16;
  Descriptor d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor " + what);
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dimensions.data());
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  if (by_value) {
    const bool yes = true;
    d.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  d.finalize();
  return d;
}

class Handle {
 public:
  Handle() { check(cudnn().create(&handle_), "cudnnCreate", "handle"); }
  ~Handle() {
    if (handle_ != nullptr) cudnn().destroy(handle_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kScale };

}  // namespace

// Members in the order they are built: each is destroyed before what it
// was built from, the handle last.
struct FusedAttention::Plan {
  Handle handle;
  // Deques: what is added later must not move what was added before.
  std::deque<Descriptor> tensors;
  std::deque<Descriptor> kept;  // operation, graph, heuristics, engine configurations
  std::unique_ptr<Descriptor> execution_plan, variant_pack;
  std::unique_ptr<DeviceBuffer> q, k, v, o, stats, workspace;
  float scale = 1;
  std::size_t elements = 0;
};

FusedAttention::FusedAttention(const AttentionShape& shape) : plan_(std::make_unique<Plan>()) {
  Plan& p = *plan_;

  const std::array<std::int64_t, 4> operand{shape.batch, shape.heads, shape.sequence, shape.head_dim};
  const std::array<std::int64_t, 4> row{shape.batch, shape.heads, shape.sequence, 1};
  p.tensors.push_back(tensor(kQ, "Q", CUDNN_DATA_BFLOAT16, operand));
  p.tensors.push_back(tensor(kK, "K", CUDNN_DATA_BFLOAT16, operand));
  p.tensors.push_back(tensor(kV, "V", CUDNN_DATA_BFLOAT16, operand));
  p.tensors.push_back(tensor(kO, "O", CUDNN_DATA_BFLOAT16, operand));
  p.tensors.push_back(tensor(kStats, "softmax statistics", CUDNN_DATA_FLOAT, row));
  p.tensors.push_back(tensor(kScale, "attention scale", CUDNN_DATA_FLOAT, {1, 1, 1, 1}, true));

  Descriptor& operation = p.kept.emplace_back(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SDPA forward operation");
  operation.set(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, p.tensors[0]);
  operation.set(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, p.tensors[1]);
  operation.set(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, p.tensors[2]);
  operation.set(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, p.tensors[3]);
  operation.set(CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, p.tensors[4]);
  operation.set(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, p.tensors[5]);
  operation.finalize();

  Descriptor& graph = p.kept.emplace_back(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  const cudnnHandle_t raw_handle = p.handle.get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &raw_handle);
  const cudnnBackendDescriptor_t raw_operation = operation.get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw_operation);
  graph.finalize();

  // The heuristic's ranked engine configurations, then the fallback's; the
  // first that cuDNN can plan here is the one timed, as a framework takes it.
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor& heuristics = p.kept.emplace_back(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (!heuristics.try_finalize()) continue;
    std::int64_t available = 0;
    check(cudnn().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                &available, nullptr),
          "cudnnBackendGetAttribute", "engine heuristics' result count");
    if (available == 0) continue;
    const std::size_t first = p.kept.size();
    std::vector<cudnnBackendDescriptor_t> configurations;
    for (std::int64_t i = 0; i < available; ++i) {
      configurations.push_back(p.kept.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration").get());
    }
    std::int64_t returned = 0;
    check(cudnn().get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                available, &returned, configurations.data()),
          "cudnnBackendGetAttribute", "engine heuristics' results");
    for (std::int64_t i = 0; i < returned && !p.execution_plan; ++i) {
      auto candidate = std::make_unique<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &raw_handle);
      candidate->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, p.kept[first + static_cast<std::size_t>(i)]);
      if (candidate->try_finalize()) p.execution_plan = std::move(candidate);
    }
    if (p.execution_plan) break;
  }
  if (!p.execution_plan) {
    throw std::runtime_error("cuDNN " + cudnn_description() + " has no engine for this attention on this GPU");
  }
  std::int64_t workspace_bytes = 0, count = 0;
  check(cudnn().get_attribute(p.execution_plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                              &count, &workspace_bytes),
        "cudnnBackendGetAttribute", "execution plan's workspace size");

  const auto elements = static_cast<std::size_t>(shape.batch * shape.heads * shape.sequence * shape.head_dim);
  p.elements = elements;
  const auto rows = static_cast<std::size_t>(shape.batch * shape.heads * shape.sequence);
  p.q = std::make_unique<DeviceBuffer>(elements * 2);
  p.k = std::make_unique<DeviceBuffer>(elements * 2);
  p.v = std::make_unique<DeviceBuffer>(elements * 2);
  p.o = std::make_unique<DeviceBuffer>(elements * 2);
  p.stats = std::make_unique<DeviceBuffer>(rows * 4);
  p.workspace = std::make_unique<DeviceBuffer>(static_cast<std::size_t>(workspace_bytes));
  fill_random(CUDA_R_16BF, p.q->pointer, elements, 11);
  fill_random(CUDA_R_16BF, p.k->pointer, elements, 12);
  fill_random(CUDA_R_16BF, p.v->pointer, elements, 13);
  SHARDSIM_CUDA(cudaDeviceSynchronize());
  p.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));

  const std::array<std::int64_t, 6> uids{kQ, kK, kV, kO, kStats, kScale};
  const std::array<void*, 6> pointers{p.q->pointer, p.k->pointer, p.v->pointer, p.o->pointer, p.stats->pointer, &p.scale};
  p.variant_pack = std::make_unique<Descriptor>(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  p.variant_pack->set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<std::int64_t>(uids.size()), uids.data());
  p.variant_pack->set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<std::int64_t>(pointers.size()),
                      pointers.data());
  void* workspace = p.workspace->pointer;
  p.variant_pack->set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  p.variant_pack->finalize();
}

FusedAttention::~FusedAttention() = default;

void FusedAttention::enqueue(cudaStream_t stream) const {
  check(cudnn().set_stream(plan_->handle.get(), stream), "cudnnSetStream", "SDPA forward");
  check(cudnn().execute(plan_->handle.get(), plan_->execution_plan->get(), plan_->variant_pack->get()),
        "cudnnBackendExecute", "SDPA forward");
}

FusedAttention::HostOperands FusedAttention::operands_on_host() const {
  SHARDSIM_CUDA(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> staging(plan_->elements);
  const auto copy = [&](const DeviceBuffer& from) {
    SHARDSIM_CUDA(cudaMemcpy(staging.data(), from.pointer, staging.size() * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    std::vector<float> values(staging.size());
    for (std::size_t i = 0; i < staging.size(); ++i) values[i] = __bfloat162float(staging[i]);
    return values;
  };
  return {copy(*plan_->q), copy(*plan_->k), copy(*plan_->v), copy(*plan_->o)};
}

std::string cudnn_description() {
  try {
    const std::size_t version = cudnn().get_version();
    return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
           std::to_string(version % 100) + " (" + kCudnnLibrary + ")";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

bool cudnn_available() {
  try {
    cudnn();
    return true;
  } catch (const std::runtime_error&) {
    return false;
  }
}

#else  // built without cuDNN's headers

struct FusedAttention::Plan {};

FusedAttention::FusedAttention(const AttentionShape&) {
  throw std::runtime_error(cudnn_description());
}
FusedAttention::~FusedAttention() = default;
void FusedAttention::enqueue(cudaStream_t) const {}
FusedAttention::HostOperands FusedAttention::operands_on_host() const { return {}; }
std::string cudnn_description() { return "this build found no cuDNN headers (cudnn_graph.h) beside CUDA's"; }
bool cudnn_available() { return false; }

#endif

}  // namespace shardsim::calib
