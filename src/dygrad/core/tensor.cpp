// Tensor metadata, host access (sync points) and the autograd accessors.
#include "dygrad/core/tensor.h"

#include "dygrad/autograd/engine.h"
#include "dygrad/autograd/node.h"
#include "dygrad/runtime/error.h"
#include "dygrad/runtime/stream.h"

namespace dg {

TensorImpl::TensorImpl(Ref<Storage> storage_, Dims sizes_, Dims strides_, int64_t offset_, DType dtype_)
    : storage(std::move(storage_)), sizes(std::move(sizes_)), strides(std::move(strides_)), offset(offset_),
      numel(shape_numel(sizes)), dtype(dtype_) {}

TensorImpl::~TensorImpl() = default;

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

Tensor Tensor::empty(IntSpan shape, DType dtype, Device device) {
  Dims sizes(shape);
  Dims strides;
  strides.resize(sizes.size(), 1);
  int64_t n = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    const int64_t s = sizes[i];
    DG_CHECK(s >= 0, Value, "[empty] negative dimension ", s, " in shape ", shape);
    strides[i] = n == 0 ? 1 : n;
    DG_CHECK(s == 0 || n <= (int64_t{1} << 50) / s, Runtime, "[empty] shape ", shape, " is too large");
    n *= s;
  }
  if (n == 0) strides = contiguous_strides(shape);
  auto storage = Storage::allocate(static_cast<size_t>(n) * dg::itemsize(dtype), device);
  return Tensor(make_ref<TensorImpl>(std::move(storage), std::move(sizes), std::move(strides), 0, dtype));
}

Tensor Tensor::empty_strided(IntSpan shape, Dims strides, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  if (out.numel() > 0) out.impl_->strides = std::move(strides);
  return out;
}

Tensor Tensor::make_view(const Tensor& base, Dims sizes, Dims strides, int64_t offset) {
  auto impl = make_ref<TensorImpl>(base.impl_->storage, std::move(sizes), std::move(strides), offset, base.dtype());
  impl->is_view = true;
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

void Tensor::wait_readable() const {
  Stream& stream = Stream::cpu();
  stream.wait_for(storage().last_write_seq());
  if (uint64_t bad = storage().poisoned_by())
    fail(ErrorKind::Runtime, "tensor data is invalid: it was produced after a failed op: ", stream.failure_message(bad));
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  wait_readable();
  std::vector<T> out;
  out.reserve(static_cast<size_t>(numel()));
  visit_dtype(dtype(), [&]<typename S>() {
    const S* base = data<S>();
    Dims index(static_cast<size_t>(dim()), 0);
    for (int64_t n = 0; n < numel(); ++n) {
      int64_t off = 0;
      for (size_t d = 0; d < index.size(); ++d) off += index[d] * impl_->strides[d];
      S v = base[off];
      if constexpr (std::is_same_v<T, bool>) out.push_back(static_cast<float>(v) != 0.0f);
      else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) out.push_back(static_cast<T>(static_cast<float>(v)));
      else out.push_back(static_cast<T>(v));
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < impl_->sizes[d]) break;
        index[d] = 0;
      }
    }
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

Scalar Tensor::item_scalar() const {
  DG_CHECK(numel() == 1, Runtime, "[item] a Tensor with ", numel(), " elements cannot be converted to Scalar");
  wait_readable();
  return visit_dtype(dtype(), [&]<typename S>() -> Scalar {
    S v = *data<S>();
    if constexpr (std::is_same_v<S, bool>) return Scalar(v);
    else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16> || std::is_floating_point_v<S>)
      return Scalar(static_cast<double>(static_cast<compute_t<S>>(v)));
    else return Scalar(static_cast<int64_t>(v));
  });
}

template <typename T>
T Tensor::item() const { return item_scalar().to<T>(); }
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

// --- autograd accessors ------------------------------------------------------------------------------------
bool Tensor::requires_grad() const { return impl_->autograd && impl_->autograd->requires_grad; }

Tensor& Tensor::set_requires_grad(bool value) {
  DG_CHECK(!value || is_floating(dtype()), Runtime,
           "[requires_grad_] only Tensors of floating point dtype can require gradients, got ", dtype_name(dtype()));
  DG_CHECK(is_leaf() || value, Runtime,
           "[requires_grad_] you can only change requires_grad flags of leaf variables");
  if (!impl_->autograd) {
    if (!value) return *this;
    impl_->autograd = std::make_unique<AutogradMeta>();
  }
  impl_->autograd->requires_grad = value;
  return *this;
}

bool Tensor::is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  if (g.defined()) {
    DG_CHECK(std::equal(g.shape().begin(), g.shape().end(), shape().begin(), shape().end()), Runtime,
             "[grad] assigned grad has shape ", g.shape(), " but the tensor has shape ", shape());
  }
  impl_->autograd->grad = g;
}

Ref<Node> Tensor::grad_fn() const { return impl_->autograd ? impl_->autograd->grad_fn : Ref<Node>(); }

void Tensor::retain_grad() {
  DG_CHECK(requires_grad(), Runtime, "[retain_grad] can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf()) return;
  if (impl_->autograd->retains_grad) return;
  impl_->autograd->retains_grad = true;
  Node& node = *impl_->autograd->grad_fn;
  if (node.retained_outputs.size() < node.num_outputs) node.retained_outputs.resize(node.num_outputs);
  node.retained_outputs[impl_->autograd->output_nr] = impl_;
}

void Tensor::register_hook(TensorHook hook) {
  DG_CHECK(requires_grad(), Runtime,
           "[register_hook] cannot register a hook on a tensor that doesn't require gradient");
  if (is_leaf()) {
    impl_->autograd->leaf_hooks.push_back(std::move(hook));
    return;
  }
  Node& node = *impl_->autograd->grad_fn;
  if (node.output_hooks.size() < node.num_outputs) node.output_hooks.resize(node.num_outputs);
  node.output_hooks[impl_->autograd->output_nr].push_back(std::move(hook));
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  Tensor roots[1] = {*this};
  Tensor grads[1] = {gradient};
  dg::backward(roots, grads, retain_graph, create_graph);
}

}  // namespace dg
