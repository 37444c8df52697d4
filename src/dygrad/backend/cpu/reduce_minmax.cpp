// CPU extrema: amax/amin over any dims (values), max/min over one dim (values and indices) and
// argmax/argmin. NaN wins over every number (torch propagates it); among equal values the first index
// wins. Results do not depend on the thread count: extrema are exact, and ties resolve by index.
#include <cmath>
#include <limits>
#include <type_traits>

#include "dygrad/backend/cpu/reduce.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg::cpu {

namespace {
// The type extrema are compared in: float for the 16-bit floats, the stored type otherwise.
template <typename T> using compare_t = compute_t<T>;

template <typename C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// True when `candidate` replaces `best`: it is strictly better, or a NaN replacing a number.
template <bool IsMax, typename C>
bool replaces(C best, C candidate) {
  const bool better = IsMax ? candidate > best : candidate < best;
  if constexpr (std::is_floating_point_v<C>) return better || (candidate != candidate && best == best);
  else return better;
}

// The value every element beats or ties: -inf / lowest for max, +inf / highest for min.
template <bool IsMax, typename C>
C extremum_identity() {
  if constexpr (std::numeric_limits<C>::has_infinity)
    return IsMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
  else return IsMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
}

// Shapes: a[in...] -> out[kept...] = max (or min) over the reduced elements.
template <bool IsMax>
void extremum_values(Task& task) {
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  ReduceLayout L(in, task.attrs.get<ReduceAttrs>().dims);
  if (L.num_outputs == 0 || L.num_reduced == 0) return;  // the op raised for empty reductions
  visit_dtype(in.dtype(), [&]<typename T>() {
    using C = compare_t<T>;
    const T* x = in.data<T>();
    T* y = out.data<T>();
    auto store = [&](int64_t o, C v) { y[o] = static_cast<T>(v); };
    if (is_column_layout(L)) {
      reduce_columns<C>(x, L, extremum_identity<IsMax, C>(), [](C best, C v, int64_t) { return extremum_step<IsMax>(best, v); },
                        store);
      return;
    }
    reduce_each_output<C>(
        task_scratch(task), L, [&](int64_t o, int64_t b, int64_t e) { return row_extremum<IsMax, C>(x + L.output_offset(o), L, b, e); },
        extremum_step<IsMax, C>, store);
  });
}

// The position of the first extremum among reduced elements [begin, end) of one output, and its value.
template <bool IsMax, typename T, typename C>
std::pair<C, int64_t> first_extremum(const T* base, const ReduceLayout& L, int64_t begin, int64_t end) {
  if (L.reduced_is_contiguous_row()) {
    // Two vectorisable passes: the extremum's value, then the first element equal to it (or NaN).
    const C value = row_extremum<IsMax, C>(base, L, begin, end);
    int64_t r = begin;
    if (is_nan(value)) {
      while (!is_nan(static_cast<C>(base[r]))) ++r;
    } else {
      while (static_cast<C>(base[r]) != value) ++r;
    }
    return {static_cast<C>(base[r]), r};
  }
  C best = static_cast<C>(base[L.reduced_offset(begin)]);
  int64_t index = begin;
  const bool single = L.reduced_is_single_stride();
  for (int64_t r = begin + 1; r < end; ++r) {
    const C v = static_cast<C>(base[single ? r * L.red_strides[0] : L.reduced_offset(r)]);
    if (replaces<IsMax>(best, v)) {
      best = v;
      index = r;
    }
  }
  return {best, index};
}

// Shapes: a[in...] -> values[kept...] (when `with_values`), indices[kept...] int64: the first extremum
// over the reduced elements, its index row-major over the reduced dims (the flat index for argmax
// without a dim).
template <bool IsMax>
void extremum_with_index(Task& task, bool with_values) {
  const Tensor& in = task.inputs[0];
  ReduceLayout L(in, task.attrs.get<ReduceAttrs>().dims);
  if (L.num_outputs == 0 || L.num_reduced == 0) return;  // the op raised for empty reductions
  visit_dtype(in.dtype(), [&]<typename T>() {
    using C = compare_t<T>;
    using Best = std::pair<C, int64_t>;
    const T* x = in.data<T>();
    T* values = with_values ? task.outputs[0].data<T>() : nullptr;
    int64_t* indices = task.outputs[with_values ? 1 : 0].data<int64_t>();
    if (is_column_layout(L)) {
      // Blocks of adjacent outputs j: best[j] and its index over r in order, a later element winning only
      // when it replaces the best (the first extremum, or the first NaN).
      constexpr int64_t kBlock = 256;
      const int64_t inner = L.out_sizes.back(), outer = L.num_outputs / inner;
      const int64_t blocks = (inner + kBlock - 1) / kBlock;
      parallel_for(0, outer * blocks, std::max<int64_t>(1, kReduceGrain / (L.num_reduced * kBlock)), [&](int64_t lo, int64_t hi) {
        C best[kBlock];
        int64_t where[kBlock];
        for (int64_t job = lo; job < hi; ++job) {
          const int64_t j0 = (job % blocks) * kBlock, jn = std::min(kBlock, inner - j0);
          const int64_t o0 = (job / blocks) * inner + j0;
          const T* base = x + L.output_offset(o0);
          for (int64_t j = 0; j < jn; ++j) {
            best[j] = static_cast<C>(base[j]);
            where[j] = 0;
          }
          for (int64_t r = 1; r < L.num_reduced; ++r) {
            const T* row = base + (L.reduced_is_single_stride() ? r * L.red_strides[0] : L.reduced_offset(r));
            for (int64_t j = 0; j < jn; ++j) {
              const C v = static_cast<C>(row[j]);
              const bool take = replaces<IsMax>(best[j], v);
              best[j] = take ? v : best[j];
              where[j] = take ? r : where[j];
            }
          }
          for (int64_t j = 0; j < jn; ++j) {
            if (values) values[o0 + j] = static_cast<T>(best[j]);
            indices[o0 + j] = where[j];
          }
        }
      });
      return;
    }
    reduce_each_output<Best>(
        task_scratch(task), L, [&](int64_t o, int64_t b, int64_t e) { return first_extremum<IsMax, T, C>(x + L.output_offset(o), L, b, e); },
        // Partials arrive in index order: a later one wins only when strictly better.
        [](const Best& earlier, const Best& later) { return replaces<IsMax>(earlier.first, later.first) ? later : earlier; },
        [&](int64_t o, const Best& best) {
          if (values) values[o] = static_cast<T>(best.first);
          indices[o] = best.second;
        });
  });
}
}  // namespace

void amax_kernel(Task& task) { extremum_values<true>(task); }
void amin_kernel(Task& task) { extremum_values<false>(task); }
void max_dim_kernel(Task& task) { extremum_with_index<true>(task, true); }
void min_dim_kernel(Task& task) { extremum_with_index<false>(task, true); }
void argmax_kernel(Task& task) { extremum_with_index<true>(task, false); }
void argmin_kernel(Task& task) { extremum_with_index<false>(task, false); }


DG_REGISTER_KERNEL(amax, Device::Type::CPU, amax_kernel);
DG_REGISTER_KERNEL(amin, Device::Type::CPU, amin_kernel);
DG_REGISTER_KERNEL(max_dim, Device::Type::CPU, max_dim_kernel);
DG_REGISTER_KERNEL(min_dim, Device::Type::CPU, min_dim_kernel);
DG_REGISTER_KERNEL(argmax, Device::Type::CPU, argmax_kernel);
DG_REGISTER_KERNEL(argmin, Device::Type::CPU, argmin_kernel);

}  // namespace dg::cpu
