// Rotary position embedding, fused: every pair of channels of x is rotated by the angle of its position.
//
// Notation: x[B, H, T, D] (or [B, T, H, D]: the position dim is an attribute), P = D / 2 pairs,
// c = cos[t, p], s = sin[t, p]. A pair (a, b) = (x[2p], x[2p+1]) (interleaved, as in torch_ref.py) or
// (x[p], x[p+P]) (rotate-half, the HF LLaMA layout) becomes (a c - b s, a s + b c). The backward applies
// the inverse rotation (s -> -s) to the gradient; cos and sin are constants.
//
// Written per element of a row as y[i] = x[i] cc[i] + x[partner(i)] ss[i], with the position's row of cos and
// sin expanded to D entries: cc[i] = c of i's pair, ss[i] = -s on the pair's first element and +s on its
// second (partner(i) = i ^ 1 interleaved, i +- P rotate-half). Both forms vectorise without shuffling pairs.
// Rows (the three leading dims) are visited in the output's memory order, which is x's (ops/fused.cpp lays
// y out like x, as elementwise ops do): q and k of a fused qkv projection are [B, H, T, D] views of
// [B, T, 3, H, D] storage, and walking them in (b, h, t) order would jump a projection row per row.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "dygrad/backend/cpu/rows.h"
#include "dygrad/math/rows.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

// The kernels of this file and their operands:
// inputs (x[A0, A1, A2, D] any strides, cos[T, D/2], sin[T, D/2]), output y[A0, A1, A2, D] with unit column
// stride (any row strides; ops/fused.cpp gives it x's dim order).
// RopeAttrs: rotate_half (pairs (i, i + D/2), else interleaved (2i, 2i+1)),
// time_dim (the dim of x holding the position t: 1 or 2), inverse (rotate by -angle: the backward).
//   void rope_kernel(Task& task);

namespace dg::cpu {

void rope_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const Tensor& cos_t = task.inputs[1];
  const Tensor& sin_t = task.inputs[2];
  const Tensor& y_t = task.outputs[0];
  const RopeAttrs& attrs = task.attrs.get<RopeAttrs>();
  const bool rotate_half = attrs.rotate_half, inverse = attrs.inverse;
  const int64_t time_dim = attrs.time_dim;
  visit_floating(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const int64_t dim = x.shape()[3], pairs = dim / 2, x_col = x.strides()[3];
    // The leading dims, outermost first in y's memory order (the largest stride; ties keep logical order).
    std::array<int, 3> order = {0, 1, 2};
    for (int i = 1; i < 3; ++i)
      for (int j = i; j > 0 && y_t.strides()[order[j]] > y_t.strides()[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
    const int64_t n0 = x.shape()[order[0]], n1 = x.shape()[order[1]], n2 = x.shape()[order[2]];
    const int64_t xs0 = x.strides()[order[0]], xs1 = x.strides()[order[1]], xs2 = x.strides()[order[2]];
    const int64_t ys0 = y_t.strides()[order[0]], ys1 = y_t.strides()[order[1]], ys2 = y_t.strides()[order[2]];
    // Which of the visited dims (0, 1, 2) holds the position.
    const int64_t time_slot = order[0] == time_dim ? 0 : order[1] == time_dim ? 1 : 2;
    const int64_t cos_row = cos_t.strides()[0], cos_col = cos_t.strides()[1];
    const int64_t sin_row = sin_t.strides()[0], sin_col = sin_t.strides()[1];
    const T* xp = x.data<T>();
    const T* cp = cos_t.data<T>();
    const T* sp = sin_t.data<T>();
    T* y = y_t.data<T>();
    const int64_t rows = n0 * n1 * n2;
    // Per pool thread, one buffer: the row of x in the compute type, then the expanded cos and sin rows.
    auto buffers = task_scratch(task).per_worker<C>(3 * dim, rows);
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(dim, 1)), [&](int64_t lo, int64_t hi) {
      const auto buffer = buffers.acquire();
      C* in = buffer.data();
      C* cc = in + dim;
      C* ss = cc + dim;
      int64_t last_t = -1;
      for (int64_t r = lo; r < hi; ++r) {
        const int64_t j2 = r % n2, j1 = (r / n2) % n1, j0 = r / (n1 * n2);
        const int64_t t = time_slot == 0 ? j0 : time_slot == 1 ? j1 : j2;
        if (t != last_t) {
          const T* crow = cp + t * cos_row;
          const T* srow = sp + t * sin_row;
          for (int64_t p = 0; p < pairs; ++p) {
            const C c = static_cast<C>(crow[p * cos_col]);
            const C s = inverse ? -static_cast<C>(srow[p * sin_col]) : static_cast<C>(srow[p * sin_col]);
            const int64_t first = rotate_half ? p : 2 * p, second = rotate_half ? p + pairs : 2 * p + 1;
            cc[first] = c;
            cc[second] = c;
            ss[first] = -s;
            ss[second] = s;
          }
          last_t = t;
        }
        load_row(in, xp + j0 * xs0 + j1 * xs1 + j2 * xs2, dim, x_col);
        T* out = y + j0 * ys0 + j1 * ys1 + j2 * ys2;
        if (rotate_half) {
          for (int64_t p = 0; p < pairs; ++p) out[p] = static_cast<T>(math::rotate(in[p], in[p + pairs], cc[p], ss[p]));
          for (int64_t p = pairs; p < dim; ++p) out[p] = static_cast<T>(math::rotate(in[p], in[p - pairs], cc[p], ss[p]));
        } else {
          for (int64_t i = 0; i < dim; i += 2) {
            const C a = in[i], b = in[i + 1];
            out[i] = static_cast<T>(math::rotate(a, b, cc[i], ss[i]));
            out[i + 1] = static_cast<T>(math::rotate(b, a, cc[i + 1], ss[i + 1]));
          }
        }
      }
    });
  });
}


DG_REGISTER_KERNEL(rotary_position_embedding, Device::Type::CPU, rope_kernel);
DG_REGISTER_KERNEL(rotary_position_embedding_backward, Device::Type::CPU, rope_kernel);

}  // namespace dg::cpu
