// CPU softmax, log_softmax and cross-entropy kernels, forward and backward. Every row (the elements
// along the softmax / class dim for one index of the other dims) is handled by one thread in a fixed
// order, so results do not depend on the thread count. Rows in contiguous memory take vectorisable
// loops; a softmax over a leading dim processes blocks of contiguous columns at once. Every exp here has
// an argument <= 0 (x - max, or a log-probability), so it uses math::exp_nonpositive: masked -inf logits
// then cost no underflow assist. Loops here may use 512-bit vectors (the pragma below, an x86 option; exp is
// compute-bound on AVX-512 machines, and a no-op elsewhere).
//
// Notation: D = size of the softmax dim, m = row maximum, s = sum over the row of exp(x - m).
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dygrad/backend/cpu/reduce.h"
#include "dygrad/math/elementary.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/scratch.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#pragma GCC target("prefer-vector-width=512")
#endif

// The kernels of this file and their operands:
// ReduceAttrs dims = {dim} (empty for a 0-dim input). input x, output y (contiguous, x's shape).
//   softmax_kernel: y = exp(x - max) / sum(exp(x - max)); log_softmax_kernel: y = x - max - log(sum(exp(x - max)))
// inputs (y, g) of the forward output's shape, output grad_x (contiguous).
//   softmax_backward_kernel: grad_x = y * (g - sum(g * y)); log_softmax_backward_kernel: grad_x = g - exp(y) * sum(g)
// Cross-entropy over class dim 1, CrossEntropyAttrs (ignore_index, reduction). inputs (logits[N, C, d...],
// target[N, d...] int64 contiguous); outputs (loss: [] or [N, d...] in the logits' dtype, lse[N * d...]
// contiguous in the compute type).  cross_entropy_backward_kernel: inputs (logits, target, lse, g: [] or
// [N, d...] contiguous), output grad_logits (contiguous).

namespace dg::cpu {

namespace {
template <typename C>
C max_propagating_nan(C a, C b) { return (b > a || b != b) ? b : a; }
template <typename C>
C plus(C a, C b) { return a + b; }

// Sum of x[0, n) (and of x[r] * y[r]) over 64 bytes of lanes (lane k adds the elements r with r mod W = k,
// W = 64 / sizeof(C)), merged in a fixed tree, then the tail: contiguous rows of float/double, vectorised without
// reassociation by the compiler, and the same order, hence the same bits, at every kernel level. The 64 bytes are
// held as registers of the level's width (kVectorBytes, loops.h: 4 xmm, 2 ymm or 1 zmm): a 64-byte GCC vector on a
// narrower level kept the accumulator in memory, moved through general registers (log_softmax backward at avx2:
// 1.5x torch's time).
template <typename C>
struct Lanes {
  typedef C Part __attribute__((vector_size(kVectorBytes)));
  static constexpr int kParts = 64 / kVectorBytes;
  static constexpr int64_t kWidth = 64 / sizeof(C);  // W: elements per step
  static constexpr int64_t kPartWidth = kVectorBytes / sizeof(C);
  Part part[kParts] = {};

