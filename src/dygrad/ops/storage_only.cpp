// The storage-only dtypes' composed ops (ops/storage_only.h, docs/dtypes.md): each is a conversion or a same-width
// view around a kernel of the compute dtypes, bitwise torch's result.
#include "dygrad/ops/storage_only.h"

#include <algorithm>
#include <cstdint>

#include "dygrad/autograd/node.h"
#include "dygrad/core/error.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/elementwise_call.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/linalg.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/nn.h"
#include "dygrad/ops/shape.h"
#include "dygrad/ops/sort.h"

namespace dg::storage_only {
namespace {
bool wide_unsigned_type(DType t) { return t == DType::UInt32 || t == DType::UInt64; }
// The signed type of a uint32/uint64's width: its kernels give the same bits (two's complement wraps as unsigned
// arithmetic does, for add, sub, mul and the bitwise ops).
DType signed_twin(DType t) { return t == DType::UInt32 ? DType::Int32 : DType::Int64; }
Tensor as_signed(const Tensor& a, DType unsigned_type) {
  return view_dtype(to(a, unsigned_type), signed_twin(unsigned_type));
}
// torch multiplies float8 by float8 of its type only, and not by one element broadcast (shape (1,), a 0-dim tensor,
// a stride-0 expansion): its kernel takes that operand as a scalar, a path without float8. The ordinary path refuses
// what is not composed here, with the same NotImplementedError.
bool float8_pair(const Tensor& a, const Tensor& b) {
  if (!is_float8(a.dtype()) || a.dtype() != b.dtype()) return false;
  for (int64_t d = 0; d < b.dim(); ++d)
    if (b.shape()[d] != 1 && b.strides()[d] != 0) return true;
  return false;
}
}  // namespace

Tensor mul(const Tensor& a, const Tensor& b) {
  const DType result = result_type(a, b);
  if (wide_unsigned_type(result)) return view_dtype(dg::mul(as_signed(a, result), as_signed(b, result)), result);
  if (float8_pair(a, b))
    return to(dg::mul(to(a, DType::Float32), to(b, DType::Float32)), result);
  return Tensor();
}

Tensor mul(const Tensor& a, Scalar b) {
  const DType result = result_type(a, b);
  // float8 with a Python number: torch has no kernel (mul_scalar), the ordinary path refuses it as torch does.
  if (wide_unsigned_type(result)) return view_dtype(dg::mul(as_signed(a, result), b), result);
  return Tensor();
}

bool mul_(Tensor& a, const Tensor& b) {
  if (wide_unsigned_type(a.dtype())) {
    Tensor self = view_dtype(a, signed_twin(a.dtype()));
    dg::mul_(self, as_signed(b, a.dtype()));
    return true;
  }
  if (float8_pair(a, b)) {
    copy_(a, dg::mul(to(a, DType::Float32), to(b, DType::Float32)));
    return true;
  }
  return false;
}

bool mul_(Tensor& a, Scalar b) {
  if (!wide_unsigned_type(a.dtype()) || b.is_floating()) return false;  // a float scalar: float32, refused in place
  Tensor self = view_dtype(a, signed_twin(a.dtype()));
  dg::mul_(self, b);
  return true;
}

Tensor& into_out(const char* api, Tensor& out, const Tensor& result) {
  DG_CHECK(!(grad_enabled() && (result.requires_grad() || out.requires_grad())), Runtime, "[", api, "] functions "
           "with out=... arguments don't support automatic differentiation, but one of the arguments requires grad");
  DG_CHECK(can_cast_result(result.dtype(), out.dtype()), Runtime, "[", api, "] result type ",
           dtype_name(result.dtype()), " can't be cast to the desired output type ", dtype_name(out.dtype()));
  DG_CHECK(std::ranges::equal(out.shape(), result.shape()), Runtime, "[", api, "] out= of shape ", out.shape(),
           " doesn't match the broadcast shape ", result.shape(), " (dygrad does not resize out=)");
  copy_(out, result);
  return out;
}

Tensor sum(const Tensor& a, IntSpan dims, bool keepdim) { return dg::sum(to(a, DType::Int64), dims, keepdim); }

ValuesIndices sort(const Tensor& a, int64_t dim, bool descending, bool stable) {
  // x -> x ^ 2**(w-1) maps [0, 2**w) onto the signed range in the same order.
  const DType twin = signed_twin(a.dtype());
  const Scalar top = twin == DType::Int32 ? Scalar(INT32_MIN) : Scalar(INT64_MIN);
  ValuesIndices out = dg::sort(bitwise_xor(view_dtype(a, twin), top), dim, descending, stable);
  out.values = view_dtype(bitwise_xor(out.values, top), a.dtype());
  return out;
}

// torch's float8 abs is `x < 0 ? -x : x`: the sign bit flips where the value is below zero, and -0.0 and the NaNs
// keep their bits.
Tensor abs(const Tensor& a) {
  const Tensor bytes = view_dtype(a, DType::UInt8);
  return view_dtype(where(lt(to(a, DType::Float32), Scalar(0)), bitwise_xor(bytes, Scalar(0x80)), bytes), a.dtype());
}

Tensor mm(const Tensor& a, const Tensor& b) {
  return to(dg::mm(to(a, DType::Float32), to(b, DType::Float32)), a.dtype());
}

Tensor round_integers(const Tensor& a) { return clone(a); }

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  const DType bits = itemsize(weight.dtype()) == 1 ? DType::UInt8 : itemsize(weight.dtype()) == 4 ? DType::Int32
                                                                                                  : DType::Int64;
  return view_dtype(dg::embedding(view_dtype(weight, bits), indices), weight.dtype());
}

Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha) {
  const DType f32 = DType::Float32;
  return to(dg::addmm(to(input, f32), to(mat1, f32), to(mat2, f32), beta, alpha), mat1.dtype());
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  return view_dtype(dg::index_select(view_dtype(a, DType::UInt8), dim, index), a.dtype());
}

void index_put_(Tensor& a, std::span<const TensorIndex> indices, const Tensor& value) {
  Tensor bytes = view_dtype(a, DType::UInt8);
  dg::index_put_(bytes, indices, view_dtype(value, DType::UInt8), false);
}

}  // namespace dg::storage_only
