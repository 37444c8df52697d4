// CPU reductions: sum, logsumexp, var/std and the backward kernels of the reduce family. Layout: the input is viewed as [outputs x reduced] over coalesced dims. Each output
// element is reduced by one thread in a fixed order; a reduction to a single element splits the reduced
// range into chunks fixed by its length (not the thread count) and combines them in order. Both keep
// results bitwise identical across thread counts (docs/threading.md).
#include "dygrad/backend/cpu/reduce.h"
#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/math/elementary.h"

#include <cmath>
#include <vector>

#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg::cpu {

namespace {
// Coalesces (sizes, strides) pairs given outermost first: merges d-1 into d when contiguous across them.
void coalesce(Dims& sizes, Dims& strides) {
  Dims s, st;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    if (!s.empty() && st.back() == strides[i] * sizes[i]) {
      s.back() *= sizes[i];
      st.back() = strides[i];
      continue;
    }
    s.push_back(sizes[i]);
    st.push_back(strides[i]);
  }
  sizes = std::move(s);
  strides = std::move(st);
}

int64_t offset_of(int64_t linear, const Dims& sizes, const Dims& strides) {
  int64_t off = 0;
  for (size_t d = sizes.size(); d-- > 0;) {
    off += (linear % sizes[d]) * strides[d];
    linear /= sizes[d];
  }
  return off;
}

template <typename T> struct SumAcc { using type = compute_t<T>; };
template <> struct SumAcc<bool> { using type = int64_t; };
template <> struct SumAcc<uint8_t> { using type = int64_t; };
template <> struct SumAcc<int8_t> { using type = int64_t; };
template <> struct SumAcc<int16_t> { using type = int64_t; };
template <> struct SumAcc<uint16_t> { using type = int64_t; };
template <> struct SumAcc<int32_t> { using type = int64_t; };

// Sum of n contiguous elements in the fixed eight-lane order (backend/cpu/accumulate.h).
template <typename T, typename A>
A sum_contiguous(const T* x, int64_t n) {
  return eight_lane_sum<A>(n, [x](int64_t i) { return static_cast<A>(x[i]); });
}

// Sum of the reduced elements of one output, walking the reduced dims with an odometer.
template <typename T, typename A>
A sum_strided(const T* base, const ReduceLayout& L, int64_t begin, int64_t end) {
  if (L.red_sizes.size() == 1) {
    const int64_t s = L.red_strides[0];
    if (s == 1) return sum_contiguous<T, A>(base + begin, end - begin);
    A acc = 0;
    for (int64_t r = begin; r < end; ++r) acc += static_cast<A>(base[r * s]);
    return acc;
  }
  A acc = 0;
  for (int64_t r = begin; r < end; ++r) acc += static_cast<A>(base[offset_of(r, L.red_sizes, L.red_strides)]);
  return acc;
}
}  // namespace

ReduceLayout::ReduceLayout(const Tensor& in, IntSpan dims) {
  size_t k = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (k < dims.size() && dims[k] == d) {
      red_sizes.push_back(in.shape()[d]);
      red_strides.push_back(in.strides()[d]);
      ++k;
    } else {
      out_sizes.push_back(in.shape()[d]);
      out_strides.push_back(in.strides()[d]);
    }
  }
  for (int64_t s : out_sizes) num_outputs *= s;
  for (int64_t s : red_sizes) num_reduced *= s;
  coalesce(out_sizes, out_strides);
  coalesce(red_sizes, red_strides);
  if (red_sizes.empty()) { red_sizes.push_back(1); red_strides.push_back(1); }
  if (out_sizes.empty()) { out_sizes.push_back(1); out_strides.push_back(0); }
}

int64_t ReduceLayout::output_offset(int64_t o) const { return offset_of(o, out_sizes, out_strides); }
int64_t ReduceLayout::reduced_offset(int64_t r) const { return offset_of(r, red_sizes, red_strides); }

