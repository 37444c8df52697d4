// View ops: metadata only (no Task is enqueued), each with a backward that maps the gradient back.
// Slicing views (narrow, slice, select) send the gradient back as zeros of the input's shape with the
// gradient copied into the same view; that placement is itself differentiable (its backward is the view).
#include "dygrad/ops/shape.h"

#include <algorithm>
#include <optional>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg {

namespace {
// Records `out` as a view of `a` with the given backward, when a requires grad.
void record_view(const char* name, BackwardFn backward, const Tensor& a, const Tensor& out, const Attrs& attrs = Attrs()) {
  if (!needs_grad_any({a})) return;
  Ref<Node> node = make_ref<Node>(std::string(name), backward, 1);
  node->attrs = attrs;
  Tensor inputs[1] = {a}, outputs[1] = {out};
  record_node(node, inputs, outputs);
}

// torch's computeStride: strides for viewing (old_shape, old_strides) as new_shape, if possible.
std::optional<Dims> view_strides(IntSpan old_shape, IntSpan old_strides, IntSpan new_shape) {
  Dims new_strides(new_shape.size(), 0);
  if (old_shape.empty()) return Dims(new_shape.size(), 1);
  if (shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

void reshape_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  gi[0] = reshape(g[0], n.input_meta[0].shape);
}
void expand_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  gi[0] = sum_to(g[0], n.input_meta[0].shape);
}
// The permute node's attributes: the permutation.
struct PermuteAttrs {
  static constexpr const char* kName = "PermuteAttrs";
  Dims dims;
  DG_ATTRS_FIELDS(dims);
};
void permute_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Dims& dims = n.attrs.get<PermuteAttrs>().dims;
  Dims inverse(dims.size(), 0);
  for (size_t i = 0; i < dims.size(); ++i) inverse[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
  gi[0] = permute(g[0], inverse);
}

// --- slicing views and their gradient placement ----------------------------------------------------------
// A slicing view as data: step == 0 marks select(dim, index), otherwise slice(dim, start, start + length * step,
// step) with length = the gradient's size along dim.
struct SlicingAttrs {
  static constexpr const char* kName = "SlicingAttrs";
  int64_t dim = 0, start = 0, step = 0, index = 0;
  DG_ATTRS_FIELDS(dim, start, step, index);
};
Attrs slicing_attrs(int64_t dim, int64_t start, int64_t step, int64_t index) {
  return SlicingAttrs{dim, start, step, index};
}

// The view of a tensor shaped like the slicing view's input that the attrs describe; `length` is the
// view's size along dim (ignored for select).
Tensor apply_slicing(const Tensor& t, const Attrs& attrs, int64_t length) {
  const SlicingAttrs& s = attrs.get<SlicingAttrs>();
  const int64_t dim = s.dim, start = s.start, step = s.step;
  if (step == 0) return select(t, dim, s.index);
  return slice(t, dim, start, start + length * step, step);
}

void place_gradient_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);

// zeros(shape) with `g` copied into the slicing view: the gradient of the view's input.
Tensor place_gradient(const Tensor& g, IntSpan input_shape, const Attrs& attrs) {
  Tensor out = zeros(input_shape, {.dtype = g.dtype(), .device = g.device()});
  {
    NoGradGuard no_grad;
    const SlicingAttrs& s = attrs.get<SlicingAttrs>();
    const int64_t length = s.step == 0 ? 1 : g.size(s.dim);
    Tensor target = apply_slicing(out, attrs, length);
    copy_(target, g);
  }
  if (needs_grad_any({g})) {  // create_graph: the placement's own backward is the view again
    Ref<Node> node = make_ref<Node>(std::string("slice_backward"), place_gradient_backward, 1);
    node->attrs = attrs;
    Tensor inputs[1] = {g}, outputs[1] = {out};
    record_node(node, inputs, outputs);
  }
  return out;
}

void place_gradient_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const SlicingAttrs& s = n.attrs.get<SlicingAttrs>();
  const int64_t length = s.step == 0 ? 1 : n.input_meta[0].shape[static_cast<size_t>(s.dim)];
  gi[0] = apply_slicing(g[0], n.attrs, length);
}

