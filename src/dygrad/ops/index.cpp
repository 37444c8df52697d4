// Joining, splitting and indexing ops: validation, output shapes, Task creation and backward formulas.
// cat's gradient is slices of g; split/chunk/unbind record one node whose gradient is one cat; gather and index_select send g back through scatter_add / index_add
// (deterministic, backend/cpu/index.cpp); scatter_add's is g for self and gather(g) for src.
#include "dygrad/ops/index.h"

#include <algorithm>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

// --- backward formulas (grad_outputs[0] = g) -------------------------------------------------------------
namespace {
// The cat node's attributes: the dim and each input's size along it (the Task carries DimAttrs).
struct CatNodeAttrs {
  static constexpr const char* kName = "CatNodeAttrs";
  int64_t dim = 0;
  Dims sizes;
  DG_ATTRS_FIELDS(dim, sizes);
};
void cat_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  int64_t offset = 0;
  const CatNodeAttrs& attrs = n.attrs.get<CatNodeAttrs>();
  for (size_t k = 0; k < attrs.sizes.size(); ++k) {
    if (n.needs_grad(k)) gi[k] = narrow(g[0], attrs.dim, offset, attrs.sizes[k]);
    offset += attrs.sizes[k];
  }
}
// saved(0) = index.
void gather_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Tensor zero = zeros(n.input_meta[0].shape, {.dtype = g[0].dtype(), .device = g[0].device()});
  gi[0] = scatter_add(zero, n.attrs.get<DimAttrs>().dim, n.saved(0), g[0]);
}
void index_select_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const Tensor zero = zeros(n.input_meta[0].shape, {.dtype = g[0].dtype(), .device = g[0].device()});
  gi[0] = index_add(zero, n.attrs.get<DimAttrs>().dim, n.saved(0), g[0]);
}
// The gradient of a scatter's src: g gathered at the index (`picked`, of index's shape), zero where src is
// larger than the index (the elements the scatter did not read).
Tensor gathered_source_grad(const Tensor& picked, const Tensor& index, IntSpan src_shape) {
  if (same_shape(picked.shape(), src_shape)) return picked;
  Tensor full_grad = zeros(src_shape, {.dtype = picked.dtype(), .device = picked.device()});
  NoGradGuard no_grad;
  Tensor corner = full_grad;
  for (int64_t d = 0; d < index.dim(); ++d) corner = narrow(corner, d, 0, index.shape()[d]);
  copy_(corner, picked);
  return full_grad;
}
// inputs (self, src); saved(0) = index.
void scatter_add_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (n.needs_grad(0)) gi[0] = g[0];
  if (!n.needs_grad(1)) return;
  const Tensor index = n.saved(0);
  gi[1] = gathered_source_grad(gather(g[0], n.attrs.get<DimAttrs>().dim, index), index, n.input_meta[1].shape);
}
// inputs (self, src) (scatter) or (self) (scatter_value); saved(0) = index. Without reduce, the positions
// scatter wrote get no gradient in self and src's gradient is g gathered there (as scatter_add's); reduce='add'
// of a value passes g to self; reduce='multiply' has no derivative (as torch).
void scatter_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const ScatterAttrs& attrs = n.attrs.get<ScatterAttrs>();
  DG_CHECK(attrs.reduce != ScatterReduce::Multiply, Runtime, "[scatter] the derivative of scatter with "
           "reduce='multiply' is not implemented (as torch)");
  if (attrs.reduce == ScatterReduce::Add) {
    if (n.needs_grad(0)) gi[0] = g[0];
  } else if (n.needs_grad(0)) {
    gi[0] = scatter(g[0], attrs.dim, n.saved(0), Scalar(0));
  }
  if (n.next.size() > 1 && n.needs_grad(1)) {
    const Tensor index = n.saved(0);
    gi[1] = gathered_source_grad(gather(g[0], attrs.dim, index), index, n.input_meta[1].shape);
  }
}
// inputs (self, src); saved(0) = index (1-D).
void index_add_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  if (n.needs_grad(0)) gi[0] = g[0];
  if (n.needs_grad(1)) gi[1] = index_select(g[0], n.attrs.get<DimAttrs>().dim, n.saved(0));
}
void tril_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = tril(g[0], n.attrs.get<TriangleAttrs>().diagonal); }
void triu_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) { gi[0] = triu(g[0], n.attrs.get<TriangleAttrs>().diagonal); }

