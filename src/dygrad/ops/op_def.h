// The op table's record (OpDef) and the unit of work (Task). Every op is data: one OpDef per op with its
// kernels, backward formula, cost model and traits; the same Task is what the stream runs, the profiler
// names and the JIT records. See docs/ops.md for what makes a Task traceable.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "dygrad/core/dtype.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/core/tensor.h"

namespace dg {

struct Task;
class Node;

enum class FusionClass : uint8_t { Elementwise, Reduction, Matmul, Shape, Opaque };

// Op traits the executor, profiler and JIT read.
enum OpFlag : uint32_t {
  kOpSyncs = 1u << 0,                 // reads results on the host (a JIT graph must end before it)
  kOpDataDependentShape = 1u << 1,    // output shape depends on input values
  kOpRandom = 1u << 2,                // consumes RNG counters (seed and offset are attributes)
  kOpInplace = 1u << 3,               // output 0 aliases input 0
  kOpNondeterministic = 1u << 4,      // has a faster path that is not bitwise reproducible
};

// Scalars and integer lists a Task carries. Ops document which slots they use.
struct Attrs {
  Scalar scalars[4];
  Dims ints;            // dims to reduce, permutation, split sizes...
  int64_t i[4] = {0, 0, 0, 0};
  uint64_t rng_seed = 0, rng_offset = 0;
};

struct OpCost {
  double flops = 0;  // floating-point operations (a fused multiply-add counts 2)
  double bytes = 0;  // bytes read and written
};

// Where an op was issued: set by the caller (the Python binding records its frame; C++ users may set
// a scope), reported with a deferred kernel error.
struct CallSite {
  const char* file = nullptr;
  const char* function = nullptr;
  uint32_t line = 0;
};
CallSite current_call_site();
class CallSiteScope {
 public:
  explicit CallSiteScope(CallSite site);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  CallSite saved_;
};

using CpuKernel = void (*)(Task& task);
// Computes the gradients of a node's inputs from the gradients of its outputs, with dygrad ops (so
// backward is async and traceable too). grad_inputs has one slot per input; fill those node.needs_grad(i).
using BackwardFn = void (*)(Node& node, std::span<const Tensor> grad_outputs, std::span<Tensor> grad_inputs);
using CostFn = OpCost (*)(const Task& task);
using ScratchFn = size_t (*)(const Task& task);  // scratch bytes a kernel needs beyond its outputs

struct OpDef {
  const char* name;
  FusionClass fusion = FusionClass::Opaque;
  CpuKernel cpu = nullptr;     // null: no CPU kernel (an explicit error, never a fallback)
  BackwardFn backward = nullptr;
  CostFn cost = nullptr;       // null: flops = output elements, bytes = inputs + outputs
  uint32_t flags = 0;
  ScratchFn scratch = nullptr;

  OpDef(const char* name_, FusionClass fusion_, CpuKernel cpu_, BackwardFn backward_ = nullptr,
        CostFn cost_ = nullptr, uint32_t flags_ = 0, ScratchFn scratch_ = nullptr);
  OpDef(const OpDef&) = delete;
  OpDef& operator=(const OpDef&) = delete;
};

// Every OpDef registers itself here at static initialisation: the one table.
const std::vector<const OpDef*>& all_ops();
const OpDef* find_op(const char* name);

struct Task {
  const OpDef* op = nullptr;
  SmallVector<Tensor, 4> inputs;
  SmallVector<Tensor, 2> outputs;
  Attrs attrs;
  uint64_t seq = 0;  // position on the stream, 1-based
  CallSite site;

  OpCost cost() const;
};

}  // namespace dg
