// Python-style indexing with PyTorch semantics: x[i, a:b:s, None, ..., mask, idx] and the assignment form.
// Basic indices (ints, slices, None, Ellipsis) give a view; integer/boolean tensor indices give a copy.
#pragma once
#include <cstdint>
#include <limits>
#include <span>

#include "dygrad/core/tensor.h"

namespace dg {

// One entry of an index list, as Python spells it: 3, 1:7:2, None, ..., True/False, a Tensor.
struct TensorIndex {
  enum class Kind : uint8_t { Integer, Slice, None, Ellipsis, Boolean, Tensor };
  Kind kind = Kind::None;
  int64_t integer = 0;  // Integer; Boolean: 0 or 1
  int64_t start = 0, stop = std::numeric_limits<int64_t>::max(), step = 1;  // Slice (None start/stop: 0 / max)
  Tensor tensor;        // Tensor: int64/int32 (integer index) or bool/uint8 (mask); `integer` stays 0 (1 marks
                        // an index on a new axis, internal to ops/indexing.cpp)

  static TensorIndex integer_index(int64_t i) {
    TensorIndex t;
    t.kind = Kind::Integer;
    t.integer = i;
    return t;
  }
  static TensorIndex slice(int64_t start = 0, int64_t stop = std::numeric_limits<int64_t>::max(), int64_t step = 1) {
    TensorIndex t;
    t.kind = Kind::Slice;
    t.start = start;
    t.stop = stop;
    t.step = step;
    return t;
  }
  static TensorIndex none() { return TensorIndex(); }
  static TensorIndex ellipsis() {
    TensorIndex t;
    t.kind = Kind::Ellipsis;
    return t;
  }
  static TensorIndex boolean(bool b) {
    TensorIndex t;
    t.kind = Kind::Boolean;
    t.integer = b ? 1 : 0;
    return t;
  }
  static TensorIndex tensor_index(Tensor index) {
    TensorIndex t;
    t.kind = Kind::Tensor;
    t.tensor = std::move(index);
    return t;
  }
};

// a[indices]: a view when every index is basic, else a copy (advanced indices: where their broadcast
// shape goes follows torch: in place of adjacent advanced dims, else at the front). Differentiable.
Tensor index(const Tensor& a, std::span<const TensorIndex> indices);
// a[indices] = value (value broadcast to the indexed shape, cast to a's dtype). Advanced indices write in
// index order, the last write winning for repeated indices; with accumulate, repeated indices add up.
Tensor& index_put_(Tensor& a, std::span<const TensorIndex> indices, const Tensor& value, bool accumulate = false);
Tensor& index_put_(Tensor& a, std::span<const TensorIndex> indices, Scalar value);

// The indices of the nonzero elements of a, one row each: int64 [n, a.dim()] in row-major order. Waits for
// a (the output's size depends on its values).
Tensor nonzero(const Tensor& a);

}  // namespace dg