OpCost copy_cost(const Task& t) {
  OpCost c;
  c.bytes = 2.0 * double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  return c;
}
}  // namespace

// Scratch of the CPU kernel (backend/cpu/index.cpp): its copy plan, one piece of at most kCatPieceBytes per input,
// and the running job counts (inputs + 1 int64).
size_t cat_scratch(const Task& t) {
  const int64_t n = static_cast<int64_t>(t.inputs.size());
  return static_cast<size_t>(n) * kCatPieceBytes + scratch_bytes<int64_t>(n + 1);
}
// cat moves elements by width: it takes the storage-only dtypes too (kOpAnyDType, docs/dtypes.md).
const OpDef op_cat("cat", attrs_type<DimAttrs>(), {.backward = cat_backward, .cost = copy_cost, .flags = kOpAnyDType,
                                                   .scratch = cat_scratch});
// The gather and scatter kernels walk their operands over the index's positions (StridedIteration operands, no
// views): no scratch.
const OpDef op_gather("gather", attrs_type<DimAttrs>(), {.backward = gather_backward, .cost = copy_cost});
const OpDef op_index_select("index_select", attrs_type<DimAttrs>(), {.backward = index_select_backward, .cost = copy_cost});
const OpDef op_scatter_add("scatter_add", attrs_type<DimAttrs>(), {.backward = scatter_add_backward, .alias_of = alias_each_output});
const OpDef op_index_add("index_add", attrs_type<DimAttrs>(), {.backward = index_add_backward, .alias_of = alias_each_output});
const OpDef op_scatter("scatter", attrs_type<ScatterAttrs>(), {.backward = scatter_backward, .alias_of = alias_each_output});
const OpDef op_scatter_value("scatter_value", attrs_type<ScatterAttrs>(),
                             {.backward = scatter_backward, .alias_of = alias_each_output});
const OpDef op_tril("tril", attrs_type<TriangleAttrs>(), {.backward = tril_backward, .cost = copy_cost});
const OpDef op_triu("triu", attrs_type<TriangleAttrs>(), {.backward = triu_backward, .cost = copy_cost});

// --- cat, stack ------------------------------------------------------------------------------------------------
namespace {
// Strides for a new tensor of `shape` laid out in memory like a tensor with `like_strides` (dims ordered by
// stride, outermost first), when those describe a dense layout; contiguous strides otherwise.
Dims strides_like(IntSpan shape, IntSpan like_strides) {
  std::vector<size_t> order(shape.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return like_strides[x] > like_strides[y]; });
  Dims strides(shape.size(), 0);
  int64_t expected = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const size_t d = order[k];
    if (shape[d] != 1 && like_strides[d] != expected) return contiguous_strides(shape);
    strides[d] = expected;
    expected *= shape[d];
  }
  return strides;
}

