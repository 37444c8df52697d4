// dygrad.jit's elementwise fusion (jit/fusion.h, docs/jit-fusion.md): which ops a fused program takes, the runs they
// form (flat, row and full-reduction programs) and the `jit_fused` op. The pass pipeline is jit/passes.cpp; the C++
// generator jit/fusion_codegen.cpp.
#include "dygrad/jit/fusion.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "dygrad/core/error.h"
#include "dygrad/jit/graph.h"
#include "dygrad/jit/passes.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg::jit {

namespace {
OpCost fused_cost(const Task& task) {
  const FusedProgram& p = *task.attrs.get<FusedAttrs>().program;
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  OpCost c;
  c.flops = static_cast<double>(n) * static_cast<double>(p.records.size());
  double bytes = 0;
  for (const Tensor& t : task.inputs)
    if (t.defined()) bytes += static_cast<double>(t.numel()) * static_cast<double>(t.itemsize());
  for (const Tensor& t : task.outputs)
    if (t.defined()) bytes += static_cast<double>(t.numel()) * static_cast<double>(t.itemsize());
  c.bytes = bytes;
  return c;
}
}  // namespace

const OpDef op_jit_fused("jit_fused", attrs_type<FusedAttrs>(),
                         {.fusion = FusionClass::Elementwise, .cost = fused_cost});

// ---------------------------------------------------------------------------------------------------------------
// Fusion

