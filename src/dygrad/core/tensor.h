// Tensor: a handle to a TensorImpl, which is view metadata (sizes, strides, offset, dtype) over a shared
// Storage, plus autograd metadata. Views share the storage and never copy. See docs/tensor.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dygrad/core/device.h"
#include "dygrad/core/dtype.h"
#include "dygrad/core/object_pool.h"
#include "dygrad/core/ref.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/core/storage.h"

namespace dg {

struct AutogradMeta;  // autograd/node.h
// Frees an AutogradMeta (defined in autograd/, where the type is complete): core needs no autograd header.
struct AutogradMetaDeleter {
  void operator()(AutogradMeta* meta) const;
};
class Node;
class Tensor;

// How a view was made, for the in-place-on-view rules (torch's CreationMeta; docs/autograd.md, "In-place on
// views"): an in-place op that needs grad on a NoGrad or MultiOutput view raises, as in torch.
enum class ViewCreation : uint8_t { Default, NoGrad, MultiOutput };
// The creation mode of a view made now: NoGrad while grad mode is off. Defined in autograd/views.cpp.
ViewCreation current_view_creation();

// Whether a tensor of a storage-only dtype (uint32, uint64, float8: core/dtype.h) was ever made in this process.
// Until one is, enqueue skips its operand dtype check (docs/dtypes.md, "Storage-only dtypes").
bool storage_only_dtype_seen();

class TensorImpl : public RefCounted {
 public:
  TensorImpl(Ref<Storage> storage, Dims sizes, Dims strides, int64_t offset, DType dtype);
  ~TensorImpl() override;
  DG_POOLED_ALLOCATION(TensorImpl)
  // Every holder left is a queued Task: so is this impl's hold on its storage (core/ref.h).
  void on_only_task_refs() const override;

  Ref<Storage> storage;
  Dims sizes;
  Dims strides;           // in elements; 0 for broadcast dims
  int64_t offset = 0;     // in elements
  int64_t numel = 0;
  DType dtype = DType::Float32;
  bool is_view = false;   // shares its storage with the tensor it was made from
  // A view's root base (the tensor its view chain started from; null for a tensor that is no view of another),
  // the storage version its grad_fn was computed at, and how it was made: an in-place op on the view, or on
  // its base, rebases the history through the base (docs/autograd.md, "In-place on views").
  Ref<TensorImpl> view_base;
  uint32_t view_version = 0;
  ViewCreation view_creation = ViewCreation::Default;
  std::unique_ptr<AutogradMeta, AutogradMetaDeleter> autograd;  // null until autograd needs it
  void* python_object = nullptr;           // borrowed back-pointer owned by the Python binding
  mutable std::atomic<bool> storage_ref_is_task_ref{false};  // set by on_only_task_refs
};

using TensorHook = std::function<Tensor(const Tensor&)>;
// Called with the leaf once its .grad holds the accumulated gradient (register_post_accumulate_grad_hook).
using PostAccumulateHook = std::function<void(const Tensor&)>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A new contiguous tensor; its contents are undefined until an op writes them.
  // The shape is validated (core/shape.h, checked_numel and checked_nbytes); errors name `op`.
  static Tensor empty(IntSpan shape, DType dtype = DType::Float32, Device device = Device::cpu(),
                      const char* op = "empty");
  // A new tensor with the given dense strides (a permutation of the contiguous ones, as dense_strides
  // returns): the output of an op laid out like its inputs. Not a view.
  static Tensor empty_strided(IntSpan shape, Dims strides, DType dtype = DType::Float32, Device device = Device::cpu());
  // A view of `base`'s storage with the given metadata (no copy; bounds checked by the caller).
  // Validated by check_view_bounds (core/shape.h): negative sizes, an overflowing element count, or a view
  // reaching outside the storage raise naming `op`.
  static Tensor make_view(const Tensor& base, Dims sizes, Dims strides, int64_t offset, const char* op = "view");

  // A borrowed handle, for a scope that `t` (held by the caller) outlives: made without raising the
  // reference count and ended with forget_borrowed() instead of the destructor's release. It saves an
  // atomic increment and decrement per operand on the stream's inline path (docs/stream.md).
  static Tensor borrow(const Tensor& t) { return Tensor(Ref<TensorImpl>::adopt(t.impl())); }
  void forget_borrowed() { impl_.release_ownership(); }
  // A queued Task's reference to `t` (the stream's slots; core/ref.h), ended with reset_task_ref().
  static Tensor task_ref(const Tensor& t) {
    if (t.impl_) t.impl_->retain_for_task();
    return Tensor(Ref<TensorImpl>::adopt(t.impl_.get()));
  }
  void mark_task_ref() const { if (impl_) impl_->mark_task_ref(); }
  void reset_task_ref() { impl_.reset_task_ref(); }

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const Ref<TensorImpl>& impl_ref() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  IntSpan shape() const { return impl_->sizes; }
  IntSpan strides() const { return impl_->strides; }
  int64_t dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
  int64_t numel() const { return impl_->numel; }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  size_t itemsize() const { return dg::itemsize(impl_->dtype); }
  int64_t storage_offset() const { return impl_->offset; }
  Storage& storage() const { return *impl_->storage; }
  bool is_contiguous() const;
  bool is_view() const { return impl_->is_view; }
  bool shares_storage(const Tensor& o) const { return impl_->storage.get() == o.impl_->storage.get(); }
  uint32_t version() const { return impl_->storage->version(); }

  // Raw data pointers for kernels (no synchronisation: only Tasks on the stream may use them).
  [[gnu::always_inline]] void* raw_data() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * static_cast<int64_t>(itemsize());
  }
  template <typename T> [[gnu::always_inline]] T* data() const { return static_cast<T*>(raw_data()); }

  // Host access: waits for the Task that last writes this tensor's storage (a sync point: a deferred
  // kernel error is raised here) and checks that the data is valid.
  void wait_readable() const;
  template <typename T> T item() const;        // one-element tensors; converts to T
  Scalar item_scalar() const;
  template <typename T> std::vector<T> to_vector() const;  // row-major copy, converted to T

  // Autograd.
  bool requires_grad() const;
  Tensor& set_requires_grad(bool value);  // leaves only, floating dtypes only
  bool is_leaf() const;
  Tensor grad() const;
  void set_grad(const Tensor& g);
  Ref<Node> grad_fn() const;
  void retain_grad();
  void register_hook(TensorHook hook);
  // Leaves only: hook(leaf) after each backward has accumulated into leaf.grad; returns an id for remove.
  uint64_t register_post_accumulate_grad_hook(PostAccumulateHook hook);
  void remove_post_accumulate_grad_hook(uint64_t id);
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;

  std::string str() const;  // torch-like text: tensor([[1., 2.], ...], dtype=...)

 private:
  Ref<TensorImpl> impl_;
};

// Contiguous strides for a shape, in elements.
Dims contiguous_strides(IntSpan shape);
int64_t shape_numel(IntSpan shape);
// Wraps a possibly negative dim into [0, ndim); raises IndexError naming `op` if out of range.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

}  // namespace dg