void sum_kernel(Task& task) {
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  ReduceLayout L(in, task.attrs.get<ReduceAttrs>().dims);
  visit_dtype(in.dtype(), [&]<typename T>() {
    using A = typename SumAcc<T>::type;
    visit_dtype(out.dtype(), [&]<typename TOut>() {
      const T* x = in.data<T>();
      TOut* y = out.data<TOut>();
      if (L.num_outputs == 0) return;
      if (L.num_reduced == 0) {
        for (int64_t o = 0; o < L.num_outputs; ++o) y[o] = static_cast<TOut>(A(0));
        return;
      }
      if (L.num_outputs == 1) {
        // Full reduction: partial sums over fixed chunks, combined in chunk order.
        const int64_t chunks = (L.num_reduced + kFullReduceChunk - 1) / kFullReduceChunk;
        A* partial = task_scratch(task).take<A>(chunks);
        bool done = false;
        if constexpr (std::is_same_v<T, A> && std::is_floating_point_v<A>) {
          if (L.red_sizes.size() == 1 && L.red_strides[0] == 1) {
            // Contiguous: four whole chunks at a time (accumulate.h, eight_lane_sums: each chunk's sum bitwise as
            // one at a time, four independent chains), the last partial chunk alone.
            constexpr int kTogether = 4;
            const int64_t whole = L.num_reduced / kFullReduceChunk;
            parallel_chunks((whole + kTogether - 1) / kTogether, [&](int64_t g) {
              const int64_t c0 = g * kTogether;
              if (c0 + kTogether <= whole) {
                eight_lane_sums<kTogether>(x + c0 * kFullReduceChunk, kFullReduceChunk, partial + c0);
                return;
              }
              for (int64_t c = c0; c < whole; ++c)
                eight_lane_sums<1>(x + c * kFullReduceChunk, kFullReduceChunk, partial + c);
            });
            if (whole < chunks)
              eight_lane_sums<1>(x + whole * kFullReduceChunk, L.num_reduced - whole * kFullReduceChunk,
                                 partial + whole);
            done = true;
          }
        }
        if (!done)
          parallel_chunks(chunks, [&](int64_t c) {
            int64_t b = c * kFullReduceChunk, e = std::min(L.num_reduced, b + kFullReduceChunk);
            partial[c] = sum_strided<T, A>(x, L, b, e);
          });
        A total = 0;
        for (int64_t c = 0; c < chunks; ++c) total += partial[c];
        y[0] = static_cast<TOut>(total);
        return;
      }
      const bool column = !L.reduced_is_contiguous_row() && L.out_strides.back() == 1 && L.out_sizes.back() >= 8;
      if (column) {
        // Reduce rows into a contiguous run of outputs: acc[j] += x[r, j], vectorised over j.
        const int64_t inner = L.out_sizes.back();
        const int64_t outer = L.num_outputs / inner;
        Dims outer_sizes(L.out_sizes.begin(), L.out_sizes.end() - 1), outer_strides(L.out_strides.begin(), L.out_strides.end() - 1);
        constexpr int64_t kBlock = 256;
        const int64_t blocks = (inner + kBlock - 1) / kBlock;
        parallel_for(0, outer * blocks, 1, [&](int64_t lo, int64_t hi) {
          A acc[kBlock];
          for (int64_t job = lo; job < hi; ++job) {
            const int64_t o = job / blocks, j0 = (job % blocks) * kBlock, jn = std::min(kBlock, inner - j0);
            const T* base = x + (outer_sizes.empty() ? 0 : offset_of(o, outer_sizes, outer_strides)) + j0;
            for (int64_t j = 0; j < jn; ++j) acc[j] = 0;
            for (int64_t r = 0; r < L.num_reduced; ++r) {
              const T* row = base + (L.red_sizes.size() == 1 ? r * L.red_strides[0] : offset_of(r, L.red_sizes, L.red_strides));
              for (int64_t j = 0; j < jn; ++j) acc[j] += static_cast<A>(row[j]);
            }
            TOut* dst = y + o * inner + j0;
            for (int64_t j = 0; j < jn; ++j) dst[j] = static_cast<TOut>(acc[j]);
          }
        });
        return;
      }
      const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(L.num_reduced, 1));
      parallel_for(0, L.num_outputs, grain, [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o)
          y[o] = static_cast<TOut>(sum_strided<T, A>(x + L.output_offset(o), L, 0, L.num_reduced));
      });
    });
  });
}

// --- logsumexp and var --------------------------------------------------------------------------------------
namespace {
// The larger of a and b, NaN if either is (torch.max propagates NaN).
template <typename C>
C max_propagating_nan(C a, C b) { return (b > a || b != b) ? b : a; }
template <typename C>
C plus(C a, C b) { return a + b; }
}  // namespace

