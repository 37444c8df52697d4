// Helpers every op implementation uses: build a Task, enqueue it, and the common validation.
#pragma once
#include <functional>
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

// An observer of the ops issued on this thread (selective recompute, docs/recompute.md): called at each enqueue
// with the op and its operands before the Task is submitted; when it returns true the Task is not submitted
// (the observer has given the outputs their values, e.g. by adopting the storage of a cached result). Ops the
// observer itself issues are not observed. Null by default: enqueue then pays one thread-local test.
using OpObserver = std::function<bool(const OpDef& op, std::span<const Tensor> inputs,
                                      std::span<const Tensor> outputs)>;
void set_op_observer(OpObserver observer);  // an empty function removes it
bool has_op_observer();

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
