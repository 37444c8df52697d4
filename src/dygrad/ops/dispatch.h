// Helpers every op implementation uses: build a Task, enqueue it, and the common validation.
#pragma once
#include <initializer_list>

#include "dygrad/autograd/node.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/stream.h"

namespace dg {

// Enqueues `op` on the stream of the inputs' device. Outputs must already be allocated.
uint64_t enqueue(const OpDef& op, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
                 const Attrs& attrs = Attrs());
uint64_t enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                 const Attrs& attrs = Attrs());

// Enqueues a Task without operands that runs a batch of sub-ops (dygrad.jit's jit_graph and jit_segment, jit/graph.h)
// on `device`'s stream, after another stream's event `wait` (0: none; Stream::fold_wait folds the sub-ops' operands'
// events into one). It passes the op sinks as enqueue does.
uint64_t enqueue_batch(Device device, const OpDef& op, const Attrs& attrs, uint64_t wait);

// The device whose stream runs a Task: its operands' (resolve_kernel checks they agree), or for a copy between devices
// (kOpCrossDevice) the first operand not on the CPU, inputs first (docs/devices.md).
Device task_device(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);

// Every op passes through the calling thread's chain of op sinks first (runtime/op_sink.h): selective recompute's
// cache, meta evaluation and the profiler's op recording are sinks; one that consumes the op takes the stream's place.

// Enqueues `op` on `a` into new values (of `shape`, a's dtype) and int64 indices, and records its Node on the values
// (attributes copied, the indices saved): max/min over a dim, sort, topk.
ValuesIndices enqueue_values_indices(const OpDef& op, const Tensor& a, IntSpan shape, const Attrs& attrs);

// Raises unless every tensor is defined and on the same device.
void check_defined(const char* op, const Tensor& t, const char* argument = "input");
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
// Raises unless `dtype` is floating ("[op] expected a floating point tensor, got int64").
void check_floating(const char* op, const Tensor& t);

// Shape equality for spans.
inline bool same_shape(IntSpan a, IntSpan b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

// The name errors give the op the user called. The C++ op functions pass their own ("sub", "add_"); a binding
// whose Python name differs (`x += 1` calls add_ as Tensor.__iadd__) sets a scope for the call, and ops that
// validate with api_name() then say "[Tensor.__iadd__] ..." (docs/async-errors.md, "Error messages").
const char* api_name(const char* own_name);
class ApiNameScope {
 public:
  explicit ApiNameScope(const char* name);
  ~ApiNameScope();
  ApiNameScope(const ApiNameScope&) = delete;
  ApiNameScope& operator=(const ApiNameScope&) = delete;

 private:
  const char* saved_;
};

// For in-place ops and writes into existing tensors: the write happens after everything enqueued so far,
// and when the destination aliases memory owned elsewhere (NumPy), it has finished when the call returns.
void finish_write_if_external(const Tensor& dst, uint64_t seq);

}  // namespace dg