// Shapes: a[in...] -> out[kept...]; m = max over the reduced elements, out = m + log(sum(exp(a - m))).
// A reduction of only -inf gives -inf, one with +inf gives +inf and one with NaN gives NaN (torch).
void logsumexp_kernel(Task& task) {
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  ReduceLayout L(in, task.attrs.get<ReduceAttrs>().dims);
  visit_floating(in.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    if (L.num_reduced == 0) {
      for (int64_t o = 0; o < L.num_outputs; ++o) y[o] = static_cast<T>(-INFINITY);
      return;
    }
    C* maxima = task_scratch(task).take<C>(L.num_outputs);
    auto store_max = [&](int64_t o, C m) { maxima[o] = m; };
    auto finish = [&](int64_t o, C s) {
      const C m = maxima[o];
      y[o] = static_cast<T>(std::isfinite(m) ? m + std::log(s) : m);
    };
    if (is_column_layout(L)) {
      reduce_columns<C>(x, L, C(-INFINITY), [](C best, C v, int64_t) { return max_propagating_nan(best, v); }, store_max);
      reduce_columns<C>(x, L, C(0), [&](C acc, C v, int64_t o) { return acc + math::exp(v - maxima[o]); },
                        finish);
      return;
    }
    reduce_each_output<C>(
        task_scratch(task), L, [&](int64_t o, int64_t b, int64_t e) { return row_extremum<true, C>(x + L.output_offset(o), L, b, e); },
        max_propagating_nan<C>, store_max);
    reduce_each_output<C>(
        task_scratch(task), L,
        [&](int64_t o, int64_t b, int64_t e) {
          const C m = maxima[o];
          if (!std::isfinite(m)) return C(0);
          return lane_reduce<C>(x + L.output_offset(o), L, b, e, C(0), [m](C acc, C v) { return acc + math::exp(v - m); }, plus<C>);
        },
        plus<C>, finish);
  });
}

// Shapes: a[in...] -> out[kept...] = sum((a - mean)^2) / max(N - correction, 0), N reduced elements;
// the square root of that for std (VarianceAttrs). Two passes (mean, then squared deviations) accumulated
// in float64, so float32 inputs with a large mean keep their precision.
void var_kernel(Task& task) {
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const VarianceAttrs& attrs = task.attrs.get<VarianceAttrs>();
  const double correction = attrs.correction;
  const bool standard_deviation = attrs.standard_deviation;
  ReduceLayout L(in, attrs.dims);
  visit_floating(in.dtype(), [&]<typename T>() {
    const T* x = in.data<T>();
    T* y = out.data<T>();
    const double count = static_cast<double>(L.num_reduced);
    const double divisor = std::max(count - correction, 0.0);
    double* means = task_scratch(task).take<double>(L.num_outputs);
    auto store_mean = [&](int64_t o, double s) { means[o] = s / count; };
    auto finish = [&](int64_t o, double squares) {
      const double v = squares / divisor;
      y[o] = static_cast<T>(standard_deviation ? std::sqrt(v) : v);
    };
    auto add_square = [&](double acc, double v, int64_t o) {
      const double d = v - means[o];
      return acc + d * d;
    };
    if (is_column_layout(L)) {
      reduce_columns<double>(x, L, 0.0, [](double acc, double v, int64_t) { return acc + v; }, store_mean);
      reduce_columns<double>(x, L, 0.0, add_square, finish);
      return;
    }
    reduce_each_output<double>(
        task_scratch(task), L, [&](int64_t o, int64_t b, int64_t e) { return lane_reduce<double>(x + L.output_offset(o), L, b, e, 0.0, plus<double>, plus<double>); },
        plus<double>, store_mean);
    reduce_each_output<double>(
        task_scratch(task), L,
        [&](int64_t o, int64_t b, int64_t e) {
          const double m = means[o];
          return lane_reduce<double>(x + L.output_offset(o), L, b, e, 0.0,
                                     [m](double acc, double v) { return acc + (v - m) * (v - m); }, plus<double>);
        },
        plus<double>, finish);
  });
}

// --- backward kernels ---------------------------------------------------------------------------------------
namespace {
// For every output o (in parallel): visit(o, a_row, grad_row, offsets) where the reduced element r of
// `a` sits at a_row + a_offset(r) and of `grad` at grad_row + grad_offset(r). a and grad share a shape.
template <typename F>
void for_each_output_pair(const ReduceLayout& La, const ReduceLayout& Lg, F&& visit) {
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(La.num_reduced, 1));
  parallel_for(0, La.num_outputs, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) visit(o, La.output_offset(o), Lg.output_offset(o));
  });
}

