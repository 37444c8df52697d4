// RMSNorm forward and backward over the last dim, fused: one pass per row, nothing saved but x and rstd.
//
// Notation: x[R, C] (R rows = all leading dims, C channels), w[C] the optional weight, r[R] = rstd,
// xhat = x * r, g = grad_y. Forward y = xhat * w. Backward, with gw = g * w:
//   grad_x = r * (gw - xhat * mean(gw * xhat, -1)),   grad_w = sum over rows of g * xhat.
// grad_w is reduced deterministically: rows are cut into chunks fixed by the shape (never by the thread
// count), each chunk writes its own partial row, and the partials are summed in chunk order.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cmath>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/backend/cpu/rows.h"
#include "dygrad/math/rows.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

// The kernels of this file and their operands:
// inputs (x[R..., C], weight[C] when has_weight); RmsNormAttrs eps.
// outputs (y[R..., C] contiguous, rstd[R] in the compute dtype): y = x * rstd * weight,
// rstd = 1 / sqrt(mean(x^2, -1) + eps).
//   void rms_norm_kernel(Task& task);
// inputs (x[R..., C], rstd[R] in the compute dtype, weight[C] when has_weight); outputs (y[R..., C] contiguous):
// y = x * rstd * weight, the forward's products in its order (the rematerialized output, ops/fused.cpp).
//   void rms_norm_apply_kernel(Task& task);
// inputs (grad_y[R..., C], x[R..., C], rstd[R], weight[C] when has_weight);
// outputs (grad_x[R..., C] when need_grad_input, then grad_weight[C] when need_grad_weight).
//   void rms_norm_backward_kernel(Task& task);

namespace dg::cpu {

namespace {
constexpr int64_t kElementsPerChunk = kNormChunkElements;  // rows per task: this many elements, at least one row

int64_t rows_per_chunk(int64_t columns) { return std::max<int64_t>(1, kElementsPerChunk / std::max<int64_t>(columns, 1)); }

// The weight [C] (any stride) as one row in the compute type, in the Task's scratch.
template <typename T, typename C>
const C* weight_row(ScratchArena& scratch, const Tensor& w, int64_t cols) {
  C* row = scratch.take<C>(cols);
  load_row(row, w.data<T>(), cols, cols == 1 ? 1 : w.strides()[0]);
  return row;
}

// Sum of a[i] * b[i] in the fixed eight-lane order (backend/cpu/accumulate.h).
template <typename C>
C dot(const C* a, const C* b, int64_t n) {
  return eight_lane_sum<C>(n, [a, b](int64_t i) { return a[i] * b[i]; });
}
}  // namespace

void rms_norm_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const RmsNormAttrs& attrs = task.attrs.get<RmsNormAttrs>();
  const bool has_weight = attrs.has_weight;
  const double eps = attrs.eps;
  visit_floating(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const RowView xv(x);
    const int64_t cols = xv.columns;
    T* y = task.outputs[0].data<T>();
    C* rstd = task.outputs[1].data<C>();
    const T* xp = x.data<T>();
    ScratchArena& scratch = task_scratch(task);
    const C* weight = has_weight ? weight_row<T, C>(scratch, task.inputs[1], cols) : nullptr;
    auto rows = scratch.per_worker<C>(cols, xv.rows);
    parallel_for(0, xv.rows, rows_per_chunk(cols), [&](int64_t lo, int64_t hi) {
      const auto held = rows.acquire();
      C* row = held.data();
      for (int64_t r = lo; r < hi; ++r) {
        load_row(row, xp + xv.row_offset(r), cols, xv.column_stride);
        const C mean_square = dot(row, row, cols) / static_cast<C>(cols);
        const C inv = math::rms_inverse(mean_square, static_cast<C>(eps));
        rstd[r] = inv;
        T* out = y + r * cols;
        if (has_weight) for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(math::rms_norm(row[c], inv, weight[c]));
        else for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(row[c] * inv);
      }
    });
  });
}

