// CPU reductions. Layout: the input is viewed as [outputs x reduced] over coalesced dims. Each output
// element is reduced by one thread in a fixed order; a reduction to a single element splits the reduced
// range into chunks fixed by its length (not the thread count) and combines them in order. Both keep
// results bitwise identical across thread counts (docs/threading.md).
#include "dygrad/backend/cpu/reduce.h"

#include <vector>

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

constexpr int64_t kFullReduceChunk = 16384;  // elements per partial sum of a full reduction

template <typename T> struct SumAcc { using type = compute_t<T>; };
template <> struct SumAcc<bool> { using type = int64_t; };
template <> struct SumAcc<uint8_t> { using type = int64_t; };
template <> struct SumAcc<uint16_t> { using type = int64_t; };
template <> struct SumAcc<int32_t> { using type = int64_t; };

// Sum of n contiguous elements with 8 independent accumulators (vectorisable, and more accurate than a
// single running sum). The combination order is fixed.
template <typename T, typename A>
A sum_contiguous(const T* x, int64_t n) {
  A acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += static_cast<A>(x[i + k]);
  for (; i < n; ++i) acc[0] += static_cast<A>(x[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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
  ReduceLayout L(in, task.attrs.ints);
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
        std::vector<A> partial(static_cast<size_t>(chunks));
        parallel_chunks(chunks, [&](int64_t c) {
          int64_t b = c * kFullReduceChunk, e = std::min(L.num_reduced, b + kFullReduceChunk);
          partial[static_cast<size_t>(c)] = sum_strided<T, A>(x, L, b, e);
        });
        A total = 0;
        for (A p : partial) total += p;
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

}  // namespace dg::cpu