  static Part load(const C* x) {
    Part v;
    std::memcpy(&v, x, sizeof(v));
    return v;
  }
  void add(const C* x) {
    for (int p = 0; p < kParts; ++p) part[p] += load(x + p * kPartWidth);
  }
  void add_products(const C* x, const C* y) {
    for (int p = 0; p < kParts; ++p) part[p] += load(x + p * kPartWidth) * load(y + p * kPartWidth);
  }
  // The lanes in the fixed tree: halves, then quarters, ..., then lane 0.
  C merge() const {
    C v[kWidth];
    std::memcpy(v, part, sizeof(v));
    for (int64_t w = kWidth / 2; w > 0; w /= 2)
      for (int64_t k = 0; k < w; ++k) v[k] += v[k + w];
    return v[0];
  }
};
template <typename C>
C lanes_sum(const C* x, int64_t n) {
  Lanes<C> acc;
  int64_t r = 0;
  for (; r + Lanes<C>::kWidth <= n; r += Lanes<C>::kWidth) acc.add(x + r);
  C total = acc.merge();
  for (; r < n; ++r) total += x[r];
  return total;
}
template <typename C>
C lanes_dot(const C* x, const C* y, int64_t n) {
  Lanes<C> acc;
  int64_t r = 0;
  for (; r + Lanes<C>::kWidth <= n; r += Lanes<C>::kWidth) acc.add_products(x + r, y + r);
  C total = acc.merge();
  for (; r < n; ++r) total += x[r] * y[r];
  return total;
}

// The maximum of the non-NaN elements of a contiguous row (-inf if none): four independent vector lanes (no
// dependency chain through one register), merged, then the tail. A NaN need not be tracked here: exp(NaN
// - m) makes the row sum, hence the whole softmax / log_softmax row, NaN. The lanes are the level's own width
// (kVectorBytes, loops.h), not the sums' 64 bytes: the maximum does not depend on the order, and a select on
// vectors wider than the registers runs element by element.
template <typename C>
C lanes_max(const C* x, int64_t n) {
  constexpr int64_t kWidth = kVectorBytes / sizeof(C);
  typedef C L __attribute__((vector_size(kVectorBytes)));
  L best[4];
  for (L& b : best) b = L{} - C(INFINITY);
  int64_t r = 0;
  for (; r + 4 * kWidth <= n; r += 4 * kWidth)
    for (int k = 0; k < 4; ++k) {
      L v;
      std::memcpy(&v, x + r + k * kWidth, sizeof(v));
      best[k] = v > best[k] ? v : best[k];
    }
  for (; r + kWidth <= n; r += kWidth) {
    L v;
    std::memcpy(&v, x + r, sizeof(v));
    best[0] = v > best[0] ? v : best[0];
  }
  for (int k = 1; k < 4; ++k) best[0] = best[k] > best[0] ? best[k] : best[0];
  C m = C(-INFINITY);
  for (int64_t k = 0; k < kWidth; ++k) m = best[0][k] > m ? best[0][k] : m;
  for (; r < n; ++r) m = x[r] > m ? x[r] : m;
  return m;
}

// sum over r of exp(x[r] - m) for a contiguous row, exps computed a chunk at a time into a buffer (a
// vectorised loop) and added into lanes; the order depends on n alone.
template <typename C>
C sum_exp_shifted(const C* x, int64_t n, C m) {
  constexpr int64_t kChunk = 256;
  C buffer[kChunk];
  Lanes<C> acc;
  C tail = C(0);
  for (int64_t r0 = 0; r0 < n; r0 += kChunk) {
    const int64_t len = std::min(kChunk, n - r0);
    for (int64_t j = 0; j < len; ++j) buffer[j] = math::exp_nonpositive(x[r0 + j] - m);
    int64_t j = 0;
    for (; j + Lanes<C>::kWidth <= len; j += Lanes<C>::kWidth) acc.add(buffer + j);
    for (; j < len; ++j) tail += buffer[j];
  }
  return acc.merge() + tail;
}

// Asks for the cache lines of a contiguous row of n elements (the next row, while this one computes).
template <typename T>
void prefetch_row(const T* row, int64_t n) {
  const char* begin = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < n * int64_t(sizeof(T)); b += 64) __builtin_prefetch(begin + b);
}

// The reduced dims of a softmax: its one dim, or none for a 0-dim tensor.
const Dims& softmax_dims(const Task& task) { return task.attrs.get<ReduceAttrs>().dims; }

// True when x and y reduce over a leading dim with their innermost kept dim contiguous and equal in
// both: the column-block path applies.
bool column_layout(const ReduceLayout& Lx, const ReduceLayout& Ly) {
  return !Lx.reduced_is_contiguous_row() && Lx.num_outputs > 1 && Lx.out_strides.back() == 1 &&
         Ly.out_strides.back() == 1 && Lx.out_sizes.back() == Ly.out_sizes.back() && Lx.out_sizes.back() >= 8;
}

// Shapes: x[..., D, ...] -> y[..., D, ...]; per row: m = max(x), s = sum(exp(x - m)), then
// y = exp(x - m) / s (softmax) or y = (x - m) - log(s) (log_softmax). Three passes over the row.
template <bool Log>
void softmax_forward(Task& task) {
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const Dims dims = softmax_dims(task);
  ReduceLayout Lx(in, dims), Ly(out, dims);
  if (Lx.num_outputs == 0 || Lx.num_reduced == 0) return;
  visit_floating(in.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    const int64_t D = Lx.num_reduced, sx = Lx.red_strides[0], sy = Ly.red_strides[0];
    if (column_layout(Lx, Ly)) {
      // Blocks of up to kBlock contiguous columns j: m[j], s[j] accumulate over rows r, vectorised over j.
      const int64_t inner = Lx.out_sizes.back(), outer = Lx.num_outputs / inner;
      constexpr int64_t kBlock = 128;
      const int64_t blocks = (inner + kBlock - 1) / kBlock;
      parallel_for(0, outer * blocks, std::max<int64_t>(1, kReduceGrain / (D * kBlock)), [&](int64_t lo, int64_t hi) {
        C m[kBlock], s[kBlock];
        for (int64_t job = lo; job < hi; ++job) {
          const int64_t o = (job / blocks) * inner + (job % blocks) * kBlock;
          const int64_t jn = std::min(kBlock, inner - (job % blocks) * kBlock);
          const T* xb = x + Lx.output_offset(o);
          T* yb = y + Ly.output_offset(o);
          for (int64_t j = 0; j < jn; ++j) { m[j] = C(-INFINITY); s[j] = C(0); }
          for (int64_t r = 0; r < D; ++r)
            for (int64_t j = 0; j < jn; ++j) m[j] = max_propagating_nan(m[j], static_cast<C>(xb[r * sx + j]));
          if constexpr (!Log && std::is_same_v<T, C>) {  // keep exp(x - m) in y, then scale: one exp per element
            for (int64_t r = 0; r < D; ++r)
              for (int64_t j = 0; j < jn; ++j) s[j] += (yb[r * sy + j] = math::exp_nonpositive(xb[r * sx + j] - m[j]));
            for (int64_t j = 0; j < jn; ++j) s[j] = C(1) / s[j];
            for (int64_t r = 0; r < D; ++r)
              for (int64_t j = 0; j < jn; ++j) yb[r * sy + j] *= s[j];
            continue;
          }
          for (int64_t r = 0; r < D; ++r)
            for (int64_t j = 0; j < jn; ++j) s[j] += math::exp_nonpositive(static_cast<C>(xb[r * sx + j]) - m[j]);
          if constexpr (Log) {
            for (int64_t j = 0; j < jn; ++j) s[j] = std::log(s[j]);
            for (int64_t r = 0; r < D; ++r)
              for (int64_t j = 0; j < jn; ++j) yb[r * sy + j] = static_cast<T>((static_cast<C>(xb[r * sx + j]) - m[j]) - s[j]);
          } else {
            for (int64_t j = 0; j < jn; ++j) s[j] = C(1) / s[j];
            for (int64_t r = 0; r < D; ++r)
              for (int64_t j = 0; j < jn; ++j) yb[r * sy + j] = static_cast<T>(math::exp_nonpositive(static_cast<C>(xb[r * sx + j]) - m[j]) * s[j]);
          }
        }
      });
      return;
    }
    parallel_for(0, Lx.num_outputs, std::max<int64_t>(1, kReduceGrain / D), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* xr = x + Lx.output_offset(o);
        T* yr = y + Ly.output_offset(o);
        if constexpr (std::is_same_v<T, C>) {
          if (sx == 1 && sy == 1) {
            if (o + 1 < hi) prefetch_row(x + Lx.output_offset(o + 1), D);  // loads overlap this row's exps
            const C m = lanes_max(xr, D);
            if constexpr (Log) {
              const C log_s = std::log(sum_exp_shifted(xr, D, m));
              for (int64_t r = 0; r < D; ++r) yr[r] = (xr[r] - m) - log_s;
            } else {  // keep exp(x - m) in y, then scale: one exp per element
              for (int64_t r = 0; r < D; ++r) yr[r] = math::exp_nonpositive(xr[r] - m);
              const C inv = C(1) / lanes_sum(yr, D);
              for (int64_t r = 0; r < D; ++r) yr[r] *= inv;
            }
            continue;
          }
        }
        const C m = row_extremum<true, C>(xr, Lx, 0, D);
        const C s = lane_reduce<C>(xr, Lx, 0, D, C(0), [m](C acc, C v) { return acc + math::exp_nonpositive(v - m); }, plus<C>);
        if constexpr (Log) {
          const C log_s = std::log(s);
          if (sx == 1 && sy == 1) {
            for (int64_t r = 0; r < D; ++r) yr[r] = static_cast<T>((static_cast<C>(xr[r]) - m) - log_s);
          } else {
            for (int64_t r = 0; r < D; ++r) yr[r * sy] = static_cast<T>((static_cast<C>(xr[r * sx]) - m) - log_s);
          }
        } else {
          const C inv = C(1) / s;
          if (sx == 1 && sy == 1) {
            for (int64_t r = 0; r < D; ++r) yr[r] = static_cast<T>(math::exp_nonpositive(static_cast<C>(xr[r]) - m) * inv);
          } else {
            for (int64_t r = 0; r < D; ++r) yr[r * sy] = static_cast<T>(math::exp_nonpositive(static_cast<C>(xr[r * sx]) - m) * inv);
          }
        }
      }
    });
  });
}

