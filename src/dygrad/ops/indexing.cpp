// Indexing ops: x[indices] and x[indices] = value. Basic indices become select/slice/unsqueeze views;
// integer and boolean tensor indices go through the index / index_put kernels (backend/cpu/indexing.cpp).
// Boolean masks become integer indices through nonzero (a sync point: the result size depends on data).
#include "dygrad/runtime/op_sink.h"
#include "dygrad/ops/indexing.h"

#include <algorithm>
#include <vector>

#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/ops/storage_only.h"

namespace dg {

namespace {
constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
using IndexList = std::vector<TensorIndex>;

void index_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);
void index_put_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi);

OpCost copy_cost(const Task& t) {
  OpCost c;
  c.bytes = 2.0 * double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  return c;
}
}  // namespace

// Scratch of the CPU kernels (backend/cpu/indexing.cpp). index and index_put walk the k index tensors and one
// more operand with an offset counter held inline (no heap up to 7 operands and 6 dims); index_put keeps three
// int64 per indexed position (destination and source offsets, row). nonzero: one count per chunk.
// Tensors of more than 6 unmergeable dims would spill Dims to the heap and are not covered (docs/ops.md).
size_t index_positions(const Task& t, const Tensor& x, const Tensor& other) {
  const int64_t k = static_cast<int64_t>(t.attrs.get<AdvancedIndexAttrs>().dims.size());
  const int64_t nb = other.dim() - (x.dim() - k);
  int64_t positions = 1;
  for (int64_t d = 0; d < nb; ++d) positions *= other.shape()[d];
  return static_cast<size_t>(positions);
}
size_t index_put_scratch(const Task& t) {
  const int64_t positions = static_cast<int64_t>(index_positions(t, t.outputs[0], t.inputs[t.inputs.size() - 1]));
  return 3 * scratch_bytes<int64_t>(positions);
}
size_t nonzero_scratch(const Task& t) {
  const int64_t n = t.inputs[0].numel();
  return scratch_bytes<int64_t>(std::max<int64_t>(1, (n + kIndexWorkGrain - 1) / kIndexWorkGrain) + 1);
}
// index gathers elements by width: it takes the storage-only dtypes too (kOpAnyDType, docs/dtypes.md).
const OpDef op_index("index", attrs_type<AdvancedIndexAttrs>(),
                     {.backward = index_backward, .cost = copy_cost, .flags = kOpAnyDType});
// kOpAnyDType for float8's accumulating form only (advanced_put refuses the other storage-only cases as enqueue would).
const OpDef op_index_put("index_put", attrs_type<AdvancedIndexAttrs>(),
                         {.backward = index_put_backward, .flags = kOpAnyDType, .scratch = index_put_scratch,
                          .alias_of = alias_each_output});
const OpDef op_nonzero("nonzero", nullptr, {.flags = kOpDataDependentShape, .scratch = nonzero_scratch,
                                            .host_read = host_read_always});