void slicing_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  gi[0] = place_gradient(g[0], n.input_meta[0].shape, n.attrs);
}
}  // namespace

Dims infer_shape(const char* op, IntSpan shape, int64_t numel) {
  Dims out(shape);
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DG_CHECK(infer_at < 0, Runtime, "[", op, "] only one dimension can be inferred");
      infer_at = static_cast<int64_t>(i);
    } else {
      DG_CHECK(out[i] >= 0, Runtime, "[", op, "] invalid shape dimension ", out[i]);
      known *= out[i];
    }
  }
  if (infer_at >= 0) {
    DG_CHECK(known != 0 && numel % known == 0, Runtime, "[", op, "] shape '", shape_str(shape),
             "' is invalid for input of size ", numel);
    out[static_cast<size_t>(infer_at)] = numel / known;
  } else {
    DG_CHECK(known == numel, Runtime, "[", op, "] shape '", shape_str(shape), "' is invalid for input of size ", numel);
  }
  return out;
}

Tensor detach(const Tensor& a) {
  check_defined("detach", a);
  auto impl = make_ref<TensorImpl>(a.impl()->storage, a.impl()->sizes, a.impl()->strides, a.storage_offset(), a.dtype());
  impl->is_view = a.is_view();
  return Tensor(std::move(impl));
}

Tensor view_dtype(const Tensor& a, DType dtype) {
  check_defined("view", a);
  Dims sizes = a.impl()->sizes, strides = a.impl()->strides;
  int64_t offset = a.storage_offset();
  const int64_t from = static_cast<int64_t>(a.itemsize()), to = static_cast<int64_t>(itemsize(dtype));
  if (from != to) {
    const char *from_name = dtype_name(a.dtype()), *to_name = dtype_name(dtype);
    DG_CHECK(a.dim() > 0, Runtime, "[view] self.dim() cannot be 0 to view ", from_name, " as ", to_name,
             " (different element sizes)");
    DG_CHECK(strides.back() == 1, Runtime, "[view] self.stride(-1) must be 1 to view ", from_name, " as ", to_name,
             " (different element sizes), but got ", strides.back());
    if (to > from) {  // several elements become one: the last size, the other strides and the offset divide
      const int64_t ratio = to / from;
      DG_CHECK(sizes.back() % ratio == 0, Runtime, "[view] self.size(-1) must be divisible by ", ratio, " to view ",
               from_name, " as ", to_name, " (different element sizes), but got ", sizes.back());
      DG_CHECK(offset % ratio == 0, Runtime, "[view] self.storage_offset() must be divisible by ", ratio, " to view ",
               from_name, " as ", to_name, " (different element sizes), but got ", offset);
      for (size_t d = 0; d + 1 < strides.size(); ++d)
        DG_CHECK(strides[d] % ratio == 0, Runtime, "[view] self.stride(", static_cast<int64_t>(d), ") must be "
                 "divisible by ", ratio, " to view ", from_name, " as ", to_name, " (different element sizes), but got ",
                 strides[d]);
      sizes.back() /= ratio;
      for (size_t d = 0; d + 1 < strides.size(); ++d) strides[d] /= ratio;
      offset /= ratio;
    } else {  // one element becomes several
      const int64_t ratio = from / to;
      sizes.back() *= ratio;
      for (size_t d = 0; d + 1 < strides.size(); ++d) strides[d] *= ratio;
      offset *= ratio;
    }
  }
  auto impl = make_ref<TensorImpl>(a.impl()->storage, std::move(sizes), std::move(strides), offset, dtype);
  impl->is_view = true;
  return Tensor(std::move(impl));
}

Tensor storage_bytes(const Tensor& a) {
  check_defined("untyped_storage", a);
  auto impl = make_ref<TensorImpl>(a.impl()->storage, Dims{static_cast<int64_t>(a.storage().nbytes())}, Dims{1}, 0,
                                   DType::UInt8);
  impl->is_view = true;
  return Tensor(std::move(impl));
}