// Shapes: y[..., D, ...] (the forward output), g (same shape, any strides) -> grad_x (contiguous):
// softmax: grad_x = y * (g - sum(g * y)); log_softmax: grad_x = g - exp(y) * sum(g), sums over the row.
template <bool Log>
void softmax_backward(Task& task) {
  const Tensor& y_t = task.inputs[0];
  const Tensor& g_t = task.inputs[1];
  const Tensor& gx_t = task.outputs[0];
  const Dims dims = softmax_dims(task);
  ReduceLayout Ly(y_t, dims), Lg(g_t, dims), Lgx(gx_t, dims);
  if (Ly.num_outputs == 0 || Ly.num_reduced == 0) return;
  visit_floating(y_t.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* y = y_t.data<T>();
    const T* g = g_t.data<T>();
    T* gx = gx_t.data<T>();
    const int64_t D = Ly.num_reduced, sy = Ly.red_strides[0], sg = Lg.red_strides[0], sgx = Lgx.red_strides[0];
    if (column_layout(Ly, Lgx) && Lg.out_strides.back() == 1 && Lg.out_sizes.back() == Ly.out_sizes.back()) {
      // Blocks of up to kBlock contiguous columns j: the row sums accumulate over r, vectorised over j.
      const int64_t inner = Ly.out_sizes.back(), outer = Ly.num_outputs / inner;
      constexpr int64_t kBlock = 128;
      const int64_t blocks = (inner + kBlock - 1) / kBlock;
      parallel_for(0, outer * blocks, std::max<int64_t>(1, kReduceGrain / (D * kBlock)), [&](int64_t lo, int64_t hi) {
        C total[kBlock];
        for (int64_t job = lo; job < hi; ++job) {
          const int64_t o = (job / blocks) * inner + (job % blocks) * kBlock;
          const int64_t jn = std::min(kBlock, inner - (job % blocks) * kBlock);
          const T* yb = y + Ly.output_offset(o);
          const T* gb = g + Lg.output_offset(o);
          T* out = gx + Lgx.output_offset(o);
          for (int64_t j = 0; j < jn; ++j) total[j] = C(0);
          for (int64_t r = 0; r < D; ++r)
            for (int64_t j = 0; j < jn; ++j)
              total[j] += Log ? static_cast<C>(gb[r * sg + j]) : static_cast<C>(gb[r * sg + j]) * static_cast<C>(yb[r * sy + j]);
          for (int64_t r = 0; r < D; ++r)
            for (int64_t j = 0; j < jn; ++j) {
              const C yv = static_cast<C>(yb[r * sy + j]), gv = static_cast<C>(gb[r * sg + j]);
              out[r * sgx + j] = static_cast<T>(Log ? gv - math::exp_nonpositive(yv) * total[j] : yv * (gv - total[j]));
            }
        }
      });
      return;
    }
    parallel_for(0, Ly.num_outputs, std::max<int64_t>(1, kReduceGrain / D), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const T* yr = y + Ly.output_offset(o);
        const T* gr = g + Lg.output_offset(o);
        T* out = gx + Lgx.output_offset(o);
        const bool unit = sy == 1 && sg == 1 && sgx == 1;
        if constexpr (std::is_same_v<T, C>) {
          if (unit) {
            if constexpr (Log) {
              const C total = lanes_sum(gr, D);
              for (int64_t r = 0; r < D; ++r) out[r] = gr[r] - math::exp_nonpositive(yr[r]) * total;
            } else {
              const C dot = lanes_dot(gr, yr, D);
              for (int64_t r = 0; r < D; ++r) out[r] = yr[r] * (gr[r] - dot);
            }
            continue;
          }
        }
        if constexpr (Log) {
          const C total = unit ? eight_lane_sum<C>(D, [&](int64_t r) { return static_cast<C>(gr[r]); })
                               : eight_lane_sum<C>(D, [&](int64_t r) { return static_cast<C>(gr[r * sg]); });
          if (unit) {
            for (int64_t r = 0; r < D; ++r)
              out[r] = static_cast<T>(static_cast<C>(gr[r]) - math::exp_nonpositive(static_cast<C>(yr[r])) * total);
          } else {
            for (int64_t r = 0; r < D; ++r)
              out[r * sgx] = static_cast<T>(static_cast<C>(gr[r * sg]) - math::exp_nonpositive(static_cast<C>(yr[r * sy])) * total);
          }
        } else {
          const C dot = unit ? eight_lane_sum<C>(D, [&](int64_t r) { return static_cast<C>(gr[r]) * static_cast<C>(yr[r]); })
                             : eight_lane_sum<C>(D, [&](int64_t r) { return static_cast<C>(gr[r * sg]) * static_cast<C>(yr[r * sy]); });
          if (unit) {
            for (int64_t r = 0; r < D; ++r) out[r] = static_cast<T>(static_cast<C>(yr[r]) * (static_cast<C>(gr[r]) - dot));
          } else {
            for (int64_t r = 0; r < D; ++r)
              out[r * sgx] = static_cast<T>(static_cast<C>(yr[r * sy]) * (static_cast<C>(gr[r * sg]) - dot));
          }
        }
      }
    });
  });
}
}  // namespace