namespace {

// The elementwise ops fusion understands: their program op and scalar.
struct Fusible {
  FusedOpCode code;
  int arity;
  bool ok = false;
  double k = 0;
  double k2 = 0;
};

Fusible classify(const GraphOp& op, DType dtype) {
  static const std::map<std::string, std::pair<FusedOpCode, int>> table = {
      {"add", {FusedOpCode::Add, 2}},
      {"mul", {FusedOpCode::Mul, 2}},
      {"div", {FusedOpCode::Div, 2}},
      {"add_scalar", {FusedOpCode::AddScalar, 1}},
      {"mul_scalar", {FusedOpCode::MulScalar, 1}},
      {"div_scalar", {FusedOpCode::DivScalar, 1}},
      {"rsub_scalar", {FusedOpCode::RsubScalar, 1}},
      {"rdiv_scalar", {FusedOpCode::RdivScalar, 1}},
      {"neg", {FusedOpCode::Neg, 1}},
      {"sqrt", {FusedOpCode::Sqrt, 1}},
      {"rsqrt", {FusedOpCode::Rsqrt, 1}},
      {"reciprocal", {FusedOpCode::Reciprocal, 1}},
      {"abs", {FusedOpCode::Abs, 1}},
      {"relu", {FusedOpCode::Relu, 1}},
      {"sigmoid", {FusedOpCode::Sigmoid, 1}},
      {"silu", {FusedOpCode::Silu, 1}},
      {"tanh", {FusedOpCode::Tanh, 1}},
      {"pow_scalar", {FusedOpCode::PowScalar, 1}},
      {"maximum", {FusedOpCode::Maximum, 2}},
      {"minimum", {FusedOpCode::Minimum, 2}},
      {"sigmoid_backward", {FusedOpCode::SigmoidBackward, 2}},
      {"tanh_backward", {FusedOpCode::TanhBackward, 2}},
      {"silu_backward", {FusedOpCode::SiluBackward, 2}},
      {"relu_backward", {FusedOpCode::ReluBackward, 2}},
      {"copy", {FusedOpCode::Copy, 1}},
      {"exp", {FusedOpCode::Exp, 1}},
      {"log", {FusedOpCode::Log, 1}},
      {"expm1", {FusedOpCode::Expm1, 1}},
      {"log1p", {FusedOpCode::Log1p, 1}},
      {"gelu", {FusedOpCode::Gelu, 1}},
      {"gelu_backward", {FusedOpCode::GeluBackward, 2}},
      {"sign", {FusedOpCode::Sign, 1}},
      {"lerp_scalar", {FusedOpCode::LerpScalar, 2}},
      {"masked_fill", {FusedOpCode::MaskedFill, 2}},
      {"eq", {FusedOpCode::Eq, 2}},
      {"ne", {FusedOpCode::Ne, 2}},
      {"lt", {FusedOpCode::Lt, 2}},
      {"le", {FusedOpCode::Le, 2}},
      {"gt", {FusedOpCode::Gt, 2}},
      {"ge", {FusedOpCode::Ge, 2}},
      {"eq_scalar", {FusedOpCode::EqScalar, 1}},
      {"ne_scalar", {FusedOpCode::NeScalar, 1}},
      {"lt_scalar", {FusedOpCode::LtScalar, 1}},
      {"le_scalar", {FusedOpCode::LeScalar, 1}},
      {"gt_scalar", {FusedOpCode::GtScalar, 1}},
      {"ge_scalar", {FusedOpCode::GeScalar, 1}},
      {"logical_not", {FusedOpCode::LogicalNot, 1}},
      {"logical_and", {FusedOpCode::LogicalAnd, 2}},
      {"logical_or", {FusedOpCode::LogicalOr, 2}},
      // `~mask`, `m1 & m2`, `m1 | m2`, `m1 ^ m2` record the bitwise ops: on booleans (fusible_in_run checks the
      // dtypes) they are the logical ones
      {"bitwise_not", {FusedOpCode::LogicalNot, 1}},
      {"bitwise_and", {FusedOpCode::LogicalAnd, 2}},
      {"bitwise_or", {FusedOpCode::LogicalOr, 2}},
      {"bitwise_xor", {FusedOpCode::LogicalXor, 2}},
      {"where", {FusedOpCode::Where, 3}},
      {"where_scalar", {FusedOpCode::WhereScalar, 2}},
      {"clamp_scalar", {FusedOpCode::ClampScalar, 1}},
      {"clamp_tensor", {FusedOpCode::ClampTensor, 3}},
      {"sin", {FusedOpCode::Sin, 1}},
      {"cos", {FusedOpCode::Cos, 1}},
  };
  Fusible f{};
  auto it = table.find(op.op->name);
  if (it == table.end()) return f;
  f.code = it->second.first;
  f.arity = it->second.second;
  if (f.code == FusedOpCode::ClampTensor && op.attrs.type() == attrs_type<ClampAttrs>()) {
    const ClampAttrs& c = op.attrs.get<ClampAttrs>();  // its inputs (x, min, max), (x, min) or (x, max)
    if (!c.has_min || !c.has_max) {
      f.code = c.has_min ? FusedOpCode::ClampMinTensor : FusedOpCode::ClampMaxTensor;
      f.arity = 2;
    }
  }
  if (op.op->fusion != FusionClass::Elementwise || (op.op->flags & (kOpSideEffect | kOpRandom))) return f;
  if (op.inputs.size() != size_t(f.arity) || op.outputs.size() != 1) return f;
  // The scalar as eager's kernel converts it (Scalar::to<compute type>()).
  auto to_compute = [&](const Scalar& s) {
    return dtype == DType::Float64 ? s.to<double>() : static_cast<double>(s.to<float>());
  };
  switch (f.code) {
    case FusedOpCode::Add: {
      const Scalar alpha = op.attrs.get<AddAttrs>().alpha;
      f.k = alpha.to_double() == 1.0 ? 1.0 : to_compute(alpha);
      break;
    }
    case FusedOpCode::AddScalar: case FusedOpCode::MulScalar: case FusedOpCode::DivScalar:
    case FusedOpCode::MaskedFill:
      // eager's kernel stores value.to<T>() (a NaN's sign and payload included: only a number here)
      if (op.attrs.get<ScalarAttrs>().value.to_double() != op.attrs.get<ScalarAttrs>().value.to_double()) return f;
      f.k = to_compute(op.attrs.get<ScalarAttrs>().value);
      break;
    case FusedOpCode::RsubScalar: case FusedOpCode::RdivScalar: case FusedOpCode::LerpScalar:
      f.k = to_compute(op.attrs.get<ScalarAttrs>().value);
      break;
    case FusedOpCode::PowScalar: {
      const double p = op.attrs.get<ScalarAttrs>().value.to_double();
      // eager picks its formula from the double and converts the exponent once: only exponents the compute type
      // holds exactly give the same choice here
      if (dtype == DType::Float32 && static_cast<double>(static_cast<float>(p)) != p) return f;
      f.k = p;
      break;
    }
    case FusedOpCode::Gelu: case FusedOpCode::GeluBackward:
      f.k = op.attrs.get<GeluAttrs>().tanh_approximation ? 1.0 : 0.0;
      break;
    case FusedOpCode::EqScalar: case FusedOpCode::NeScalar: case FusedOpCode::LtScalar: case FusedOpCode::LeScalar:
    case FusedOpCode::GtScalar: case FusedOpCode::GeScalar:
      f.k = to_compute(op.attrs.get<ScalarAttrs>().value);  // a NaN compares as any NaN: its bits do not matter
      break;
    case FusedOpCode::WhereScalar: {
      const WhereScalarAttrs& w = op.attrs.get<WhereScalarAttrs>();
      // eager stores value.to<T>(), a NaN's sign and payload included: only a number here
      if (w.value.to_double() != w.value.to_double()) return f;
      if (w.scalar_when_true) f.code = FusedOpCode::WhereScalarTrue;
      f.k = to_compute(w.value);
      break;
    }
    case FusedOpCode::ClampScalar: {
      const ClampAttrs& c = op.attrs.get<ClampAttrs>();
      // a NaN bound makes eager's kernel fill a quiet NaN: not taken (no program op for it)
      if ((c.has_min && c.min.to_double() != c.min.to_double()) ||
          (c.has_max && c.max.to_double() != c.max.to_double()))
        return f;
      constexpr double inf = std::numeric_limits<double>::infinity();
      f.k = c.has_min ? to_compute(c.min) : -inf;
      f.k2 = c.has_max ? to_compute(c.max) : inf;
      break;
    }
    default:
      break;
  }
  f.ok = true;
  return f;
}

// An operand's strides over the iteration shape (right-aligned broadcasting: 0 along a broadcast dim).
Dims broadcast_strides(const Value& v, const Dims& shape) {
  Dims out(shape.size(), 0);
  const size_t off = shape.size() - v.sizes.size();
  for (size_t d = 0; d < v.sizes.size(); ++d)
    out[off + d] = v.sizes[d] == 1 && shape[off + d] != 1 ? 0 : v.strides[d];
  return out;
}

struct SlotKey {
  int32_t buffer;
  int64_t offset;
  Dims strides;  // over the group's shape
  DType dtype;
  bool operator==(const SlotKey& o) const {
    return buffer == o.buffer && offset == o.offset && std::ranges::equal(strides, o.strides) && dtype == o.dtype;
  }
};

// Whether the slots of `set` (keys over `shape`) never reach a common element: then a store through one changes
// nothing another reads (the lowered `cat`'s interleaved pieces: strides 2, offsets 0 and 1). Two slots of the same
// strides whose offsets differ by a multiple of none of their steps' common divisor are disjoint; so are two whose
// element ranges do not meet.
bool disjoint_keys(const std::set<int32_t>& set, const std::vector<SlotKey>& keys, const Dims& shape) {
  auto range = [&](const SlotKey& k) {
    int64_t lo = k.offset, hi = k.offset;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t span = (shape[d] - 1) * k.strides[d];
      (span < 0 ? lo : hi) += span;
    }
    return std::pair<int64_t, int64_t>{lo, hi};
  };
  for (auto a = set.begin(); a != set.end(); ++a)
    for (auto b = std::next(a); b != set.end(); ++b) {
      const SlotKey &x = keys[size_t(*a)], &y = keys[size_t(*b)];
      const auto [xl, xh] = range(x);
      const auto [yl, yh] = range(y);
      if (x.dtype != y.dtype) return false;  // one buffer read as two dtypes: offsets in different elements
      if (xh < yl || yh < xl) continue;
      if (!std::ranges::equal(x.strides, y.strides)) return false;
      int64_t step = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] > 1) step = std::gcd(step, std::abs(x.strides[d]));
      const int64_t delta = std::abs(x.offset - y.offset);
      if (step == 0 || delta % step == 0) return false;
    }
  return true;
}