// Calls f(a_offset, grad_offset) for each reduced element in order.
template <typename F>
void for_each_reduced_pair(const ReduceLayout& La, const ReduceLayout& Lg, F&& f) {
  if (La.reduced_is_single_stride() && Lg.reduced_is_single_stride()) {
    const int64_t sa = La.red_strides[0], sg = Lg.red_strides[0];
    for (int64_t r = 0; r < La.num_reduced; ++r) f(r * sa, r * sg);
    return;
  }
  for (int64_t r = 0; r < La.num_reduced; ++r) f(La.reduced_offset(r), Lg.reduced_offset(r));
}

template <typename C>
bool same_value(C a, C b) { return a == b || (a != a && b != b); }
}  // namespace

// Shapes: g[kept], indices[kept] int64 -> grad[in...] zero except grad[..., indices[o], ...] = g[o] along
// the reduced dim ReduceAttrs dims[0] (none for a 0-dim input).
void extremum_index_backward_kernel(Task& task) {
  const Tensor& g = task.inputs[0];
  const Tensor& indices = task.inputs[1];
  const Tensor& grad = task.outputs[0];
  ReduceLayout L(grad, task.attrs.get<ReduceAttrs>().dims);
  visit_floating(grad.dtype(), [&]<typename T>() {
    const T* gv = g.data<T>();
    const int64_t* index = indices.data<int64_t>();
    T* out = grad.data<T>();
    const int64_t stride = L.red_strides[0];
    parallel_for(0, L.num_outputs, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(L.num_reduced, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        T* row = out + L.output_offset(o);
        for (int64_t r = 0; r < L.num_reduced; ++r) row[r * stride] = T(0.0f);
        row[index[o] * stride] = gv[o];
      }
    });
  });
}

// Shapes: a[in...], result[kept], g[kept] -> grad[in...] = g[o] / n where a == result[o] (n such
// elements; NaN matches NaN), else 0: the gradient is split evenly among ties, as in torch.amax.
void extremum_backward_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& grad = task.outputs[0];
  const Dims& dims = task.attrs.get<ReduceAttrs>().dims;
  ReduceLayout La(a, dims), Lg(grad, dims);
  visit_floating(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = a.data<T>();
    const T* result = task.inputs[1].data<T>();
    const T* gv = task.inputs[2].data<T>();
    T* out = grad.data<T>();
    for_each_output_pair(La, Lg, [&](int64_t o, int64_t a_row, int64_t g_row) {
      const C target = static_cast<C>(result[o]);
      int64_t ties = 0;
      for_each_reduced_pair(La, Lg, [&](int64_t ao, int64_t) { ties += same_value(static_cast<C>(x[a_row + ao]), target); });
      const C share = static_cast<C>(gv[o]) / static_cast<C>(std::max<int64_t>(ties, 1));
      for_each_reduced_pair(La, Lg, [&](int64_t ao, int64_t go) {
        out[g_row + go] = static_cast<T>(same_value(static_cast<C>(x[a_row + ao]), target) ? share : C(0));
      });
    });
  });
}

// Shapes: a[in...], result[kept], g[kept] -> grad[in...] = g[o] * exp(a - result[o]) (softmax over the
// reduced elements, scaled by the incoming gradient).
void logsumexp_backward_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& grad = task.outputs[0];
  const Dims& dims = task.attrs.get<ReduceAttrs>().dims;
  ReduceLayout La(a, dims), Lg(grad, dims);
  visit_floating(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = a.data<T>();
    const T* result = task.inputs[1].data<T>();
    const T* gv = task.inputs[2].data<T>();
    T* out = grad.data<T>();
    for_each_output_pair(La, Lg, [&](int64_t o, int64_t a_row, int64_t g_row) {
      const C lse = static_cast<C>(result[o]), scale = static_cast<C>(gv[o]);
      for_each_reduced_pair(La, Lg, [&](int64_t ao, int64_t go) {
        out[g_row + go] = static_cast<T>(scale * math::exp(static_cast<C>(x[a_row + ao]) - lse));
      });
    });
  });
}


DG_REGISTER_KERNEL(sum, Device::Type::CPU, sum_kernel);
DG_REGISTER_KERNEL(logsumexp, Device::Type::CPU, logsumexp_kernel);
DG_REGISTER_KERNEL(var, Device::Type::CPU, var_kernel);
DG_REGISTER_KERNEL(std, Device::Type::CPU, var_kernel);
DG_REGISTER_KERNEL(extremum_index_backward, Device::Type::CPU, extremum_index_backward_kernel);
DG_REGISTER_KERNEL(extremum_backward, Device::Type::CPU, extremum_backward_kernel);
DG_REGISTER_KERNEL(logsumexp_backward, Device::Type::CPU, logsumexp_backward_kernel);

}  // namespace dg::cpu