void softmax_kernel(Task& task) { softmax_forward<false>(task); }
void log_softmax_kernel(Task& task) { softmax_forward<true>(task); }
void softmax_backward_kernel(Task& task) { softmax_backward<false>(task); }
void log_softmax_backward_kernel(Task& task) { softmax_backward<true>(task); }

// --- cross-entropy -------------------------------------------------------------------------------------------
namespace {
const Dims kClassDim = {1};

// Raises (inside the kernel: the stream defers it to the next sync point) for a target outside [0, C).
inline void check_target(int64_t t, int64_t num_classes) {
  DG_CHECK(t >= 0 && t < num_classes, Index, "[cross_entropy] target ", t, " is out of bounds for ", num_classes,
           " classes (expected a class index in [0, ", num_classes - 1, "] or ignore_index)");
}
}  // namespace

// Shapes: logits[N, C, d...] (R = N * d... rows of C classes), target[R] int64 -> lse[R] = log(sum(exp(
// logits[row]))), row loss = lse - logits[row, target]; loss[R] (none, 0 where ignored) or loss[]:
// the sum over rows in row order, divided by the number of non-ignored rows for the mean.
void cross_entropy_kernel(Task& task) {
  const Tensor& logits = task.inputs[0];
  const int64_t* target = task.inputs[1].data<int64_t>();
  const CrossEntropyAttrs& attrs = task.attrs.get<CrossEntropyAttrs>();
  const int64_t ignore_index = attrs.ignore_index;
  const LossReduction reduction = attrs.reduction;
  ReduceLayout L(logits, kClassDim);
  const int64_t rows = L.num_outputs, num_classes = L.num_reduced;
  visit_floating(logits.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = logits.data<T>();
    C* lse = task.outputs[1].data<C>();
    T* loss = task.outputs[0].data<T>();
    C* row_loss = task_scratch(task).take<C>(rows);
    const int64_t stride = L.red_strides[0];
    parallel_for(0, rows, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(num_classes, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const int64_t t = target[o];
        if (t == ignore_index) {
          lse[o] = C(0);
          row_loss[o] = C(0);
          continue;
        }
        check_target(t, num_classes);
        const T* row = x + L.output_offset(o);
        const C m = num_classes > 0 ? row_extremum<true, C>(row, L, 0, num_classes) : C(-INFINITY);
        const C s = lane_reduce<C>(row, L, 0, num_classes, C(0), [m](C acc, C v) { return acc + math::exp_nonpositive(v - m); }, plus<C>);
        lse[o] = m + std::log(s);
        row_loss[o] = lse[o] - static_cast<C>(row[t * stride]);
      }
    });
    if (reduction == LossReduction::None) {
      for (int64_t o = 0; o < rows; ++o) loss[o] = static_cast<T>(row_loss[o]);
      return;
    }
    const C total = eight_lane_sum<C>(rows, [&](int64_t o) { return row_loss[o]; });
    if (reduction == LossReduction::Sum) {
      loss[0] = static_cast<T>(total);
      return;
    }
    int64_t counted = 0;
    for (int64_t o = 0; o < rows; ++o) counted += target[o] != ignore_index;
    loss[0] = static_cast<T>(total / static_cast<C>(counted));  // all ignored: 0 / 0 = NaN, as torch
  });
}