// cat with validated inputs; the output gets `out_strides` (dense) when given, else contiguous strides.
Tensor join(std::span<const Tensor> tensors, int64_t dim, IntSpan out_strides) {
  DG_CHECK(!tensors.empty(), Value, "[cat] expected a non-empty list of tensors");
  DType dtype = tensors[0].defined() ? tensors[0].dtype() : DType::Float32;
  int reference = -1;  // the first tensor that is not a 1-D empty one (torch skips those)
  for (size_t k = 0; k < tensors.size(); ++k) {
    DG_CHECK(tensors[k].defined(), Value, "[cat] tensor ", k, " is undefined");
    dtype = promote_types(dtype, tensors[k].dtype());
    if (reference < 0 && !(tensors[k].dim() == 1 && tensors[k].numel() == 0)) reference = static_cast<int>(k);
  }
  if (reference < 0) return Tensor::empty(Dims{0}, dtype, tensors[0].device());
  const Tensor& ref = tensors[static_cast<size_t>(reference)];
  DG_CHECK(ref.dim() > 0, Runtime, "[cat] zero-dimensional tensor (at position ", reference, ") cannot be concatenated");
  const int64_t d = wrap_dim("cat", dim, ref.dim());
  Dims shape(ref.shape());
  shape[static_cast<size_t>(d)] = 0;
  SmallVector<Tensor, 4> inputs;
  CatNodeAttrs node_attrs{d, {}};
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    if (t.dim() == 1 && t.numel() == 0) continue;
    DG_CHECK(t.dim() == ref.dim(), Runtime, "[cat] tensors must have the same number of dimensions: tensor ", reference,
             " has shape ", ref.shape(), " but tensor ", k, " has shape ", t.shape());
    for (int64_t e = 0; e < ref.dim(); ++e)
      DG_CHECK(e == d || t.shape()[e] == ref.shape()[e], Runtime, "[cat] sizes of tensors must match except in "
               "dimension ", d, ": expected size ", ref.shape()[e], " but got size ", t.shape()[e], " for tensor ",
               k, " (shape ", t.shape(), ") at dimension ", e);
    check_same_device("cat", ref, t);
    shape[static_cast<size_t>(d)] += t.shape()[d];
    inputs.push_back(to(t, dtype));
    node_attrs.sizes.push_back(t.shape()[d]);
  }
  Tensor out = Tensor::empty(shape, dtype, ref.device());
  if (!out_strides.empty() && static_cast<int64_t>(out_strides.size()) == out.dim()) {
    // The same storage seen with the requested dense strides: a fresh tensor, not a view of another.
    Tensor strided = Tensor::make_view(out, shape, Dims(out_strides), 0);
    strided.impl()->is_view = false;
    strided.impl()->view_base.reset();
    out = strided;
  }
  std::span<const Tensor> in_span(inputs.data(), inputs.size());
  enqueue(op_cat, in_span, std::span<const Tensor>(&out, 1), DimAttrs{d});
  if (needs_grad_any(in_span)) record_node(&op_cat, in_span, std::span<const Tensor>(&out, 1))->attrs = node_attrs;
  return out;
}
}  // namespace

Tensor cat(std::span<const Tensor> tensors, int64_t dim) { return join(tensors, dim, IntSpan()); }

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  DG_CHECK(!tensors.empty(), Value, "[stack] expects a non-empty list of tensors");
  for (size_t k = 0; k < tensors.size(); ++k) {
    DG_CHECK(tensors[k].defined(), Value, "[stack] tensor ", k, " is undefined");
    check_same_device("stack", tensors[0], tensors[k]);
    DG_CHECK(same_shape(tensors[k].shape(), tensors[0].shape()), Value, "[stack] expects each tensor to be equal "
             "size, but got ", tensors[0].shape(), " at entry 0 and ", tensors[k].shape(), " at entry ", k);
  }
  const int64_t d = wrap_dim("stack", dim, tensors[0].dim() + 1);
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (const Tensor& t : tensors) expanded.push_back(unsqueeze(t, d));
  return cat(expanded, d);
}