namespace {
bool is_mask(const Tensor& t) { return t.dtype() == DType::Bool || t.dtype() == DType::UInt8; }

// A view with the dims of `t` reordered (no autograd: kernel operands only).
Tensor permuted_view(const Tensor& t, IntSpan perm) {
  Dims sizes, strides;
  for (int64_t p : perm) {
    sizes.push_back(t.shape()[p]);
    strides.push_back(t.strides()[p]);
  }
  return Tensor::make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

// `t` broadcast to `shape` (the caller has checked that it broadcasts; no autograd).
Tensor broadcast_view(const Tensor& t, IntSpan shape) {
  const size_t lead = shape.size() - static_cast<size_t>(t.dim());
  Dims strides(shape.size(), 0);
  for (size_t d = lead; d < shape.size(); ++d)
    strides[d] = t.shape()[d - lead] == shape[d] ? t.strides()[d - lead] : 0;
  return Tensor::make_view(t, Dims(shape), std::move(strides), t.storage_offset());
}

bool broadcasts_to(IntSpan from, IntSpan to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d)
    if (from[d] != 1 && from[d] != to[lead + d]) return false;
  return true;
}

// torch drops leading size-1 dims of an assigned value beyond the target's rank (x[0] = v[None]).
Tensor strip_leading_ones(const Tensor& v, int64_t ndim) {
  Tensor out = v;
  while (out.dim() > ndim && out.shape()[0] == 1) out = select(out, 0, 0);
  return out;
}

// A Python bool (or 0-d mask) index: a new axis of size 1, indexed by [0] (true) or [] (false). Marked by
// TensorIndex::integer == kNewAxis on a Tensor entry.
constexpr int64_t kNewAxis = 1;
TensorIndex new_axis_index(bool keep, Device device) {
  TensorIndex ix = TensorIndex::tensor_index(keep ? to_device(from_vector<int64_t>({0}, Dims{1}), device)
                                                  : Tensor::empty(Dims{0}, DType::Int64, device));
  ix.integer = kNewAxis;
  return ix;
}

// Expands the Ellipsis into full slices and turns boolean indices into integer ones: a mask of k dims
// becomes k index tensors (nonzero), a Python bool or 0-d mask a new axis indexed by [0] (true) or [] (false).
// What is left: Integer, Slice, None and integer Tensor entries.
IndexList resolve(const char* op, const Tensor& a, std::span<const TensorIndex> indices) {
  int64_t consumed = 0;
  int ellipses = 0;
  for (const TensorIndex& ix : indices) {
    switch (ix.kind) {
      case TensorIndex::Kind::Integer:
      case TensorIndex::Kind::Slice: ++consumed; break;
      case TensorIndex::Kind::Ellipsis:
        DG_CHECK(++ellipses <= 1, Index, "[", op, "] an index can only have a single ellipsis ('...')");
        break;
      case TensorIndex::Kind::Tensor: {
        DG_CHECK(ix.tensor.defined(), Index, "[", op, "] an index tensor is undefined");
        const DType t = ix.tensor.dtype();
        DG_CHECK(t == DType::Int64 || t == DType::Int32 || is_mask(ix.tensor), Index, "[", op, "] tensors used as "
                 "indices must be long, int, byte or bool tensors, got ", dtype_name(t));
        consumed += is_mask(ix.tensor) ? ix.tensor.dim() : (ix.integer == kNewAxis ? 0 : 1);
        break;
      }
      default: break;
    }
  }
  DG_CHECK(consumed <= a.dim(), Index, "[", op, "] too many indices for tensor of dimension ", a.dim(), " (got ",
           consumed, ")");
  IndexList out;
  out.reserve(indices.size() + static_cast<size_t>(a.dim()));
  int64_t dim = 0;  // the dim of `a` the next index acts on
  for (const TensorIndex& ix : indices) {
    switch (ix.kind) {
      case TensorIndex::Kind::Integer: out.push_back(ix); ++dim; break;
      case TensorIndex::Kind::Slice:
        DG_CHECK(ix.step > 0, Value, "[", op, "] step must be greater than zero, got ", ix.step);
        out.push_back(ix);
        ++dim;
        break;
      case TensorIndex::Kind::None: out.push_back(ix); break;
      case TensorIndex::Kind::Ellipsis:
        for (int64_t k = 0; k < a.dim() - consumed; ++k) out.push_back(TensorIndex::slice());
        dim += a.dim() - consumed;
        break;
      case TensorIndex::Kind::Boolean: out.push_back(new_axis_index(ix.integer != 0, a.device())); break;
      case TensorIndex::Kind::Tensor: {
        const Tensor& t = ix.tensor;
        if (!is_mask(t)) {
          out.push_back(ix);
          if (ix.integer != kNewAxis) ++dim;
          break;
        }
        if (t.dim() == 0) {
          HostReadScope read(op);
          out.push_back(new_axis_index(t.item<int64_t>() != 0, a.device()));
          break;
        }
        for (int64_t e = 0; e < t.dim(); ++e)
          DG_CHECK(t.shape()[e] == a.shape()[dim + e], Index, "[", op, "] The shape of the mask ", t.shape(),
                   " at index ", e, " does not match the shape of the indexed tensor ", a.shape(), " at index ", dim + e);
        Tensor rows = nonzero(t);  // [n, t.dim()]
        for (int64_t e = 0; e < t.dim(); ++e) out.push_back(TensorIndex::tensor_index(select(rows, 1, e)));
        dim += t.dim();
        break;
      }
    }
  }
  return out;
}

// The basic part applied as views; the integer tensor indices left, with the dims of `view` they index.
struct Split {
  Tensor view;
  Dims dims;
  std::vector<Tensor> indices;
};

Split apply_basic(const char* op, const Tensor& a, std::span<const TensorIndex> resolved) {
  Split s;
  s.view = a;
  int64_t d = 0;
  for (const TensorIndex& ix : resolved) {
    switch (ix.kind) {
      case TensorIndex::Kind::Integer: {
        const int64_t size = s.view.shape()[d];
        DG_CHECK(ix.integer >= -size && ix.integer < size, Index, "[", op, "] index ", ix.integer,
                 " is out of bounds for dimension ", d, " with size ", size);
        s.view = select(s.view, d, ix.integer);
        break;
      }
      case TensorIndex::Kind::Slice:
        if (ix.start != 0 || ix.stop != kEnd || ix.step != 1) s.view = slice(s.view, d, ix.start, ix.stop, ix.step);
        ++d;
        break;
      case TensorIndex::Kind::None: s.view = unsqueeze(s.view, d++); break;
      case TensorIndex::Kind::Tensor:
        if (ix.integer == kNewAxis) s.view = unsqueeze(s.view, d);
        s.dims.push_back(d++);
        s.indices.push_back(ix.tensor);
        break;
      default: break;
    }
  }
  return s;
}

// Where the advanced result's dims come from: B = the broadcast index shape; `shape` = the result shape;
// x_perm orders the view's dims as [indexed..., rest...]; out_perm orders the result's as [B..., rest...].
struct Plan {
  Dims b_shape, shape, x_perm, out_perm;
  std::vector<Tensor> indices;  // int64, broadcast to B
};

Plan make_plan(const char* op, const Tensor& x, IntSpan dims, std::span<const Tensor> indices) {
  Plan p;
  p.b_shape = Dims(indices[0].shape());
  for (size_t j = 1; j < indices.size(); ++j) {
    IntSpan s = indices[j].shape();
    Dims merged(std::max(p.b_shape.size(), s.size()), 1);
    bool ok = true;
    for (size_t d = 0; d < merged.size(); ++d) {
      const int64_t u = d + p.b_shape.size() >= merged.size() ? p.b_shape[d + p.b_shape.size() - merged.size()] : 1;
      const int64_t w = d + s.size() >= merged.size() ? s[d + s.size() - merged.size()] : 1;
      ok = ok && (u == w || u == 1 || w == 1);
      merged[d] = u == 1 ? w : u;
    }
    DG_CHECK(ok, Index, "[", op, "] shape mismatch: indexing tensors could not be broadcast together with shapes ",
             IntSpan(p.b_shape), ", ", s);
    p.b_shape = std::move(merged);
  }
  for (const Tensor& t : indices) {  // index tensors on the CPU may index a device's tensor (torch)
    NoGradGuard no_grad;
    p.indices.push_back(broadcast_view(to_device(to(t, DType::Int64), x.device()), p.b_shape));
  }
  bool adjacent = true;
  for (size_t j = 1; j < dims.size(); ++j) adjacent = adjacent && dims[j] == dims[j - 1] + 1;
  const int64_t at = adjacent ? dims[0] : 0, nb = static_cast<int64_t>(p.b_shape.size());
  Dims rest;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) rest.push_back(d);
  for (int64_t d : dims) p.x_perm.push_back(d);
  for (int64_t d : rest) p.x_perm.push_back(d);
  for (int64_t r = 0; r < at; ++r) p.shape.push_back(x.shape()[rest[static_cast<size_t>(r)]]);
  for (int64_t b : p.b_shape) p.shape.push_back(b);
  for (size_t r = static_cast<size_t>(at); r < rest.size(); ++r) p.shape.push_back(x.shape()[rest[r]]);
  for (int64_t b = 0; b < nb; ++b) p.out_perm.push_back(at + b);
  for (int64_t r = 0; r < at; ++r) p.out_perm.push_back(r);
  for (int64_t r = at + nb; r < static_cast<int64_t>(p.shape.size()); ++r) p.out_perm.push_back(r);
  return p;
}

