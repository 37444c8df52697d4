// The poisoned-input rule's bookkeeping (docs/async-errors.md), shared by the stream (runtime/stream.cpp) and by the
// Tasks that run several kernels in one (dygrad.jit's replays and segments, jit/graph.cpp), which apply it per
// sub-op.
#pragma once
#include "dygrad/runtime/op_def.h"

namespace dg {

// Some input of `task` is a view of t's storage.
inline bool task_reads_storage(const Task& task, const Tensor& t) {
  for (const Tensor& in : task.inputs)
    if (in.defined() && in.shares_storage(t)) return true;
  return false;
}

// The kernel writing `out` writes every element of its storage: a tensor that is not a view (it owns its storage) or
// a dense view of all of it.
inline bool covers_storage(const Tensor& out) {
  if (!out.is_view()) return true;
  return out.storage_offset() == 0 && out.is_contiguous() &&
         static_cast<size_t>(out.numel()) * out.itemsize() == out.storage().nbytes();
}

// After `task`'s kernel ran without failing: a buffer it overwrote completely without reading it is valid again
// (fill_, zero_, copy_ into a whole tensor); poison is cleared by a full overwrite, never by a partial one.
inline void clear_poison_of_overwritten(Task& task) {
  for (Tensor& out : task.outputs)
    if (out.defined() && out.storage().poisoned_by() && covers_storage(out) && !task_reads_storage(task, out))
      out.storage().poison(0);
}

}  // namespace dg