Tensor as_strided(const Tensor& a, IntSpan sizes, IntSpan strides, int64_t storage_offset) {
  check_defined("as_strided", a);
  DG_CHECK(sizes.size() == strides.size(), Value, "[as_strided] sizes ", sizes, " and strides ", strides,
           " must have the same length");
  int64_t max_index = storage_offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    DG_CHECK(sizes[i] >= 0 && strides[i] >= 0, Value, "[as_strided] negative size or stride in ", sizes, " / ", strides);
    if (sizes[i] == 0) { max_index = -1; break; }
    max_index += (sizes[i] - 1) * strides[i];
  }
  DG_CHECK(storage_offset >= 0 && (max_index < 0 || static_cast<size_t>(max_index + 1) * a.itemsize() <= a.storage().nbytes()),
           Value, "[as_strided] sizes ", sizes, " strides ", strides, " offset ", storage_offset,
           " reach outside the storage of ", a.storage().nbytes() / a.itemsize(), " elements");
  Tensor out = Tensor::make_view(a, Dims(sizes), Dims(strides), storage_offset, "as_strided");
  DG_CHECK(!needs_grad_any({a}), NotImplemented, "[as_strided] is for internal use and has no backward");
  return out;
}

Tensor view(const Tensor& a, IntSpan shape) {
  check_defined("view", a);
  Dims target = infer_shape("view", shape, a.numel());
  auto strides = view_strides(a.shape(), a.strides(), target);
  DG_CHECK(strides.has_value(), Runtime, "[view] size is not compatible with input tensor's size and stride (at least "
           "one dimension spans across two contiguous subspaces): input shape ", a.shape(), " strides ", a.strides(),
           ", view shape ", IntSpan(target), ". Use .reshape(...) instead");
  Tensor out = Tensor::make_view(a, std::move(target), std::move(*strides), a.storage_offset());
  record_view("view", reshape_backward, a, out);
  return out;
}

Tensor reshape(const Tensor& a, IntSpan shape) {
  check_defined("reshape", a);
  Dims target = infer_shape("reshape", shape, a.numel());
  if (auto strides = view_strides(a.shape(), a.strides(), target)) {
    Tensor out = Tensor::make_view(a, std::move(target), std::move(*strides), a.storage_offset());
    record_view("reshape", reshape_backward, a, out);
    return out;
  }
  return view(clone(a), target);
}

Tensor expand(const Tensor& a, IntSpan shape) {
  check_defined("expand", a);
  DG_CHECK(shape.size() >= static_cast<size_t>(a.dim()), Runtime, "[expand] the number of sizes provided (",
           shape.size(), ") must be greater or equal to the number of dimensions in the tensor (", a.dim(), ")");
  const size_t nd = shape.size(), lead = nd - static_cast<size_t>(a.dim());
  Dims sizes(nd, 0), strides(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    if (i < lead) {
      DG_CHECK(shape[i] >= 0, Runtime, "[expand] the expanded size ", shape[i], " is not allowed in a leading, "
               "non-existing dimension ", static_cast<int64_t>(i));
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    int64_t have = a.shape()[i - lead];
    int64_t want = shape[i] == -1 ? have : shape[i];
    DG_CHECK(have == want || have == 1, Runtime, "[expand] the expanded size of the tensor (", want,
             ") must match the existing size (", have, ") at non-singleton dimension ", static_cast<int64_t>(i),
             ". Target sizes: ", shape, ". Tensor sizes: ", a.shape());
    sizes[i] = want;
    strides[i] = have == want ? a.strides()[i - lead] : 0;
  }
  if (same_shape(sizes, a.shape())) return a;
  Tensor out = Tensor::make_view(a, std::move(sizes), std::move(strides), a.storage_offset(), "expand");
  record_view("expand", expand_backward, a, out);
  return out;
}

Tensor broadcast_to(const Tensor& a, IntSpan shape) { return expand(a, shape); }

Tensor permute(const Tensor& a, IntSpan dims) {
  check_defined("permute", a);
  DG_CHECK(static_cast<int64_t>(dims.size()) == a.dim(), Runtime, "[permute] number of dims don't match: input has ",
           a.dim(), " dims, permutation ", dims);
  Dims sizes(dims.size(), 0), strides(dims.size(), 0), wrapped(dims.size(), 0);
  SmallVector<bool, 8> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim("permute", dims[i], a.dim());
    DG_CHECK(!seen[static_cast<size_t>(d)], Runtime, "[permute] repeated dim ", d, " in permutation ", dims);
    seen[static_cast<size_t>(d)] = true;
    wrapped[i] = d;
    sizes[i] = a.shape()[d];
    strides[i] = a.strides()[d];
  }
  Tensor out = Tensor::make_view(a, std::move(sizes), std::move(strides), a.storage_offset());
  record_view("permute", permute_backward, a, out, PermuteAttrs{wrapped});
  return out;
}