// --- split, chunk, unbind: views of consecutive pieces, recorded as ONE node with a piece per output ----------
// The backward joins the pieces' gradients with a single cat Task (a stack for unbind) into a gradient laid out
// like the input, so that views the input was made from (qkv.view(...).permute(...)) map it back without a
// copy; a piece that got no gradient contributes broadcast zeros. N select/narrow nodes would each fill a
// zero tensor of the input's shape and the engine would add them up.
namespace {
// The pieces node's attributes: the dim, whether the pieces dropped it (unbind), each piece's size along it and
// the input's strides.
struct PiecesAttrs {
  static constexpr const char* kName = "PiecesAttrs";
  int64_t dim = 0;
  bool dropped_dim = false;
  Dims sizes, input_strides;
  DG_ATTRS_FIELDS(dim, dropped_dim, sizes, input_strides);
};
void pieces_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  const IntSpan shape = n.input_meta[0].shape;
  const PiecesAttrs& attrs = n.attrs.get<PiecesAttrs>();
  const int64_t dim = attrs.dim;
  const bool dropped_dim = attrs.dropped_dim;
  const size_t count = g.size();
  const IntSpan sizes = attrs.sizes, input_strides = attrs.input_strides;
  DType dtype = n.input_meta[0].dtype;
  for (const Tensor& grad : g)
    if (grad.defined()) dtype = grad.dtype();
  std::vector<Tensor> parts;
  parts.reserve(count);
  Tensor zero;
  for (size_t k = 0; k < count; ++k) {
    if (g[k].defined()) {
      parts.push_back(dropped_dim ? unsqueeze(g[k], dim) : g[k]);
      continue;
    }
    if (!zero.defined()) zero = zeros(Dims{}, {.dtype = dtype, .device = n.input_meta[0].device});
    Dims piece_shape(shape);
    piece_shape[static_cast<size_t>(dim)] = sizes[k];
    parts.push_back(expand(zero, piece_shape));
  }
  gi[0] = join(parts, dim, strides_like(shape, input_strides));
}

std::vector<Tensor> record_pieces(const char* name, const Tensor& a, std::vector<Tensor> pieces, int64_t dim,
                                  bool dropped_dim, IntSpan sizes) {
  // Views made by a multi-output op may not be modified in place (torch's CreationMeta::MULTI_OUTPUT_NODE).
  for (Tensor& piece : pieces)
    if (piece.impl()->view_creation == ViewCreation::Default) piece.impl()->view_creation = ViewCreation::MultiOutput;
  if (pieces.empty() || !needs_grad_any({a})) return pieces;
  Ref<Node> node = make_ref<Node>(std::string(name), pieces_backward, pieces.size());
  node->attrs = PiecesAttrs{dim, dropped_dim, Dims(sizes), Dims(a.strides())};
  Tensor inputs[1] = {a};
  record_node(node, inputs, pieces);
  return pieces;
}

// Views a[..., start : start + size, ...] along dim for consecutive sizes, as one node.
std::vector<Tensor> split_views(const char* name, const Tensor& a, int64_t d, IntSpan sizes) {
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t size : sizes) {
    Dims shape(a.shape());
    shape[static_cast<size_t>(d)] = size;
    const int64_t offset = a.storage_offset() + (size > 0 ? start * a.strides()[d] : 0);
    pieces.push_back(Tensor::make_view(a, std::move(shape), Dims(a.strides()), offset));
    start += size;
  }
  return record_pieces(name, a, std::move(pieces), d, false, sizes);
}
}  // namespace

std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim) {
  check_defined("split", a);
  DG_CHECK(a.dim() > 0, Runtime, "[split] expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim("split", dim, a.dim());
  const int64_t size = a.shape()[d];
  DG_CHECK(split_size > 0 || (split_size == 0 && size == 0), Value, "[split] split_size can only be 0 if dimension "
           "size is 0, but got split_size=", split_size, " for dimension ", d, " of size ", size);
  Dims sizes;
  if (size == 0) sizes.push_back(0);
  for (int64_t start = 0; start < size; start += split_size) sizes.push_back(std::min(split_size, size - start));
  return split_views("split", a, d, sizes);
}

std::vector<Tensor> split(const Tensor& a, IntSpan split_sizes, int64_t dim) {
  check_defined("split", a);
  DG_CHECK(a.dim() > 0, Runtime, "[split] expects at least a 1-dimensional tensor");
  const int64_t d = wrap_dim("split", dim, a.dim());
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    DG_CHECK(s >= 0, Value, "[split] split_sizes must be non-negative, got ", split_sizes);
    total += s;
  }
  DG_CHECK(total == a.shape()[d], Value, "[split] split_sizes ", split_sizes, " must sum exactly to ", a.shape()[d],
           " (the input's size at dimension ", d, "), but sum to ", total);
  return split_views("split", a, d, split_sizes);
}