Attrs plan_attrs(IntSpan dims, bool accumulate) {
  return AdvancedIndexAttrs{Dims(dims), accumulate};
}

// x[..., idx_0, ..., idx_k, ...] for the integer index tensors at `dims` of x. Differentiable in x.
// `originals`: the index tensors as the user gave them (a bool mask before it became positions), saved after
// the positions so that modifying one in place before backward raises, as in torch.
Tensor gather_advanced(const Tensor& x, IntSpan dims, std::span<const Tensor> indices,
                       std::span<const TensorIndex> originals = {}) {
  Plan p = make_plan("index", x, dims, indices);
  Tensor out = Tensor::empty(p.shape, x.dtype(), x.device());
  std::vector<Tensor> inputs{permuted_view(x, p.x_perm)};
  for (const Tensor& t : p.indices) inputs.push_back(t);
  const Attrs attrs = plan_attrs(dims, false);
  const Tensor target = permuted_view(out, p.out_perm);
  enqueue(op_index, inputs, std::span<const Tensor>(&target, 1), attrs);
  if (needs_grad_any({x})) {
    Tensor node_inputs[1] = {x}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_index, node_inputs, outputs);
    node->attrs = attrs;
    for (const Tensor& t : p.indices) node->save(t);
    for (const TensorIndex& i : originals)
      if (i.kind == TensorIndex::Kind::Tensor && i.tensor.defined()) node->save(i.tensor);
  }
  return out;
}