Tensor transpose(const Tensor& a, int64_t dim0, int64_t dim1) {
  check_defined("transpose", a);
  if (a.dim() == 0) return a;
  Dims perm(static_cast<size_t>(a.dim()), 0);
  for (int64_t i = 0; i < a.dim(); ++i) perm[static_cast<size_t>(i)] = i;
  std::swap(perm[static_cast<size_t>(wrap_dim("transpose", dim0, a.dim()))],
            perm[static_cast<size_t>(wrap_dim("transpose", dim1, a.dim()))]);
  return permute(a, perm);
}

Tensor t(const Tensor& a) {
  check_defined("t", a);
  DG_CHECK(a.dim() <= 2, Runtime, "[t] expects a tensor with <= 2 dimensions, but self is ", a.dim(), "D");
  return a.dim() < 2 ? a : transpose(a, 0, 1);
}


Tensor narrow(const Tensor& a, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", a);
  DG_CHECK(a.dim() > 0, Runtime, "[narrow] cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim("narrow", dim, a.dim());
  const int64_t size = a.shape()[d];
  DG_CHECK(start >= -size && start <= size, Index, "[narrow] start (", start, ") is out of range for dimension ", d,
           " of size ", size, " (shape ", a.shape(), ")");
  if (start < 0) start += size;
  DG_CHECK(length >= 0, Runtime, "[narrow] length must be non-negative, got ", length);
  DG_CHECK(start + length <= size, Runtime, "[narrow] start (", start, ") + length (", length,
           ") exceeds dimension size (", size, ") of dimension ", d, " (shape ", a.shape(), ")");
  return slice(a, d, start, start + length, 1);
}

Tensor slice(const Tensor& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined("slice", a);
  DG_CHECK(a.dim() > 0, Runtime, "[slice] cannot be applied to a 0-dim tensor");
  DG_CHECK(step > 0, Value, "[slice] step must be positive, got ", step);
  const int64_t d = wrap_dim("slice", dim, a.dim());
  const int64_t size = a.shape()[d];
  // Python slicing: negative bounds count from the end, then both are clamped to [0, size].
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  const int64_t length = (end - start + step - 1) / step;
  Dims sizes(a.shape()), strides(a.strides());
  sizes[static_cast<size_t>(d)] = length;
  strides[static_cast<size_t>(d)] = a.strides()[d] * step;
  const int64_t offset = a.storage_offset() + (length > 0 ? start * a.strides()[d] : 0);
  Tensor out = Tensor::make_view(a, std::move(sizes), std::move(strides), offset);
  record_view("slice", slicing_backward, a, out, slicing_attrs(d, start, step, 0));
  return out;
}

Tensor select(const Tensor& a, int64_t dim, int64_t index) {
  check_defined("select", a);
  DG_CHECK(a.dim() > 0, Index, "[select] cannot be applied to a 0-dim tensor");
  const int64_t d = wrap_dim("select", dim, a.dim());
  const int64_t size = a.shape()[d];
  DG_CHECK(index >= -size && index < size, Index, "[select] index ", index, " is out of range for dimension ", d,
           " with size ", size, " (shape ", a.shape(), ")");
  if (index < 0) index += size;
  Dims sizes, strides;
  for (int64_t k = 0; k < a.dim(); ++k) {
    if (k == d) continue;
    sizes.push_back(a.shape()[k]);
    strides.push_back(a.strides()[k]);
  }
  Tensor out = Tensor::make_view(a, std::move(sizes), std::move(strides), a.storage_offset() + index * a.strides()[d]);
  record_view("select", slicing_backward, a, out, slicing_attrs(d, 0, 0, index));
  return out;
}

namespace {
// A view of `a` with the same elements in the given sizes/strides (dims of size 1 added or removed).
Tensor reshaping_view(const char* name, const Tensor& a, Dims sizes, Dims strides) {
  Tensor out = Tensor::make_view(a, std::move(sizes), std::move(strides), a.storage_offset());
  record_view(name, reshape_backward, a, out);
  return out;
}
}  // namespace

Tensor squeeze(const Tensor& a) {
  check_defined("squeeze", a);
  Dims sizes, strides;
  for (int64_t k = 0; k < a.dim(); ++k) {
    if (a.shape()[k] == 1) continue;
    sizes.push_back(a.shape()[k]);
    strides.push_back(a.strides()[k]);
  }
  return reshaping_view("squeeze", a, std::move(sizes), std::move(strides));
}

Tensor squeeze(const Tensor& a, int64_t dim) {
  check_defined("squeeze", a);
  const int64_t d = wrap_dim("squeeze", dim, a.dim());
  Dims sizes, strides;
  for (int64_t k = 0; k < a.dim(); ++k) {
    if (k == d && a.shape()[k] == 1) continue;  // a dim that is not 1 stays, as in torch
    sizes.push_back(a.shape()[k]);
    strides.push_back(a.strides()[k]);
  }
  return reshaping_view("squeeze", a, std::move(sizes), std::move(strides));
}

Tensor unsqueeze(const Tensor& a, int64_t dim) {
  check_defined("unsqueeze", a);
  const int64_t d = wrap_dim("unsqueeze", dim, a.dim() + 1);
  Dims sizes(a.shape()), strides(a.strides());
  const int64_t stride = d < a.dim() ? a.shape()[d] * a.strides()[d] : 1;
  sizes.insert(static_cast<size_t>(d), 1);
  strides.insert(static_cast<size_t>(d), stride);
  return reshaping_view("unsqueeze", a, std::move(sizes), std::move(strides));
}

Tensor flatten(const Tensor& a, int64_t start_dim, int64_t end_dim) {
  check_defined("flatten", a);
  if (a.dim() == 0) return reshape(a, Dims{1});
  const int64_t s = wrap_dim("flatten", start_dim, a.dim()), e = wrap_dim("flatten", end_dim, a.dim());
  DG_CHECK(s <= e, Runtime, "[flatten] start_dim (", s, ") cannot come after end_dim (", e, ")");
  if (s == e) return a;
  Dims shape;
  for (int64_t k = 0; k < s; ++k) shape.push_back(a.shape()[k]);
  int64_t merged = 1;
  for (int64_t k = s; k <= e; ++k) merged *= a.shape()[k];
  shape.push_back(merged);
  for (int64_t k = e + 1; k < a.dim(); ++k) shape.push_back(a.shape()[k]);
  return reshape(a, shape);
}

Tensor unflatten(const Tensor& a, int64_t dim, IntSpan sizes) {
  check_defined("unflatten", a);
  DG_CHECK(a.dim() > 0, Runtime, "[unflatten] cannot be applied to a 0-dim tensor");
  DG_CHECK(!sizes.empty(), Runtime, "[unflatten] sizes must be non-empty");
  const int64_t d = wrap_dim("unflatten", dim, a.dim());
  Dims inner = infer_shape("unflatten", sizes, a.shape()[d]);
  Dims shape;
  for (int64_t k = 0; k < d; ++k) shape.push_back(a.shape()[k]);
  for (int64_t s : inner) shape.push_back(s);
  for (int64_t k = d + 1; k < a.dim(); ++k) shape.push_back(a.shape()[k]);
  return view(a, shape);
}

}  // namespace dg