std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim) {
  check_defined("chunk", a);
  DG_CHECK(chunks > 0, Value, "[chunk] number of chunks must be positive, got ", chunks);
  DG_CHECK(a.dim() > 0, Runtime, "[chunk] expects at least a 1-dimensional tensor");
  const int64_t size = a.size(wrap_dim("chunk", dim, a.dim()));
  return split(a, (size + chunks - 1) / chunks, dim);
}

std::vector<Tensor> unbind(const Tensor& a, int64_t dim) {
  check_defined("unbind", a);
  DG_CHECK(a.dim() > 0, Index, "[unbind] dimension specified as ", dim, " but tensor has no dimensions");
  const int64_t d = wrap_dim("unbind", dim, a.dim());
  Dims sizes, strides;
  for (int64_t k = 0; k < a.dim(); ++k) {
    if (k == d) continue;
    sizes.push_back(a.shape()[k]);
    strides.push_back(a.strides()[k]);
  }
  std::vector<Tensor> pieces;
  pieces.reserve(static_cast<size_t>(a.shape()[d]));
  for (int64_t i = 0; i < a.shape()[d]; ++i)
    pieces.push_back(Tensor::make_view(a, sizes, strides, a.storage_offset() + i * a.strides()[d]));
  return record_pieces("unbind", a, std::move(pieces), d, true, Dims(static_cast<size_t>(a.shape()[d]), 1));
}

// --- index_select, gather, scatter_add, index_add ------------------------------------------------------------
namespace {
void check_index(const char* op, const Tensor& index) {
  check_defined(op, index, "index");
  DG_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, Type, "[", op, "] index must be int64 "
           "or int32, got ", dtype_name(index.dtype()));
}

// A 0-D tensor indexed along dim 0 behaves as a 1-element 1-D tensor.
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? reshape(t, Dims{1}) : t; }

// gather/scatter shape rules: same number of dims; index.size(e) <= other.size(e) for e != dim (for all
// e when `all_dims`).
void check_index_shape(const char* op, const Tensor& index, const Tensor& other, const char* other_name, int64_t dim,
                       bool all_dims) {
  DG_CHECK(index.dim() == other.dim(), Runtime, "[", op, "] index ", index.shape(), " and ", other_name, " ",
           other.shape(), " must have the same number of dimensions");
  for (int64_t e = 0; e < index.dim(); ++e)
    DG_CHECK((!all_dims && e == dim) || index.shape()[e] <= other.shape()[e], Runtime, "[", op, "] size of index ",
             index.shape(), " exceeds the size of ", other_name, " ", other.shape(), " at dimension ", e);
}

// out[p, index[p, j]] += src[p, j] into `target` (accumulating in place); `index` as the kernel reads it.
void enqueue_scatter_add(const OpDef& op, Tensor& target, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor source = src.shares_storage(target) ? clone(src) : src;
  target.storage().bump_version();
  enqueue(op, {target, index, source}, {target}, DimAttrs{dim});
}

// The 1-D index of index_select/index_add expanded to `shape` (stride 0 off dim): the gather layout.
Tensor expand_index(const Tensor& index, IntSpan shape, int64_t dim) {
  Dims strides(shape.size(), 0);
  strides[static_cast<size_t>(dim)] = index.dim() == 0 ? 0 : index.strides()[0];
  return Tensor::make_view(index, Dims(shape), std::move(strides), index.storage_offset());
}

void check_index_vector(const char* op, const Tensor& index) {
  check_index(op, index);
  DG_CHECK(index.dim() <= 1, Index, "[", op, "] index must be 1-D or 0-D, got shape ", index.shape());
}
}  // namespace