// Shapes: logits[N, C, d...], target[R], lse[R], g ([] or [R]) -> grad[N, C, d...] (contiguous):
// grad[row, c] = scale * (exp(logits[row, c] - lse[row]) - (c == target[row])), 0 on ignored rows,
// scale = g (g[row] for none), divided by the non-ignored row count for the mean.
void cross_entropy_backward_kernel(Task& task) {
  const Tensor& logits = task.inputs[0];
  const int64_t* target = task.inputs[1].data<int64_t>();
  const Tensor& grad = task.outputs[0];
  const CrossEntropyAttrs& attrs = task.attrs.get<CrossEntropyAttrs>();
  const int64_t ignore_index = attrs.ignore_index;
  const LossReduction reduction = attrs.reduction;
  ReduceLayout L(logits, kClassDim), Lg(grad, kClassDim);
  const int64_t rows = L.num_outputs, num_classes = L.num_reduced;
  int64_t counted = 0;
  for (int64_t o = 0; o < rows; ++o) counted += target[o] != ignore_index;
  visit_floating(logits.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = logits.data<T>();
    const C* lse = task.inputs[2].data<C>();
    const T* g = task.inputs[3].data<T>();
    T* out = grad.data<T>();
    const int64_t sx = L.red_strides[0], sg = Lg.red_strides[0];
    const C divisor = reduction == LossReduction::Mean ? static_cast<C>(counted) : C(1);
    parallel_for(0, rows, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(num_classes, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        T* dst = out + Lg.output_offset(o);
        const int64_t t = target[o];
        if (t == ignore_index) {
          for (int64_t c = 0; c < num_classes; ++c) dst[c * sg] = T(0.0f);
          continue;
        }
        check_target(t, num_classes);
        const T* row = x + L.output_offset(o);
        const C scale = static_cast<C>(g[reduction == LossReduction::None ? o : 0]) / divisor, shift = lse[o];
        if (sx == 1 && sg == 1) {
          for (int64_t c = 0; c < num_classes; ++c) dst[c] = static_cast<T>(scale * math::exp_nonpositive(static_cast<C>(row[c]) - shift));
        } else {
          for (int64_t c = 0; c < num_classes; ++c)
            dst[c * sg] = static_cast<T>(scale * math::exp_nonpositive(static_cast<C>(row[c * sx]) - shift));
        }
        dst[t * sg] = static_cast<T>(scale * (math::exp_nonpositive(static_cast<C>(row[t * sx]) - shift) - C(1)));
      }
    });
  });
}


DG_REGISTER_KERNEL(softmax, Device::Type::CPU, softmax_kernel);
DG_REGISTER_KERNEL(log_softmax, Device::Type::CPU, log_softmax_kernel);
DG_REGISTER_KERNEL(softmax_backward, Device::Type::CPU, softmax_backward_kernel);
DG_REGISTER_KERNEL(log_softmax_backward, Device::Type::CPU, log_softmax_backward_kernel);
DG_REGISTER_KERNEL(cross_entropy, Device::Type::CPU, cross_entropy_kernel);
DG_REGISTER_KERNEL(cross_entropy_backward, Device::Type::CPU, cross_entropy_backward_kernel);

}  // namespace dg::cpu