// x[..., idx_0, ..., idx_k, ...] = values (or +=), in place, no autograd (callers record it).
void put_advanced(Tensor& x, IntSpan dims, std::span<const Tensor> indices, const Tensor& values_in, bool accumulate) {
  NoGradGuard no_grad;
  check_same_device("index_put_", x, values_in);
  Plan p = make_plan("index_put_", x, dims, indices);
  Tensor values = strip_leading_ones(to(values_in, x.dtype()), static_cast<int64_t>(p.shape.size()));
  DG_CHECK(broadcasts_to(values.shape(), p.shape), Runtime, "[index_put_] shape mismatch: value tensor of shape ",
           values_in.shape(), " cannot be broadcast to indexing result of shape ", IntSpan(p.shape));
  detail::check_no_internal_overlap("index_put_", x);
  if (values.shares_storage(x)) values = clone(values);
  std::vector<Tensor> inputs{permuted_view(x, p.x_perm)};
  for (const Tensor& t : p.indices) inputs.push_back(t);
  inputs.push_back(permuted_view(broadcast_view(values, p.shape), p.out_perm));
  // Of the storage-only dtypes, float8 accumulates (torch adds one element at a time in float8: the kernel's order);
  // the others are refused as enqueue refuses them for ops without kOpAnyDType.
  for (const Tensor& t : inputs)
    DG_CHECK(!is_storage_only(t.dtype()) || (accumulate && is_float8(t.dtype())), NotImplemented, "[",
             api_name("index_put"), "] not implemented for '", dtype_torch_name(t.dtype()), "'");
  x.storage().bump_version();
  const Tensor target = inputs[0];
  enqueue(op_index_put, inputs, std::span<const Tensor>(&target, 1), plan_attrs(dims, accumulate));
}