std::string op_source(const GraphOp& op) {
  std::string s = op.op->name;
  if (op.site.file) s += std::string(" (") + op.site.file + ":" + std::to_string(op.site.line) + ")";
  return s;
}

constexpr size_t kMaxGroupSlots = 32;

// A reduction a row program can take: over the innermost dim of a float32/float64 value contiguous along it, with more
// than one row and rows of more than one element, into a contiguous output of one value per row (keepdim or not), of
// the input's dtype. That is eager's row path, whose order the program keeps: `sum` (reduce.cpp's sum_strided on a
// contiguous row: eight_lane_sum), `amax` and `amin` (reduce_minmax.cpp's row_extremum: lane_extremum), `max` and
// `min` over the last dim (first_extremum: their values; taken only where the indices are an internal buffer nothing
// reads), `var` and `std` (var_kernel's row: float64 accumulation) and `logsumexp` (logsumexp_kernel's row), the last
// five as backend/cpu/row_reductions.h computes them. A single output (a full reduction: chunked, another order), a
// column or strided row, indices that are read, or a reduction with a dtype (a cast) is not one.
struct RowReduction {
  bool ok = false;
  FusedOpCode code = FusedOpCode::RowSum;
  double k = 0;  // var / std: the correction
  DType dtype = DType::Float32;
  Dims shape;  // the reduced input's: [rows..., C]
};
template <typename Unread>
RowReduction row_reduction_at(const GraphOp& op, const std::vector<Value>& values, Unread&& unread) {
  static const std::map<std::string, FusedOpCode> codes = {
      {"sum", FusedOpCode::RowSum},         {"amax", FusedOpCode::RowMax},
      {"amin", FusedOpCode::RowMin},        {"max_dim", FusedOpCode::RowMaxValue},
      {"min_dim", FusedOpCode::RowMinValue}, {"var", FusedOpCode::RowVar},
      {"std", FusedOpCode::RowStd},         {"logsumexp", FusedOpCode::RowLogsumexp},
  };
  RowReduction r;
  const auto it = codes.find(op.op->name);
  if (it == codes.end() || op.op->fusion != FusionClass::Reduction) return r;
  const bool with_indices = it->second == FusedOpCode::RowMaxValue || it->second == FusedOpCode::RowMinValue;
  const bool variance = it->second == FusedOpCode::RowVar || it->second == FusedOpCode::RowStd;
  if (op.inputs.size() != 1 || op.outputs.size() != (with_indices ? 2u : 1u) || op.inputs[0] < 0 ||
      op.outputs[0] < 0 || op.attrs.type() != (variance ? attrs_type<VarianceAttrs>() : attrs_type<ReduceAttrs>()))
    return r;
  if (with_indices && op.outputs[1] >= 0 && !unread(op.outputs[1])) return r;
  const Value& in = values[size_t(op.inputs[0])];
  const Value& out = values[size_t(op.outputs[0])];
  const size_t nd = in.sizes.size();
  if (nd < 2 || (in.dtype != DType::Float32 && in.dtype != DType::Float64) || out.dtype != in.dtype) return r;
  const Dims& dims = variance ? op.attrs.get<VarianceAttrs>().dims : op.attrs.get<ReduceAttrs>().dims;
  if (dims.size() != 1 || dims[0] != int64_t(nd) - 1 || in.strides[nd - 1] != 1 || in.sizes[nd - 1] < 2) return r;
  if (out.sizes.size() != nd && out.sizes.size() + 1 != nd) return r;
  if (out.sizes.size() == nd && out.sizes[nd - 1] != 1) return r;
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) {
    if (out.sizes[d] != in.sizes[d]) return r;
    rows *= in.sizes[d];
  }
  if (rows < 2) return r;
  int64_t expect = 1;  // the output contiguous: one value per row, rows in order
  for (size_t d = out.sizes.size(); d-- > 0;) {
    if (out.sizes[d] != 1 && out.strides[d] != expect) return r;
    expect *= out.sizes[d];
  }
  r.ok = true;
  r.code = it->second;
  if (variance) r.k = op.attrs.get<VarianceAttrs>().correction;
  r.dtype = in.dtype;
  r.shape = in.sizes;
  return r;
}

