// Rotary position embedding, fused: every pair of channels of x is rotated by the angle of its position.
//
// Notation: x[B, H, T, D] (or [B, T, H, D]: the position dim is an attribute), P = D / 2 pairs,
// c = cos[t, p], s = sin[t, p]. A pair (a, b) = (x[2p], x[2p+1]) (interleaved, as in torch_ref.py) or
// (x[p], x[p+P]) (rotate-half, the HF LLaMA layout) becomes (a c - b s, a s + b c). The backward applies
// the inverse rotation (s -> -s) to the gradient; cos and sin are constants.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "dygrad/backend/cpu/rows.h"
#include "dygrad/runtime/thread_pool.h"

// The kernels of this file and their operands:
// inputs (x[A0, A1, A2, D] any strides, cos[T, D/2], sin[T, D/2]), output y[A0, A1, A2, D] contiguous.
// RopeAttrs: rotate_half (pairs (i, i + D/2), else interleaved (2i, 2i+1)),
// time_dim (the dim of x holding the position t: 1 or 2), inverse (rotate by -angle: the backward).
//   void rope_kernel(Task& task);

namespace dg::cpu {

void rope_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const Tensor& cos_t = task.inputs[1];
  const Tensor& sin_t = task.inputs[2];
  const RopeAttrs& attrs = task.attrs.get<RopeAttrs>();
  const bool rotate_half = attrs.rotate_half, inverse = attrs.inverse;
  const int64_t time_dim = attrs.time_dim;
  visit_floating(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t a0 = x.shape()[0], a1 = x.shape()[1], a2 = x.shape()[2], dim = x.shape()[3], pairs = dim / 2;
    const int64_t s0 = x.strides()[0], s1 = x.strides()[1], s2 = x.strides()[2], s3 = x.strides()[3];
    const int64_t cos_row = cos_t.strides()[0], cos_col = cos_t.strides()[1];
    const int64_t sin_row = sin_t.strides()[0], sin_col = sin_t.strides()[1];
    const T* xp = x.data<T>();
    const T* cp = cos_t.data<T>();
    const T* sp = sin_t.data<T>();
    T* y = task.outputs[0].data<T>();
    const int64_t rows = a0 * a1 * a2;
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)), [&](int64_t lo, int64_t hi) {
      std::vector<C> in(static_cast<size_t>(dim)), c(static_cast<size_t>(pairs)), s(static_cast<size_t>(pairs));
      int64_t last_t = -1;
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t i2 = r % a2, i1 = (r / a2) % a1, i0 = r / (a1 * a2);
        const int64_t t = time_dim == 2 ? i2 : i1;
        if (t != last_t) {
          load_row(c.data(), cp + t * cos_row, pairs, cos_col);
          load_row(s.data(), sp + t * sin_row, pairs, sin_col);
          if (inverse) for (int64_t p = 0; p < pairs; ++p) s[p] = -s[p];
          last_t = t;
        }
        load_row(in.data(), xp + i0 * s0 + i1 * s1 + i2 * s2, dim, s3);
        T* out = y + r * dim;
        if (rotate_half) {
          for (int64_t p = 0; p < pairs; ++p) {
            out[p] = static_cast<T>(in[p] * c[p] - in[p + pairs] * s[p]);
            out[p + pairs] = static_cast<T>(in[p] * s[p] + in[p + pairs] * c[p]);
          }
        } else {
          for (int64_t p = 0; p < pairs; ++p) {
            out[2 * p] = static_cast<T>(in[2 * p] * c[p] - in[2 * p + 1] * s[p]);
            out[2 * p + 1] = static_cast<T>(in[2 * p] * s[p] + in[2 * p + 1] * c[p]);
          }
        }
      }
    });
  });
}


DG_REGISTER_KERNEL(rotary_position_embedding, Device::Type::CPU, rope_kernel);
DG_REGISTER_KERNEL(rotary_position_embedding_backward, Device::Type::CPU, rope_kernel);

}  // namespace dg::cpu
