// Tensor metadata: factories of uninitialised tensors, views, sizes and strides. Host access (sync points)
// is defined in runtime/tensor_sync.cpp and the autograd accessors in autograd/tensor_autograd.cpp, the
// layers that own those concepts (docs/tensor.md, "Layers").
#include "dygrad/core/tensor.h"

#include <atomic>
#include <sstream>

#include "dygrad/core/error.h"
#include "dygrad/core/shape.h"
#include "dygrad/core/storage_only_flag.h"

namespace dg {

std::atomic<bool> detail::g_storage_only_dtype_seen{false};

bool storage_only_dtype_seen() { return detail::storage_only_dtype_seen_inline(); }

TensorImpl::TensorImpl(Ref<Storage> storage_, Dims sizes_, Dims strides_, int64_t offset_, DType dtype_)
    : storage(std::move(storage_)), sizes(std::move(sizes_)), strides(std::move(strides_)), offset(offset_),
      numel(shape_numel(sizes)), dtype(dtype_) {
  if (is_storage_only(dtype_)) [[unlikely]] detail::g_storage_only_dtype_seen.store(true, std::memory_order_relaxed);
}

TensorImpl::~TensorImpl() {
  if (storage_ref_is_task_ref.load(std::memory_order_acquire)) storage.reset_task_ref();
}

void TensorImpl::on_only_task_refs() const {
  // Nothing outside the stream can reach this tensor again, and a kernel reads only its storage and geometry:
  // the host-side bookkeeping goes now, as it would in synchronize mode - its autograd metadata (a grad_fn and the
  // tensors that node saved) and a view's hold on its base (which would keep the base's buffer).
  auto* self = const_cast<TensorImpl*>(this);
  self->autograd.reset();
  self->view_base.reset();
  if (!storage) return;
  storage_ref_is_task_ref.store(true, std::memory_order_release);
  storage->mark_task_ref();
}


int64_t shape_numel(IntSpan shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Dims contiguous_strides(IntSpan shape) {
  Dims strides(shape.size(), 1);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-dim tensor accepts dim 0 and -1, as torch does
  DG_CHECK(dim >= -n && dim < n, Index, "[", op, "] dimension out of range (expected to be in range of [", -n,
           ", ", n - 1, "], but got ", dim, ")");
  return dim < 0 ? dim + n : dim;
}

Tensor Tensor::empty(IntSpan shape, DType dtype, Device device, const char* op) {
  const int64_t n = checked_numel(op, shape);
  const int64_t nbytes = checked_nbytes(op, shape, n, dg::itemsize(dtype));
  Dims sizes(shape);
  Dims strides = contiguous_strides(shape);  // no overflow: the product of the sizes fits in int64
  auto storage = Storage::allocate(static_cast<size_t>(nbytes), device);
  if (allocation_tracking()) [[unlikely]] {  // a memory limit or history: name the buffer (docs/memory.md)
    std::ostringstream d;
    d << "[";
    for (size_t i = 0; i < shape.size(); ++i) d << (i ? ", " : "") << shape[i];
    d << "] " << dtype_name(dtype);
    storage->annotate(d.str().c_str());
  }
  return Tensor(make_ref<TensorImpl>(std::move(storage), std::move(sizes), std::move(strides), 0, dtype));
}

Tensor Tensor::empty_strided(IntSpan shape, Dims strides, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  if (out.numel() > 0) out.impl_->strides = std::move(strides);
  return out;
}

Tensor Tensor::make_view(const Tensor& base, Dims sizes, Dims strides, int64_t offset, const char* op) {
  check_view_bounds(op, sizes, strides, offset, static_cast<int64_t>(base.storage().nbytes() / base.itemsize()));
  auto impl = make_ref<TensorImpl>(base.impl_->storage, std::move(sizes), std::move(strides), offset, base.dtype());
  impl->is_view = true;
  const TensorImpl& from = *base.impl_;
  impl->view_base = from.view_base ? from.view_base : base.impl_;
  impl->view_version = from.storage->version();
  // A view of a no-grad or multi-output view keeps its creation mode (torch's propagate_creation_meta).
  impl->view_creation = from.view_base && from.view_creation != ViewCreation::Default ? from.view_creation
                                                                                       : current_view_creation();
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes[wrap_dim("size", d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim("stride", d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = impl_->sizes.size(); i-- > 0;) {
    int64_t s = impl_->sizes[i];
    if (s == 1) continue;
    if (impl_->strides[i] != expected) return impl_->numel == 0;
    expected *= s;
  }
  return true;
}

}  // namespace dg