void rms_norm_apply_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const bool has_weight = task.attrs.get<RmsNormAttrs>().has_weight;
  visit_floating(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const RowView xv(x);
    const int64_t cols = xv.columns, step = xv.column_stride;
    T* y = task.outputs[0].data<T>();
    const C* rstd = task.inputs[1].data<C>();
    const T* xp = x.data<T>();
    const C* weight = has_weight ? weight_row<T, C>(task_scratch(task), task.inputs[2], cols) : nullptr;
    parallel_for(0, xv.rows, rows_per_chunk(cols), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const C inv = rstd[r];
        const T* in = xp + xv.row_offset(r);
        T* out = y + r * cols;
        // as rms_norm_kernel: the row in the compute type, times inv, times the weight
        if (has_weight && step == 1)
          for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(math::rms_norm(static_cast<C>(in[c]), inv, weight[c]));
        else if (has_weight)
          for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(math::rms_norm(static_cast<C>(in[c * step]), inv, weight[c]));
        else
          for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(static_cast<C>(in[c * step]) * inv);
      }
    });
  });
}

void rms_norm_backward_kernel(Task& task) {
  const Tensor& grad = task.inputs[0];
  const Tensor& x = task.inputs[1];
  const RmsNormAttrs& attrs = task.attrs.get<RmsNormAttrs>();
  const bool has_weight = attrs.has_weight, need_x = attrs.need_grad_input, need_weight = attrs.need_grad_weight;
  visit_floating(x.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const RowView xv(x), gv(grad);
    const int64_t rows = xv.rows, cols = xv.columns;
    const T* xp = x.data<T>();
    const T* gp = grad.data<T>();
    const C* rstd = task.inputs[2].data<C>();
    ScratchArena& scratch = task_scratch(task);
    const C* weight = has_weight ? weight_row<T, C>(scratch, task.inputs[3], cols) : nullptr;
    T* grad_x = need_x ? task.outputs[0].data<T>() : nullptr;
    const int64_t chunk_rows = rows_per_chunk(cols);
    const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    // partial[k, c]: chunk k's share of grad_w.
    C* partial = need_weight ? scratch.take<C>(chunks * cols) : nullptr;
    if (partial) std::fill(partial, partial + chunks * cols, C(0));
    // Per pool thread: xhat, g and g * w, one row each (a stride of whole 64-byte lines apart).
    const int64_t row_stride = static_cast<int64_t>(scratch_bytes<C>(cols) / sizeof(C));
    auto buffers = scratch.per_worker<C>(3 * row_stride, chunks);
    parallel_chunks(chunks, [&](int64_t k) {
      const auto held = buffers.acquire();
      C* xhat = held.data();
      C* g = xhat + row_stride;
      C* gw = g + row_stride;
      C* acc = need_weight ? partial + k * cols : nullptr;
      for (int64_t r = k * chunk_rows, end = std::min(rows, r + chunk_rows); r < end; ++r) {
        const C inv = rstd[r];
        load_row(xhat, xp + xv.row_offset(r), cols, xv.column_stride);
        load_row(g, gp + gv.row_offset(r), cols, gv.column_stride);
        for (int64_t c = 0; c < cols; ++c) xhat[c] *= inv;
        if (acc) for (int64_t c = 0; c < cols; ++c) acc[c] += g[c] * xhat[c];
        if (!grad_x) continue;
        if (has_weight) for (int64_t c = 0; c < cols; ++c) gw[c] = g[c] * weight[c];
        else for (int64_t c = 0; c < cols; ++c) gw[c] = g[c];
        const C mean_dot = dot(gw, xhat, cols) / static_cast<C>(cols);
        T* out = grad_x + r * cols;
        for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<T>(math::rms_norm_backward(inv, gw[c], xhat[c], mean_dot));
      }
    });
    if (!need_weight) return;
    T* grad_w = task.outputs[need_x ? 1 : 0].data<T>();
    parallel_for(0, cols, 1024, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        C total = 0;
        for (int64_t k = 0; k < chunks; ++k) total += partial[k * cols + c];
        grad_w[c] = static_cast<T>(total);
      }
    });
  });
}


DG_REGISTER_KERNEL(rms_norm, Device::Type::CPU, rms_norm_kernel);
DG_REGISTER_KERNEL(rms_norm_backward, Device::Type::CPU, rms_norm_backward_kernel);
DG_REGISTER_KERNEL(rms_norm_apply, Device::Type::CPU, rms_norm_apply_kernel);

}  // namespace dg::cpu