// A sum a full-reduction program can end with (a loss tail: `((x - y) ** 2).mean()`'s sum): every element of a
// float32/float64 value contiguous in memory (at least two) into one output of its dtype. That is eager's full
// reduction over a contiguous input (reduce.cpp's sum_kernel: chunks of kFullReduceChunk summed with eight_lane_sum,
// the partials added in order), whose order the program keeps. A strided input (another order: sum_strided per
// chunk), a sum with a dtype, or an output of more than one element is not one.
struct FullSumAt {
  bool ok = false;
  DType dtype = DType::Float32;
  Dims shape;  // the summed input's
};
FullSumAt full_sum_at(const GraphOp& op, const std::vector<Value>& values) {
  FullSumAt f;
  if (std::string_view(op.op->name) != "sum" || op.op->fusion != FusionClass::Reduction) return f;
  if (op.inputs.size() != 1 || op.outputs.size() != 1 || op.inputs[0] < 0 || op.outputs[0] < 0 ||
      op.attrs.type() != attrs_type<ReduceAttrs>())
    return f;
  const Value& in = values[size_t(op.inputs[0])];
  const Value& out = values[size_t(op.outputs[0])];
  if ((in.dtype != DType::Float32 && in.dtype != DType::Float64) || out.dtype != in.dtype) return f;
  const size_t nd = in.sizes.size();
  std::vector<uint8_t> reduced(nd, 0);
  for (int64_t d : op.attrs.get<ReduceAttrs>().dims)
    if (d >= 0 && size_t(d) < nd) reduced[size_t(d)] = 1;
  int64_t n = 1, expect = 1;
  for (size_t d = nd; d-- > 0;) {
    if (in.sizes[d] == 1) continue;
    if (!reduced[d] || in.strides[d] != expect) return f;  // one output; the input contiguous
    expect *= in.sizes[d];
    n *= in.sizes[d];
  }
  if (n < 2) return f;
  f.ok = true;
  f.dtype = in.dtype;
  f.shape = in.sizes;
  return f;
}

// The sizes of the iteration over `shape` in its row-major order, coalesced for slots of these strides (a dim merged
// into the next inner one where every slot steps across both contiguously; size-1 dims dropped), as fuse() builds a
// program's `dims` when it keeps the order.
Dims coalesced_sizes(const std::vector<Dims>& strides, const Dims& shape) {
  Dims dims;
  std::vector<int64_t> inner(strides.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !dims.empty();
    for (size_t s = 0; s < strides.size() && merge; ++s) merge = inner[s] == strides[s][d] * shape[d];
    if (merge) dims.back() *= shape[d];
    else dims.push_back(shape[d]);
    for (size_t s = 0; s < strides.size(); ++s) inner[s] = strides[s][d];
  }
  return dims;
}

// Whether a full-reduction program can keep eager's chunks over this iteration: one dim (chunks cut anywhere), or rows
// of a multiple of eight elements that divide a chunk (a chunk is whole rows, each row's elements folded into the
// chunk's eight lanes in order: the lane of an element is its index in the chunk mod 8).
bool full_sum_iteration(const Dims& dims) {
  return dims.size() <= 1 || (dims.back() % 8 == 0 && kFullReduceChunk % dims.back() == 0);
}

}  // namespace

// Booleans in a program (runtime/fused_program.h): which operands of a program op are boolean (0 or 1: a boolean
// slot or a boolean result), and whether its result is one. LogicalNot reads either (eager's logical_not reads any
// dtype as a == 0).
static bool boolean_result(FusedOpCode c) { return c >= FusedOpCode::Eq && c <= FusedOpCode::LogicalXor; }
static bool boolean_operand(FusedOpCode c, size_t a) {
  switch (c) {
    case FusedOpCode::MaskedFill: return a == 1;
    case FusedOpCode::LogicalAnd: case FusedOpCode::LogicalOr: case FusedOpCode::LogicalXor: return true;
    case FusedOpCode::Where: case FusedOpCode::WhereScalar: case FusedOpCode::WhereScalarTrue: return a == 0;
    default: return false;
  }
}
// The dtype of an op's values (its operands that are not boolean): the output's, or for a boolean result its inputs';
// Bool where every operand is boolean (a logical op on masks, computed exactly in any compute type).
static DType value_dtype(const GraphOp& op, const std::vector<Value>& values, FusedOpCode code) {
  if (!boolean_result(code)) return values[size_t(op.outputs[0])].dtype;
  for (size_t a = 0; a < op.inputs.size(); ++a)
    if (!boolean_operand(code, a) && op.inputs[a] >= 0) return values[size_t(op.inputs[a])].dtype;
  return DType::Bool;
}
// Every operand of the op of its role's dtype (boolean ones Bool, values `dtype`; LogicalNot's input either) and
// broadcast to the output, which is written whole (no stride 0 along a dim of more than one element).
static bool operands_fit(const GraphOp& op, const std::vector<Value>& values, FusedOpCode code, DType dtype) {
  const Value& out = values[size_t(op.outputs[0])];
  if (out.dtype != (boolean_result(code) ? DType::Bool : dtype)) return false;
  for (size_t a = 0; a < op.inputs.size(); ++a) {
    const int32_t v = op.inputs[a];
    if (v < 0 || values[size_t(v)].sizes.size() > out.sizes.size()) return false;
    const DType in = values[size_t(v)].dtype;
    const bool either = code == FusedOpCode::LogicalNot && in == DType::Bool;
    if (in != (boolean_operand(code, a) || either ? DType::Bool : dtype)) return false;
  }
  for (size_t d = 0; d < out.sizes.size(); ++d)
    if (out.sizes[d] > 1 && out.strides[d] == 0) return false;
  return true;
}