Tensor index_select(const Tensor& a_in, int64_t dim, const Tensor& index) {
  check_defined("index_select", a_in);
  check_index_vector("index_select", index);
  if (storage_only::float8(a_in)) [[unlikely]] return storage_only::index_select(a_in, dim, index);
  const Tensor a = at_least_1d(a_in);
  const int64_t d = wrap_dim("index_select", dim, a.dim());
  Dims shape(a.shape());
  shape[static_cast<size_t>(d)] = index.numel();
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  const Attrs attrs = DimAttrs{d};
  enqueue(op_index_select, {a, expand_index(index, shape, d)}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_index_select, inputs, outputs);
    node->attrs = attrs;
    node->save(index);
  }
  return a_in.dim() == 0 && index.dim() == 0 ? reshape(out, Dims{}) : out;
}

Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("index_add", a);
  check_defined("index_add", src, "source");
  check_index_vector("index_add", index);
  DG_CHECK(a.dim() > 0, Index, "[index_add] self must have at least one dimension");
  const int64_t d = wrap_dim("index_add", dim, a.dim());
  DG_CHECK(a.dtype() == src.dtype(), Type, "[index_add] self (", dtype_name(a.dtype()), ") and source (",
           dtype_name(src.dtype()), ") must have the same dtype");
  Dims expected(a.shape());
  expected[static_cast<size_t>(d)] = index.numel();
  DG_CHECK(same_shape(src.shape(), expected), Runtime, "[index_add] source of shape ", src.shape(), " does not match "
           "self ", a.shape(), " with dimension ", d, " of size ", index.numel(), " (the index length)");
  Tensor out = clone(detach(a));
  enqueue_scatter_add(op_index_add, out, d, expand_index(index, src.shape(), d), src);
  if (needs_grad_any({a, src})) {
    Tensor inputs[2] = {a, src}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_index_add, inputs, outputs);
    node->attrs = DimAttrs{d};
    node->save(index);
  }
  return out;
}

Tensor gather(const Tensor& a_in, int64_t dim, const Tensor& index_in) {
  check_defined("gather", a_in);
  check_index("gather", index_in);
  const Tensor a = at_least_1d(a_in), index = at_least_1d(index_in);
  const int64_t d = wrap_dim("gather", dim, a.dim());
  check_index_shape("gather", index, a, "input", d, false);
  Tensor out = Tensor::empty(index.shape(), a.dtype(), a.device());
  const Attrs attrs = DimAttrs{d};
  enqueue(op_gather, {a, index}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_gather, inputs, outputs);
    node->attrs = attrs;
    node->save(index);
  }
  return index_in.dim() == 0 ? reshape(out, Dims{}) : out;
}

namespace {
void check_scatter(const char* op, const Tensor& a, int64_t d, const Tensor& index, const Tensor& src) {
  check_index_shape(op, index, a, "self", d, false);
  check_index_shape(op, index, src, "src", d, true);
  DG_CHECK(a.dtype() == src.dtype(), Type, "[", op, "] self (", dtype_name(a.dtype()), ") and src (",
           dtype_name(src.dtype()), ") must have the same dtype");
}
}  // namespace

Tensor scatter_add(const Tensor& a_in, int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  check_defined("scatter_add", a_in);
  check_defined("scatter_add", src_in, "src");
  check_index("scatter_add", index_in);
  const Tensor a = at_least_1d(a_in), index = at_least_1d(index_in), src = at_least_1d(src_in);
  const int64_t d = wrap_dim("scatter_add", dim, a.dim());
  check_scatter("scatter_add", a, d, index, src);
  Tensor out = clone(detach(a));
  enqueue_scatter_add(op_scatter_add, out, d, index, src);
  if (needs_grad_any({a, src})) {
    Tensor inputs[2] = {a, src}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_scatter_add, inputs, outputs);
    node->attrs = DimAttrs{d};
    node->save(index);
  }
  return a_in.dim() == 0 ? reshape(out, Dims{}) : out;
}

