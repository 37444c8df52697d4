// The ops torch 2.13 runs on the storage-only dtypes (uint32, uint64, float8) beyond copies and comparisons for
// equality, composed of kernels that take them: a conversion, or a view as the signed integer of the same width
// (docs/dtypes.md, "Storage-only dtypes"). Each op calls these behind one dtype test, when an operand has such a
// dtype; an op torch refuses on a dtype is not here and reaches enqueue, which raises NotImplementedError.
#pragma once
#include <span>

#include "dygrad/core/tensor.h"
#include "dygrad/ops/indexing.h"
#include "dygrad/ops/reduce.h"

namespace dg::storage_only {

// The tests in front of each op (one dtype comparison on the ordinary path).
inline bool has(const Tensor& t) { return t.defined() && is_storage_only(t.dtype()); }
inline bool wide_unsigned(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::UInt32 || t.dtype() == DType::UInt64);
}
inline bool float8(const Tensor& t) { return t.defined() && is_float8(t.dtype()); }

// a * b where an operand is uint32/uint64 or float8 and the result has that dtype; nullopt-like: an undefined
// Tensor where the result is another dtype (a float32 from uint32 * float32: the ordinary path computes it).
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
bool mul_(Tensor& a, const Tensor& b);  // false: not a storage-only result (the caller goes on as usual)
bool mul_(Tensor& a, Scalar b);
// out= of a composed result: torch's cast rule and dygrad's shape rule (out= is never resized), then a copy into out.
Tensor& into_out(const char* api, Tensor& out, const Tensor& result);
// uint32/uint64: the sum in int64 (torch's result dtype).
Tensor sum(const Tensor& a, IntSpan dims, bool keepdim);
// uint32/uint64: sorted as unsigned integers (a view as the signed type with the top bit flipped keeps the order).
ValuesIndices sort(const Tensor& a, int64_t dim, bool descending, bool stable);
// float8: `x < 0 ? -x : x` as torch's (the sign bit of the values below zero), bitwise.
Tensor abs(const Tensor& a);
// float8: computed in float32 (exact for float8 operands) and rounded once to the float8 type, as torch's kernels.
// mm: two matrices of one float8 type (ops/linalg.cpp checked). addmm: beta * input + alpha * (mat1 @ mat2), all
// in float32 and rounded once (torch's float8 addmm, bitwise in the tests).
Tensor mm(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, Scalar beta, Scalar alpha);
// uint32/uint64 floor, ceil, trunc, round: the values unchanged (a copy), as torch's.
Tensor round_integers(const Tensor& a);
// Rows moved by width: a view as the integer type of the same size (no gradient: these dtypes have none).
Tensor embedding(const Tensor& weight, const Tensor& indices);
// float8: moved as bytes (a view as uint8).
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
void index_put_(Tensor& a, std::span<const TensorIndex> indices, const Tensor& value);

}  // namespace dg::storage_only