bool fusible_elementwise(const GraphOp& op, const std::vector<Value>& values) {
  if (op.outputs.size() != 1 || op.outputs[0] < 0) return false;
  const Fusible f = classify(op, DType::Float64);  // its program op (the scalar is converted once the type is known)
  if (!f.ok) return false;
  const DType dtype = value_dtype(op, values, f.code);
  if (dtype != DType::Float32 && dtype != DType::Float64 && dtype != DType::Bool) return false;
  // On boolean values: the comparisons of two tensors, the logical ops and where (a scalar would be converted to
  // bool by eager's kernel: a number other than 0 and 1 would not be the program's value)
  const bool on_booleans = (f.code >= FusedOpCode::Eq && f.code <= FusedOpCode::Ge) ||
                           (f.code >= FusedOpCode::LogicalNot && f.code <= FusedOpCode::LogicalXor) ||
                           f.code == FusedOpCode::Where;
  if (dtype == DType::Bool && !on_booleans) return false;
  return operands_fit(op, values, f.code, dtype) && classify(op, dtype == DType::Bool ? DType::Float32 : dtype).ok;
}

// What fusion takes beyond fusible_elementwise: bfloat16 ops (bfloat16 values, computed in float as eager's
// kernels do: compute_t<BFloat16>) and the casts between float32 and bfloat16 (`copy` with a dtype), into float32
// programs (runtime/fused_program.h). `compute`: the program's compute type; Bool for an op on booleans only, which
// joins a run of any compute type. A bfloat16 copy to bfloat16 is not taken: eager copies its bits, NaN payloads
// included, where a float round trip would make every NaN 0x7fc0; nor a bfloat16 `where` or `masked_fill`, which
// copy the chosen element's bits.
bool fusible_in_run(const GraphOp& op, const std::vector<Value>& values, DType& compute) {
  if (op.outputs.size() != 1 || op.outputs[0] < 0) return false;
  const Value& out = values[size_t(op.outputs[0])];
  const DType od = out.dtype;
  if (fusible_elementwise(op, values)) {
    compute = value_dtype(op, values, classify(op, DType::Float64).code);
    return true;
  }
  const bool is_copy = std::string_view(op.op->name) == "copy";
  if (!is_copy) {
    const Fusible f = classify(op, DType::Float32);
    switch (f.code) {
      case FusedOpCode::Where: case FusedOpCode::WhereScalar: case FusedOpCode::WhereScalarTrue:
      case FusedOpCode::MaskedFill:
        return false;
      default:
        break;
    }
    compute = DType::Float32;
    return f.ok && value_dtype(op, values, f.code) == DType::BFloat16 &&
           operands_fit(op, values, f.code, DType::BFloat16);
  }
  if (od != DType::Float32 && od != DType::BFloat16) return false;
  for (int32_t v : op.inputs) {
    if (v < 0 || values[size_t(v)].sizes.size() > out.sizes.size()) return false;
    const DType in = values[size_t(v)].dtype;
    if (in == od || (in != DType::Float32 && in != DType::BFloat16)) return false;
  }
  for (size_t d = 0; d < out.sizes.size(); ++d)
    if (out.sizes[d] > 1 && out.strides[d] == 0) return false;
  compute = DType::Float32;
  return classify(op, compute).ok;
}

// An operand whose dtype is not the compute type's (bfloat16, a boolean): a vector record's only (a row program's
// row records and reductions, and the records on a full sum's total, read and write the compute type).
static bool off_compute_dtype(const GraphOp& op, const std::vector<Value>& values) {
  for (const auto* list : {&op.inputs, &op.outputs})
    for (int32_t v : *list)
      if (v >= 0 && (values[size_t(v)].dtype == DType::BFloat16 || values[size_t(v)].dtype == DType::Bool)) return true;
  return false;
}