Tensor& scatter_add_(Tensor& a, int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  check_defined("scatter_add_", a, "self");
  check_defined("scatter_add_", src_in, "src");
  check_index("scatter_add_", index_in);
  check_inplace("scatter_add_", a, src_in.requires_grad());
  DG_CHECK(a.dim() > 0, Index, "[scatter_add_] self must have at least one dimension");
  const Tensor index = at_least_1d(index_in), src = at_least_1d(src_in);
  const int64_t d = wrap_dim("scatter_add_", dim, a.dim());
  check_scatter("scatter_add_", a, d, index, src);
  const bool record = needs_grad_any({a, src});
  Ref<Node> node;
  if (record) {
    node = make_ref<Node>(&op_scatter_add, 1);
    Tensor inputs[2] = {a, src};
    record_node(node, inputs, {});
    node->attrs = DimAttrs{d};
    node->save(index);
  }
  enqueue_scatter_add(op_scatter_add, a, d, index, src);
  if (record) rebase_history(a, node);
  return a;
}

// --- scatter, scatter_, index_add_ ---------------------------------------------------------------------------
namespace {
// One scatter or scatter_value Task writing `target` in place, and its node: inputs (self, src), or (self) when
// src is undefined; saved(0) = the index. In place, target is self and its history is rebased onto the node;
// out of place, target is a fresh copy of self and becomes the node's output.
void scatter_into(const OpDef& op, Tensor& target, const Tensor& self, bool inplace, const Tensor& index,
                  const Tensor& src, const Attrs& attrs) {
  const bool has_src = src.defined();
  Tensor grad_inputs[2] = {self, src};
  const std::span<const Tensor> node_inputs(grad_inputs, has_src ? 2 : 1);
  Ref<Node> node;
  if (needs_grad_any(node_inputs)) {
    node = make_ref<Node>(&op, 1);
    Tensor outputs[1] = {target};
    record_node(node, node_inputs, inplace ? std::span<const Tensor>() : std::span<const Tensor>(outputs, 1));
    node->attrs = attrs;
    node->save(index);
  }
  const Tensor source = has_src && src.shares_storage(target) ? clone(src) : src;
  target.storage().bump_version();
  if (has_src) enqueue(op, {target, index, source}, {target}, attrs);
  else enqueue(op, {target, index}, {target}, attrs);
  if (node && inplace) rebase_history(target, node);
}

// scatter(self, dim, index, src or value, reduce), out of place or in place.
Tensor scatter_impl(const char* name, const Tensor& self_in, Tensor* inplace_self, int64_t dim, const Tensor& index_in,
                    const Tensor* src_in, Scalar value, ScatterReduce reduce) {
  check_defined(name, self_in, "self");
  check_index(name, index_in);
  if (src_in) check_defined(name, *src_in, "src");
  if (inplace_self) {
    check_inplace(name, self_in, src_in && src_in->requires_grad());
    DG_CHECK(self_in.dim() > 0, Index, "[", name, "] self must have at least one dimension");
  }
  const Tensor a = at_least_1d(self_in), index = at_least_1d(index_in);
  const int64_t d = wrap_dim(name, dim, a.dim());
  Tensor src;
  if (src_in) {
    src = at_least_1d(*src_in);
    DG_CHECK(a.dtype() == src.dtype(), Runtime, "[", name, "] expected self.dtype to be equal to src.dtype, got ",
             dtype_name(a.dtype()), " and ", dtype_name(src.dtype()));
    check_scatter(name, a, d, index, src);
    check_same_device(name, a, src);
  } else {
    check_index_shape(name, index, a, "self", d, false);
  }
  check_same_device(name, a, index);
  if (src_in && reduce == ScatterReduce::Add) {  // torch's reduce='add' is scatter_add (differentiable here)
    if (inplace_self) return scatter_add_(*inplace_self, dim, index_in, *src_in);
    return scatter_add(self_in, dim, index_in, *src_in);
  }
  const Attrs attrs = ScatterAttrs{d, reduce, value};
  const OpDef& op = src_in ? op_scatter : op_scatter_value;
  if (inplace_self) {
    scatter_into(op, *inplace_self, self_in, true, index, src, attrs);
    return *inplace_self;
  }
  Tensor out = clone(detach(a));
  scatter_into(op, out, a, false, index, src, attrs);
  return self_in.dim() == 0 ? reshape(out, Dims{}) : out;
}
}  // namespace

Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, ScatterReduce reduce) {
  return scatter_impl("scatter", a, nullptr, dim, index, &src, Scalar(0), reduce);
}
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, Scalar value, ScatterReduce reduce) {
  return scatter_impl("scatter", a, nullptr, dim, index, nullptr, value, reduce);
}
Tensor& scatter_(Tensor& a, int64_t dim, const Tensor& index, const Tensor& src, ScatterReduce reduce) {
  scatter_impl("scatter_", a, &a, dim, index, &src, Scalar(0), reduce);
  return a;
}
Tensor& scatter_(Tensor& a, int64_t dim, const Tensor& index, Scalar value, ScatterReduce reduce) {
  scatter_impl("scatter_", a, &a, dim, index, nullptr, value, reduce);
  return a;
}