// zeros(shape) with g accumulated at the indices: index's gradient. Differentiable in g (create_graph).
Tensor accumulate_into_zeros(IntSpan shape, IntSpan dims, std::span<const Tensor> indices, const Tensor& g) {
  Tensor out = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
  put_advanced(out, dims, indices, g, true);
  if (needs_grad_any({g})) {
    Tensor inputs[1] = {g}, outputs[1] = {out};
    Ref<Node> node = record_node(&op_index_put, inputs, outputs);
    node->attrs = plan_attrs(dims, true);
    for (const Tensor& t : indices) node->save(t);
  }
  return out;
}

std::vector<Tensor> saved_indices(Node& n) {
  std::vector<Tensor> out;
  for (size_t j = 0; j < n.attrs.get<AdvancedIndexAttrs>().dims.size(); ++j) out.push_back(n.saved(j));
  return out;
}

void index_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  for (size_t j = n.attrs.get<AdvancedIndexAttrs>().dims.size(); j < n.num_saved(); ++j) n.saved(j);  // versions
  gi[0] = accumulate_into_zeros(n.input_meta[0].shape, n.attrs.get<AdvancedIndexAttrs>().dims, saved_indices(n), g[0]);
}
// The node of accumulate_into_zeros: input g (the values), output zeros + put.
void index_put_backward(Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
  gi[0] = gather_advanced(g[0], n.attrs.get<AdvancedIndexAttrs>().dims, saved_indices(n));
}

// The gradient of an assigned value: the indexed gradient summed back to the value's shape.
Tensor reduce_to_value(const Tensor& g, IntSpan value_shape) {
  size_t skip = 0;
  while (static_cast<int64_t>(value_shape.size() - skip) > g.dim() && value_shape[skip] == 1) ++skip;
  const Dims stripped(value_shape.subspan(skip));
  Tensor r = sum_to(g, stripped);
  return same_shape(r.shape(), value_shape) ? r : reshape(r, value_shape);
}

// The write of index_put_, without autograd bookkeeping.
void write(Tensor& a, std::span<const TensorIndex> resolved, const Tensor& value, bool accumulate) {
  NoGradGuard no_grad;
  Split s = apply_basic("index_put_", a, resolved);
  if (!s.dims.empty()) {
    put_advanced(s.view, s.dims, s.indices, value, accumulate);
    return;
  }
  Tensor v = strip_leading_ones(value, s.view.dim());
  DG_CHECK(broadcasts_to(v.shape(), s.view.shape()), Runtime, "[index_put_] shape mismatch: value tensor of shape ",
           value.shape(), " cannot be broadcast to indexing result of shape ", s.view.shape());
  if (accumulate) add_(s.view, v);
  else copy_(s.view, v);
}
}  // namespace

// --- public ops ----------------------------------------------------------------------------------------------
Tensor index(const Tensor& a, std::span<const TensorIndex> indices) {
  check_defined("index", a);
  const IndexList resolved = resolve("index", a, indices);
  Split s = apply_basic("index", a, resolved);
  if (s.dims.empty()) return s.view.same(a) ? view(a, a.shape()) : s.view;
  return gather_advanced(s.view, s.dims, s.indices, indices);
}

