// SwiGLU, fused: y = silu(gate) * up = gate * sigmoid(gate) * up in one pass, and its backward in one pass.
//
// Notation: gate, up, y [N, F] (N rows = all leading dims), sg = sigmoid(gate), g = grad_y:
//   grad_up = g * gate * sg,   grad_gate = g * up * sg * (1 + gate * (1 - sg)).
// Rows are processed in blocks of kBlock elements gathered into compute-type buffers, so strided
// operands cost one gather and the arithmetic (with the vectorised exp) runs on contiguous data; the forward
// reads contiguous float32 rows in place. silu and sigmoid are math::silu and math::sigmoid (math/activations.h:
// built on exp(-|gate|) <= 1, one division each), the same functions as the silu and sigmoid ops.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "dygrad/backend/cpu/rows.h"
#include "dygrad/math/activations.h"
#include "dygrad/runtime/thread_pool.h"

// The kernels of this file and their operands:
// inputs (gate[N..., F], up[N..., F]) any strides, same shape; output y[N..., F]: y = silu(gate) * up.
//   void swiglu_kernel(Task& task);
// inputs (grad_y, gate, up); outputs (grad_gate, grad_up), any strides (views of one buffer are fine).
//   void swiglu_backward_kernel(Task& task);

namespace dg::cpu {

namespace {
constexpr int64_t kBlock = 512;

template <typename C, typename T>
void store_row(T* dst, const C* src, int64_t n, int64_t step) {
  if (step == 1) for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  else for (int64_t i = 0; i < n; ++i) dst[i * step] = static_cast<T>(src[i]);
}

}  // namespace

void swiglu_kernel(Task& task) {
  const Tensor& gate_t = task.inputs[0];
  const Tensor& up_t = task.inputs[1];
  const Tensor& out_t = task.outputs[0];
  visit_floating(out_t.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const RowView gv(gate_t), uv(up_t);
    const int64_t cols = gv.columns;
    const T* gp = gate_t.data<T>();
    const T* up = up_t.data<T>();
    T* y = out_t.data<T>();
    // A float32 row with unit column stride is read in place; others are gathered (and converted) per block.
    constexpr bool same_type = std::is_same_v<T, C>;
    const bool direct = same_type && gv.column_stride == 1 && uv.column_stride == 1;
    parallel_for(0, gv.rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t lo, int64_t hi) {
      C gate_block[kBlock], up_block[kBlock];
      for (int64_t r = lo; r < hi; ++r) {
        const T* grow = gp + gv.row_offset(r);
        const T* urow = up + uv.row_offset(r);
        for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
          const int64_t n = std::min(kBlock, cols - c0);
          const C* gate = gate_block;
          const C* u = up_block;
          if constexpr (same_type) {
            if (direct) gate = grow + c0, u = urow + c0;
          }
          if (!direct) {
            load_row(gate_block, grow + c0 * gv.column_stride, n, gv.column_stride);
            load_row(up_block, urow + c0 * uv.column_stride, n, uv.column_stride);
          }
          // y is a new tensor: it aliases neither input.
          T* __restrict out = y + r * cols + c0;
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(math::swiglu(gate[i], u[i]));
        }
      }
    });
  });
}

void swiglu_backward_kernel(Task& task) {
  const Tensor& grad_t = task.inputs[0];
  const Tensor& gate_t = task.inputs[1];
  const Tensor& up_t = task.inputs[2];
  visit_floating(gate_t.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const RowView dv(grad_t), gv(gate_t), uv(up_t), dgv(task.outputs[0]), duv(task.outputs[1]);
    const int64_t cols = gv.columns;
    const T* dp = grad_t.data<T>();
    const T* gp = gate_t.data<T>();
    const T* up = up_t.data<T>();
    T* dgp = task.outputs[0].data<T>();
    T* dup = task.outputs[1].data<T>();
    parallel_for(0, gv.rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(cols, 1)), [&](int64_t lo, int64_t hi) {
      C d[kBlock], gate[kBlock], sg[kBlock], u[kBlock], out_gate[kBlock], out_up[kBlock];
      for (int64_t r = lo; r < hi; ++r) {
        for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
          const int64_t n = std::min(kBlock, cols - c0);
          load_row(d, dp + dv.row_offset(r) + c0 * dv.column_stride, n, dv.column_stride);
          load_row(gate, gp + gv.row_offset(r) + c0 * gv.column_stride, n, gv.column_stride);
          load_row(u, up + uv.row_offset(r) + c0 * uv.column_stride, n, uv.column_stride);
          for (int64_t i = 0; i < n; ++i) sg[i] = math::sigmoid(gate[i]);
          for (int64_t i = 0; i < n; ++i) {
            const math::SwigluGrad<C> grad = math::swiglu_backward(d[i], gate[i], u[i], sg[i]);
            out_gate[i] = grad.a;
            out_up[i] = grad.b;
          }
          store_row(dgp + dgv.row_offset(r) + c0 * dgv.column_stride, out_gate, n, dgv.column_stride);
          store_row(dup + duv.row_offset(r) + c0 * duv.column_stride, out_up, n, duv.column_stride);
        }
      }
    });
  });
}


DG_REGISTER_KERNEL(swiglu, Device::Type::CPU, swiglu_kernel);
DG_REGISTER_KERNEL(swiglu_packed, Device::Type::CPU, swiglu_kernel);
DG_REGISTER_KERNEL(swiglu_backward, Device::Type::CPU, swiglu_backward_kernel);

}  // namespace dg::cpu