Tensor& index_add_(Tensor& a, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined("index_add_", a, "self");
  check_defined("index_add_", src, "source");
  check_index_vector("index_add_", index);
  check_inplace("index_add_", a, src.requires_grad());
  DG_CHECK(a.dim() > 0, Index, "[index_add_] self must have at least one dimension");
  const int64_t d = wrap_dim("index_add_", dim, a.dim());
  DG_CHECK(a.dtype() == src.dtype(), Type, "[index_add_] self (", dtype_name(a.dtype()), ") and source (",
           dtype_name(src.dtype()), ") must have the same dtype");
  Dims expected(a.shape());
  expected[static_cast<size_t>(d)] = index.numel();
  DG_CHECK(same_shape(src.shape(), expected), Runtime, "[index_add_] source of shape ", src.shape(), " does not "
           "match self ", a.shape(), " with dimension ", d, " of size ", index.numel(), " (the index length)");
  const Attrs attrs = DimAttrs{d};
  const Tensor expanded = expand_index(index, src.shape(), d);
  if (needs_grad_any({a, src})) {
    Ref<Node> node = make_ref<Node>(&op_index_add, 1);
    Tensor inputs[2] = {a, src};
    record_node(node, inputs, {});
    node->attrs = attrs;
    node->save(index);
    enqueue_scatter_add(op_index_add, a, d, expanded, src);
    rebase_history(a, node);
    return a;
  }
  enqueue_scatter_add(op_index_add, a, d, expanded, src);
  return a;
}

// --- tril, triu ------------------------------------------------------------------------------------------------
namespace {
Tensor triangle(const OpDef& op, const Tensor& a, int64_t diagonal, bool upper) {
  check_defined(op.name, a);
  DG_CHECK(a.dim() >= 2, Runtime, "[", op.name, "] input tensor must have at least 2 dimensions, got shape ", a.shape());
  // Any diagonal past the matrix keeps or drops everything: clamped so the kernel's r + diagonal cannot
  // overflow (tril(a, 2**63 - 1) is a copy of a, as in torch).
  const int64_t rows = a.shape()[a.dim() - 2], cols = a.shape()[a.dim() - 1];
  diagonal = std::clamp<int64_t>(diagonal, -rows - 1, cols + 1);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const Attrs attrs = TriangleAttrs{diagonal, upper};
  enqueue(op, {a}, {out}, attrs);
  if (needs_grad_any({a})) {
    Tensor inputs[1] = {a}, outputs[1] = {out};
    record_node(&op, inputs, outputs)->attrs = attrs;
  }
  return out;
}
}  // namespace

Tensor tril(const Tensor& a, int64_t diagonal) { return triangle(op_tril, a, diagonal, false); }
Tensor triu(const Tensor& a, int64_t diagonal) { return triangle(op_triu, a, diagonal, true); }

}  // namespace dg
