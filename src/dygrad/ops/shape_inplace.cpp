// torch's in-place metadata ops (t_, transpose_, squeeze_, unsqueeze_, as_strided_, detach_, resize_): the tensor's
// own TensorImpl takes new sizes, strides and offset. See docs/tensor.md, "Metadata changed in place".
#include "dygrad/ops/shape_inplace.h"

#include "dygrad/autograd/node.h"
#include "dygrad/core/error.h"
#include "dygrad/core/shape.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/stream.h"

namespace dg {

namespace {
// A queued Task holds its operands' TensorImpls, not copies of their metadata, and its kernel reads sizes and
// strides when it runs: before they change, every Task enqueued so far on the tensor's stream has run. Only a
// tensor that a Task still holds waits (its task references: core/ref.h); the wait raises nothing (a deferred
// error stays for the next sync point).
void wait_for_tasks_holding(const Tensor& t) {
  if (t.impl()->task_use_count() == 0) return;
  Stream& stream = Stream::of(t.device());
  stream.wait_until_run(stream.enqueued());
}

void set_metadata(const Tensor& t, Dims sizes, Dims strides, int64_t offset) {
  wait_for_tasks_holding(t);
  TensorImpl& impl = *t.impl();
  impl.numel = shape_numel(sizes);
  impl.sizes = std::move(sizes);
  impl.strides = std::move(strides);
  impl.offset = offset;
}
}  // namespace

void assign_view_in_place(const char* op, const Tensor& t, const Tensor& view) {
  check_inplace(op, t);
  TensorImpl& impl = *t.impl();
  if (!view.same(t)) set_metadata(t, Dims(view.impl()->sizes), Dims(view.impl()->strides), view.storage_offset());
  t.storage().bump_version();
  // t keeps its own view status (a view stays a view of the same base; a base does not become a view of itself);
  // its history is now the view op's, computed at this version.
  if (impl.view_base) impl.view_version = t.version();
  const AutogradMeta* recorded = view.same(t) ? nullptr : view.impl()->autograd.get();
  if (recorded && recorded->grad_fn) {
    const bool retained = impl.autograd && impl.autograd->retains_grad;
    set_history(t, recorded->grad_fn, recorded->output_nr);
    if (retained) Tensor(t).retain_grad();
  }
}

void t_(const Tensor& t) {
  check_defined("t_", t);
  DG_CHECK(t.dim() <= 2, Runtime, "[t_] t_() expects a tensor with <= 2 dimensions, but self is ", t.dim(), "D");
  assign_view_in_place("t_", t, t.dim() < 2 ? t : transpose(t, 0, 1));
}

void transpose_(const Tensor& t, int64_t dim0, int64_t dim1) {
  check_defined("transpose_", t);
  assign_view_in_place("transpose_", t, transpose(t, dim0, dim1));
}

void unsqueeze_(const Tensor& t, int64_t dim) {
  check_defined("unsqueeze_", t);
  assign_view_in_place("unsqueeze_", t, unsqueeze(t, dim));
}

void as_strided_(const Tensor& t, IntSpan sizes, IntSpan strides, std::optional<int64_t> storage_offset) {
  check_defined("as_strided_", t);
  const int64_t offset = storage_offset.value_or(t.storage_offset());
  DG_CHECK(sizes.size() == strides.size(), Runtime, "[as_strided_] mismatch in length of strides and shape");
  for (int64_t s : strides)
    DG_CHECK(s >= 0, Runtime, "[as_strided_] Negative strides are not supported at the moment, got strides: ",
             strides);
  DG_CHECK(offset >= 0, Runtime, "[as_strided_] Tensor: invalid storage offset ", offset);
  DG_CHECK(!(grad_enabled() && t.requires_grad() && !t.is_leaf()), NotImplemented, "[as_strided_] has no backward in "
           "dygrad: call it under no_grad or on a tensor that does not require grad");
  int64_t last = offset;  // the last element the view reaches, when it has any
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    DG_CHECK(sizes[d] >= 0, Runtime, "[as_strided_] Trying to create tensor with negative dimension ", sizes[d], ": ",
             sizes);
    if (sizes[d] == 0) empty = true;
    else last += (sizes[d] - 1) * strides[d];
  }
  const int64_t storage_elements = static_cast<int64_t>(t.storage().nbytes() / t.itemsize());
  DG_CHECK(empty || last < storage_elements, Runtime, "[as_strided_] setStorage: sizes ", sizes, ", strides ",
           strides, ", storage offset ", offset, ", and itemsize ", t.itemsize(), " requiring a storage size of ",
           (last + 1) * static_cast<int64_t>(t.itemsize()), " are out of bounds for storage of size ",
           t.storage().nbytes());
  check_inplace("as_strided_", t);
  set_metadata(t, Dims(sizes), Dims(strides), offset);
  t.storage().bump_version();
  if (t.impl()->view_base) t.impl()->view_version = t.version();
}

void detach_(const Tensor& t) {
  check_defined("detach_", t);
  DG_CHECK(!t.impl()->view_base, Runtime, "[detach_] Can't detach views in-place. Use detach() instead. If you are "
           "using DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set as True, gradients "
           "are views of DDP buckets, and hence detach_() cannot be called on these gradients. To fix this error, "
           "please refer to the Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution.");
  AutogradMeta* meta = t.impl()->autograd.get();
  if (!meta) return;
  forget_retained(t.impl(), *meta);
  meta->requires_grad = false;
  meta->grad_fn = Ref<Node>();
  meta->output_nr = 0;
  meta->retains_grad = false;
}

void resize_(const Tensor& t, IntSpan shape) {
  check_defined("resize_", t);
  DG_CHECK(!t.requires_grad(), Runtime, "[resize_] cannot resize variables that require grad");
  if (same_shape(t.shape(), shape)) return;  // torch's: nothing changes, not even the strides or the version
  Dims sizes(shape);
  const int64_t numel = checked_numel("resize_", sizes);
  checked_nbytes("resize_", sizes, numel, t.itemsize());
  const int64_t offset = t.storage_offset();
  const size_t needed = static_cast<size_t>(numel == 0 ? 0 : offset + numel) * t.itemsize();
  wait_for_tasks_holding(t);
  if (needed > t.storage().nbytes()) {
    // Every Task of the stream may use the storage through some view: they all run before the memory moves.
    Stream& stream = Stream::of(t.device());
    stream.wait_until_run(stream.enqueued());
    t.storage().grow(needed, "resize_");
  }
  Dims strides = contiguous_strides(sizes);
  set_metadata(t, std::move(sizes), std::move(strides), offset);
  t.storage().bump_version();
  if (t.impl()->view_base) t.impl()->view_version = t.version();
}

}  // namespace dg