// Elementwise fusion: maximal runs of consecutive fusible sub-ops (fusion class Elementwise, a functor the program
// knows, float32 or float64 values all of one dtype with booleans beside them, outputs of one shape) become one
// `jit_fused` sub-op. A run stops where a buffer the run writes would be accessed through a second geometry (a store
// could then change what another element reads), where its slots would pass kMaxGroupSlots, or at any other op: ops
// never move past each other, so every ordering eager had with the ops outside stays. An internal buffer that only the run uses is
// eliminated (kept in registers; the arena no longer holds it); every other written buffer is stored.
//
// Row reductions (row_reduction_at: eager's row path of `sum`, `amax`, `var`, ...) join a run of the shape [rows..., C]
// they reduce, as can start one, and make it a row program (runtime/fused_program.h): after one, the elementwise ops of
// the row shape ([rows..., 1] or [rows...]: the mean's divide, the `+ eps`, the rsqrt) join as row records, and the ops
// of the run's shape that follow, reading the row values broadcast along the row, as the next pass.
std::string Passes::fuse(Graph& g) {
  if (!g.device_.is_cpu() || !op_jit_fused.kernel(Device::Type::CPU)) return "no fusion on this device";
  const size_t cats = lower_cats(g);
  // Per buffer, the ops that use it (any operand).
  std::vector<std::vector<int32_t>> users(g.buffers_.size());
  for (size_t i = 0; i < g.ops_.size(); ++i)
    for (const auto* list : {&g.ops_[i].inputs, &g.ops_[i].outputs})
      for (int32_t v : *list)
        if (v >= 0) {
          auto& u = users[size_t(g.values_[size_t(v)].buffer)];
          if (u.empty() || u.back() != int32_t(i)) u.push_back(int32_t(i));
        }
  std::vector<uint8_t> in_result(g.buffers_.size(), 0);
  for (int32_t v : g.results_)
    if (v >= 0) in_result[size_t(g.values_[size_t(v)].buffer)] = 1;

  // A value of op i's that nothing else reads or writes and nothing outside the graph sees (max(dim)'s indices, which
  // the fused program does not compute).
  auto unread = [&](size_t i) {
    return [&, i](int32_t v) {
      const int32_t b = g.values_[size_t(v)].buffer;
      return g.buffers_[size_t(b)].kind == BufferKind::Internal && !in_result[size_t(b)] &&
             users[size_t(b)].size() == 1 && users[size_t(b)][0] == int32_t(i);
    };
  };
  auto fusible_at = [&](size_t i, DType& dtype, Dims& shape) {
    const GraphOp& op = g.ops_[i];
    if (!fusible_in_run(op, g.values_, dtype)) return false;
    shape = g.values_[size_t(op.outputs[0])].sizes;
    return true;
  };

  enum class Kind : uint8_t { Vector, Row, Reduce };
  std::vector<GraphOp> next;
  size_t groups = 0, fused_ops = 0, eliminated = 0;
  size_t i = 0;
  while (i < g.ops_.size()) {
    DType dtype;
    Dims shape;
    if (!fusible_at(i, dtype, shape)) {
      const RowReduction r = row_reduction_at(g.ops_[i], g.values_, unread(i));
      if (!r.ok) {
        next.push_back(std::move(g.ops_[i]));
        ++i;
        continue;
      }
      dtype = r.dtype;
      shape = r.shape;
    }
    const size_t nd = shape.size();
    // The row shapes (a row program's row records): [rows..., 1] and [rows...].
    Dims keep_shape = shape, row_shape = shape;
    if (nd) {
      keep_shape.back() = 1;
      row_shape.pop_back();
    }
    // Grow the run [i, j) while the slot rule holds. A slot's key: its strides over `shape`; a value of a row op
    // without its last dim ([rows...]) is read as [rows..., 1].
    std::vector<SlotKey> keys;        // distinct geometries
    std::map<int32_t, int32_t> written_key;  // buffer written in the run -> its one key
    std::map<int32_t, std::set<int32_t>> buffer_keys;
    auto key_of = [&](int32_t v, bool squeezed) {
      const Value& val = g.values_[size_t(v)];
      Dims strides = broadcast_strides(val, squeezed ? row_shape : shape);
      if (squeezed) strides.push_back(0);
      SlotKey k{val.buffer, val.offset, std::move(strides), val.dtype};
      for (size_t s = 0; s < keys.size(); ++s)
        if (keys[s] == k) return int32_t(s);
      keys.push_back(std::move(k));
      return int32_t(keys.size() - 1);
    };
    // Per op of the run: its kind, whether it is a row op of the shape [rows...], its pass (row programs).
    std::vector<Kind> kinds;
    std::vector<uint8_t> squeezed_op;
    std::vector<int32_t> pass_of;
    int32_t pass = 0;
    bool reduced = false, vectors_in_pass = false;
    // A full sum joined (a full-reduction program): only ops of its one-element result may follow.
    bool full_run = false;
    size_t j = i;
    while (j < g.ops_.size()) {
      const GraphOp& op = g.ops_[j];
      Kind kind;
      bool squeezed = false;  // a row op of the shape [rows...]
      bool full_sum = false;  // this op is a full sum
      DType d2;
      Dims s2;
      if (fusible_at(j, d2, s2)) {
        // An op on booleans only (d2 Bool) joins a run of any compute type; a run it opened takes the first
        // compute type it meets.
        if (d2 != dtype && d2 != DType::Bool) {
          if (dtype != DType::Bool) break;
          dtype = d2;
        }
        if (full_run) {
          if (std::reduce(s2.begin(), s2.end(), int64_t(1), std::multiplies<>()) != 1) break;
          kind = Kind::Row;  // an op on the sum's single value
        } else if (std::ranges::equal(s2, shape)) {
          kind = Kind::Vector;
        } else if (reduced && (std::ranges::equal(s2, keep_shape) || std::ranges::equal(s2, row_shape))) {
          kind = Kind::Row;
          squeezed = s2.size() + 1 == nd;
        } else {
          break;
        }
      } else if (const RowReduction r = row_reduction_at(op, g.values_, unread(j)); r.ok) {
        if (full_run || r.dtype != dtype || !std::ranges::equal(r.shape, shape)) break;
        kind = Kind::Reduce;
      } else {
        // A full sum ends the run's elements: after ops of the run (the summed value computed by the run), in a run
        // without row reductions whose iteration keeps eager's chunks (full_sum_iteration).
        const FullSumAt f = full_sum_at(op, g.values_);
        if (!f.ok || j == i || full_run || reduced || f.dtype != dtype || !std::ranges::equal(f.shape, shape))
          break;
        std::vector<Dims> strides{broadcast_strides(g.values_[size_t(op.inputs[0])], shape)};
        for (const SlotKey& k : keys) strides.push_back(k.strides);
        if (!full_sum_iteration(coalesced_sizes(strides, shape))) break;
        kind = Kind::Reduce;
        full_sum = true;
      }
      const bool off = off_compute_dtype(op, g.values_);
      if (off && kind != Kind::Vector) break;  // bfloat16 and booleans: in vector records only
      const size_t keys_before = keys.size();
      auto saved_written = written_key;
      auto saved_buffers = buffer_keys;
      bool ok = true;
      for (int32_t v : op.inputs) buffer_keys[g.values_[size_t(v)].buffer].insert(key_of(v, squeezed));
      const int32_t ov = op.outputs[0];
      const int32_t ob = g.values_[size_t(ov)].buffer;
      const bool squeezed_out =
          kind == Kind::Reduce ? !full_sum && g.values_[size_t(ov)].sizes.size() + 1 == nd : squeezed;
      const int32_t ok_key = key_of(ov, squeezed_out);
      buffer_keys[ob].insert(ok_key);
      written_key[ob] = ok_key;
      for (const auto& [b, k] : written_key)
        if (buffer_keys[b].size() != 1 && !disjoint_keys(buffer_keys[b], keys, shape)) ok = false;
      if (keys.size() > kMaxGroupSlots) ok = false;
      if (!ok) {
        keys.resize(keys_before);
        written_key = std::move(saved_written);
        buffer_keys = std::move(saved_buffers);
        break;
      }
      // Passes: a reduction ends its pass; a row op after vector ops of a pass opens the next one.
      if (kind == Kind::Row && vectors_in_pass) {
        ++pass;
        vectors_in_pass = false;
      }
      kinds.push_back(kind);
      squeezed_op.push_back(squeezed);
      pass_of.push_back(pass);
      if (kind == Kind::Vector) vectors_in_pass = true;
      if (kind == Kind::Reduce) {
        ++pass;
        vectors_in_pass = false;
        (full_sum ? full_run : reduced) = true;
      }
      ++j;
    }
    if (j - i < 2) {
      next.push_back(std::move(g.ops_[i]));
      ++i;
      continue;
    }
    const size_t end = j;
    // The program of ops [i, end).
    auto prog = std::make_shared<FusedProgram>();
    prog->dtype = dtype == DType::Bool ? DType::Float32 : dtype;  // booleans only: 0 and 1 are exact in float32
    prog->shape = shape;
    std::set<int32_t> gone;  // internal buffers only the run uses
    for (const auto& [b, k] : written_key) {
      (void)k;
      const Buffer& buf = g.buffers_[size_t(b)];
      if (buf.kind != BufferKind::Internal || in_result[size_t(b)]) continue;
      bool inside = true;
      for (int32_t u : users[size_t(b)]) inside = inside && u >= int32_t(i) && u < int32_t(end);
      if (inside) gone.insert(b);
    }
    std::vector<int32_t> slot_of_key(keys.size(), -1);
    std::vector<int32_t> slot_key;  // per slot: its key
    std::vector<uint8_t> slot_read, slot_written;
    std::vector<int32_t> slot_value;  // per slot: a value of its geometry
    std::vector<int32_t> holder(keys.size(), -1);  // per key of an eliminated buffer: the record holding it now
    auto slot_for = [&](int32_t k, int32_t v) {
      if (slot_of_key[size_t(k)] < 0) {
        slot_of_key[size_t(k)] = int32_t(slot_key.size());
        slot_key.push_back(k);
        slot_value.push_back(v);
        slot_read.push_back(0);
        slot_written.push_back(0);
      }
      return slot_of_key[size_t(k)];
    };
    for (size_t m = i; m < end; ++m) {
      const GraphOp& op = g.ops_[m];
      const Kind kind = kinds[m - i];
      const bool squeezed = squeezed_op[m - i];
      FusedRecord rec;
      if (kind == Kind::Reduce && full_run) {
        rec.op = FusedOpCode::FullSum;
      } else if (kind == Kind::Reduce) {
        const RowReduction r = row_reduction_at(op, g.values_, unread(m));
        rec.op = r.code;
        rec.k = r.k;
      } else {
        const Fusible f = classify(op, prog->dtype);
        rec.op = f.code;
        rec.k = f.k;
        rec.k2 = f.k2;
      }
      rec.row = kind != Kind::Vector;
      rec.pass = pass_of[m - i];
      rec.source = op_source(op);
      rec.round_bf16 = g.values_[size_t(op.outputs[0])].dtype == DType::BFloat16;
      for (size_t a = 0; a < op.inputs.size(); ++a) {
        const int32_t v = op.inputs[a];
        const int32_t k = key_of(v, squeezed);
        if (gone.count(g.values_[size_t(v)].buffer) && holder[size_t(k)] >= 0) {
          rec.in[a].record = holder[size_t(k)];
          continue;
        }
        rec.in[a].slot = slot_for(k, v);
        slot_read[size_t(rec.in[a].slot)] = 1;
      }
      const int32_t ov = op.outputs[0];
      const int32_t k =
          key_of(ov, kind == Kind::Reduce ? !full_run && g.values_[size_t(ov)].sizes.size() + 1 == nd : squeezed);
      if (gone.count(g.values_[size_t(ov)].buffer)) {
        holder[size_t(k)] = int32_t(prog->records.size());
      } else {
        rec.out_slot = slot_for(k, ov);
        slot_written[size_t(rec.out_slot)] = 1;
      }
      if (!prog->name.empty()) prog->name += "+";
      prog->name += op.op->name;
      prog->records.push_back(std::move(rec));
    }
    // Row buffers: a vector record not stored whose values a later pass reads, or a reduction reading the whole row
    // after the loop (RowMax, ...). A stored value is read back from its slot: memory holds it once its pass is over.
    for (FusedRecord& rec : prog->records)
      for (int a = 0; a < fused_op_arity(rec.op); ++a) {
        const int32_t src = rec.in[a].record;
        if (src < 0) continue;
        FusedRecord& from = prog->records[size_t(src)];
        const bool later = !from.row && (reads_whole_row(rec.op) || rec.pass > from.pass);
        if (later && from.row_buffer < 0) from.row_buffer = prog->row_buffers++;
      }
    prog->row_reduction = reduced;
    prog->full_reduction = full_run;
    for (const FusedRecord& rec : prog->records) prog->passes = std::max(prog->passes, rec.pass + 1);
    GraphOp fused;
    fused.op = &op_jit_fused;
    fused.kernel = op_jit_fused.kernel(Device::Type::CPU);
    fused.site = g.ops_[i].site;
    const size_t slots = slot_key.size();
    prog->slot_input.assign(slots, -1);
    prog->slot_output.assign(slots, -1);
    for (size_t s = 0; s < slots; ++s) prog->slot_dtype.push_back(g.values_[size_t(slot_value[s])].dtype);
    for (size_t s = 0; s < slots; ++s) {
      if (slot_read[s]) {
        prog->slot_input[s] = int32_t(fused.inputs.size());
        fused.inputs.push_back(slot_value[s]);
      }
      if (slot_written[s]) {
        prog->slot_output[s] = int32_t(fused.outputs.size());
        fused.outputs.push_back(slot_value[s]);
      }
    }
    // The coalesced iteration: size-1 dims dropped, a dim merged into the next inner one where every slot steps
    // across both contiguously. A row program keeps its row (the innermost dim) apart.
    Dims dims;
    std::vector<Dims> strides(slots);
    auto full = [&](size_t s, size_t d) { return keys[size_t(slot_key[s])].strides[d]; };
    const size_t merged_dims = reduced ? nd - 1 : nd;
    // The loop order, outermost first. Every element of a single-pass program is computed on its own (a written
    // buffer has one geometry in the run, or disjoint slots), so any order gives the same bits; the innermost dim is
    // the one the slots step through most closely, as eager's strided iteration orders its dims: the written slots
    // decide first, then the read ones, a broadcast (stride 0) or an equal stride deciding nothing. (A transposed
    // gradient, the composed rotary embedding's backward, otherwise ran its inner loop down a column.) A row program
    // keeps the output's order, and so does a full-reduction program (the summed value's memory order: eager's).
    std::vector<size_t> order(merged_dims);
    for (size_t d = 0; d < merged_dims; ++d) order[d] = d;
    if (!reduced && !full_run) {
      std::vector<size_t> by_priority;
      for (size_t s = 0; s < slots; ++s)
        if (slot_written[s]) by_priority.push_back(s);
      for (size_t s = 0; s < slots; ++s)
        if (!slot_written[s]) by_priority.push_back(s);
      auto belongs_inside = [&](size_t a, size_t b) {  // dim a should run inside dim b
        for (size_t s : by_priority) {
          const int64_t sa = std::abs(full(s, a)), sb = std::abs(full(s, b));
          if (sa == 0 || sb == 0 || sa == sb) continue;
          return sa < sb;
        }
        return false;
      };
      for (size_t k = 1; k < order.size(); ++k)  // insertion sort: stable, no ordering axioms needed
        for (size_t m = k; m > 0 && belongs_inside(order[m - 1], order[m]); --m) std::swap(order[m - 1], order[m]);
    }
    for (size_t d : order) {
      if (shape[d] == 1) continue;
      bool merge = !dims.empty();
      for (size_t s = 0; s < slots && merge; ++s) merge = strides[s].back() == full(s, d) * shape[d];
      if (merge) {
        dims.back() *= shape[d];
        for (size_t s = 0; s < slots; ++s) strides[s].back() = full(s, d);
      } else {
        dims.push_back(shape[d]);
        for (size_t s = 0; s < slots; ++s) strides[s].push_back(full(s, d));
      }
    }
    if (dims.empty()) {
      dims.push_back(1);
      for (size_t s = 0; s < slots; ++s) strides[s].push_back(0);
    }
    DG_CHECK(!full_run || full_sum_iteration(dims), Runtime, "[jit] a full-reduction program over ",
             shape_str(shape), " iterates ", shape_str(dims), ": its chunks are not eager's");
    if (reduced) {
      dims.push_back(shape.back());
      for (size_t s = 0; s < slots; ++s) strides[s].push_back(full(s, nd - 1));
    }
    prog->dims = std::move(dims);
    prog->strides = std::move(strides);
    prog->index = int32_t(g.programs_.size());
    fused.attrs = FusedAttrs{prog, nullptr};
    g.programs_.push_back(prog);
    for (size_t k = i; k < end; ++k) {
      fused.cost.flops += g.ops_[k].cost.flops;
      fused.cost.bytes += g.ops_[k].cost.bytes;
    }
    next.push_back(std::move(fused));
    ++groups;
    fused_ops += end - i;
    eliminated += gone.size();
    i = end;
  }
  g.ops_ = std::move(next);
  const std::string lowered = cats ? ", " + std::to_string(cats) + " cat(s) as copies into their slices" : "";
  if (!groups) return "nothing to fuse" + lowered;
  return std::to_string(groups) + " group(s) of " + std::to_string(fused_ops) + " ops, " +
         std::to_string(eliminated) + " intermediate buffer(s) eliminated" + lowered;
}

}  // namespace dg::jit