Tensor& index_put_(Tensor& a, std::span<const TensorIndex> indices, const Tensor& value_in, bool accumulate) {
  check_defined("index_put_", a, "self");
  check_defined("index_put_", value_in, "value");
  // float8 moves as bytes; torch's accumulating form adds in float8 one element at a time: the index_put kernel's
  // accumulating loop (docs/dtypes.md).
  if (storage_only::float8(a) && !accumulate) [[unlikely]] {
    DG_CHECK(value_in.dtype() == a.dtype(), Runtime, "[index_put_] Index put requires the source and destination "
             "dtypes match, got ", dtype_torch_name(a.dtype()), " for the destination and ",
             dtype_torch_name(value_in.dtype()), " for the source.");
    storage_only::index_put_(a, indices, value_in);
    return a;
  }
  // A 0-dim value may live on the CPU (torch's CPU scalars); the advanced path needs any other on a's device.
  const Tensor value = value_in.dim() == 0 ? to_device(value_in, a.device()) : value_in;
  check_inplace("index_put_", a, value.requires_grad());
  const IndexList resolved = resolve("index_put_", a, indices);
  const bool record = is_differentiable(a.dtype()) && needs_grad_any({a, value});
  // Recorded before the write (input 0's edge is a's old history); an in-place op on a view rebases the
  // base's history (autograd/views.cpp).
  Ref<Node> node;
  if (record) {
    node = make_ref<Node>(std::string("index_put_"), nullptr, 1);
    // The index tensors are saved (version-checked: modifying one in place before backward raises).
    size_t saved_indices = 0;
    for (const TensorIndex& i : indices)  // as given: a mask, not the positions resolve made of it
      if (i.kind == TensorIndex::Kind::Tensor && i.tensor.defined()) {
        node->save(i.tensor);
        ++saved_indices;
      }
    node->closure = [resolved, saved_indices, value_shape = Dims(value.shape()), accumulate](
                        Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
      for (size_t j = 0; j < saved_indices; ++j) n.saved(j);  // raises if an index was modified in place
      if (n.needs_grad(0)) {
        if (accumulate) {
          gi[0] = g[0];
        } else {
          Tensor cleared = clone(g[0]);
          index_put_(cleared, resolved, Scalar(0));
          gi[0] = cleared;
        }
      }
      if (n.needs_grad(1)) gi[1] = reduce_to_value(index(g[0], resolved), value_shape);
    };
    Tensor inputs[2] = {a, value};
    record_node(node, inputs, {});
  }
  write(a, resolved, value, accumulate);
  if (node) rebase_history(a, std::move(node));
  return a;
}

Tensor& index_put_(Tensor& a, std::span<const TensorIndex> indices, Scalar value) {
  check_defined("index_put_", a, "self");
  check_inplace("index_put_", a);
  if (needs_grad_any({a})) return index_put_(a, indices, full(Dims{}, value, {.dtype = a.dtype(), .device = a.device()}));
  // A lone bool mask over leading dims: masked_fill_ with the mask broadcast over the trailing dims.
  if (indices.size() == 1 && indices[0].kind == TensorIndex::Kind::Tensor && indices[0].tensor.defined() &&
      indices[0].tensor.dtype() == DType::Bool && indices[0].tensor.dim() > 0 && indices[0].tensor.dim() <= a.dim()) {
    const Tensor& mask = indices[0].tensor;
    if (same_shape(mask.shape(), a.shape().subspan(0, static_cast<size_t>(mask.dim())))) {
      Dims shape(mask.shape());
      while (static_cast<int64_t>(shape.size()) < a.dim()) shape.push_back(1);
      masked_fill_(a, reshape(mask, shape), value);
      return a;
    }
  }
  const IndexList resolved = resolve("index_put_", a, indices);
  NoGradGuard no_grad;
  Split s = apply_basic("index_put_", a, resolved);
  if (s.dims.empty()) fill_(s.view, value);
  else put_advanced(s.view, s.dims, s.indices, full(Dims{}, value, {.dtype = a.dtype(), .device = a.device()}), false);
  return a;
}

Tensor nonzero(const Tensor& a) {
  check_defined("nonzero", a);
  Tensor input;
  {
    NoGradGuard no_grad;
    input = contiguous(detach(a));
  }
  HostReadScope read("nonzero");
  const Tensor on_host = to_device(input, Device::cpu());  // a device's tensor is counted through a copy
  on_host.wait_readable();
  int64_t count = 0;
  DG_CHECK(!is_storage_only(on_host.dtype()), NotImplemented, "[nonzero] not implemented for '",
           dtype_torch_name(on_host.dtype()), "'");  // the count below visits the compute dtypes only
  visit_dtype(on_host.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* p = on_host.data<T>();
    for (int64_t i = 0; i < on_host.numel(); ++i) count += static_cast<C>(p[i]) != C(0);
  });
  Tensor out = Tensor::empty(Dims{count, input.dim()}, DType::Int64, input.device());
  enqueue(op_nonzero, {input}, {out});
  return out;
}

}  // namespace dg
