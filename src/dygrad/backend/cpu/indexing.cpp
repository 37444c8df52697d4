// CPU kernels for advanced indexing: index (gather by index tensors), index_put (write or accumulate by
// index tensors) and nonzero. See backend/cpu/indexing.h for the shapes and the legend (A, B, R).
//
// A "row" is the run over R at one index position b: rows are copied with a walker over R's coalesced
// dims. index_put is deterministic: threads own disjoint ranges of destination rows (A positions) and
// every thread scans the positions b in increasing order, so each element sees its writes in b order.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "dygrad/core/error.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

// The kernels of this file and their operands:
// Legend: k = number of index tensors (AdvancedIndexAttrs dims.size()); A = the k indexed sizes; B = the broadcast index shape
// (every idx_j is expanded to B, int64); R = the remaining dims. AdvancedIndexAttrs dims = the original dim of each
// index (for messages).
//
// inputs (x [A..., R...], idx_0 .. idx_{k-1} [B...]); output out [B..., R...] (any strides):
//   out[b, r] = x[idx_0[b], ..., idx_{k-1}[b], r]     (negative indices count from the end)
//   void index_kernel(Task& task);
//
// inputs (x [A..., R...], idx_0 .. idx_{k-1} [B...], values [B..., R...]); output x (the same tensor);
// AdvancedIndexAttrs accumulate:
//   x[idx_0[b], ..., idx_{k-1}[b], r] = values[b, r]    (or +=), for b in row-major order
// Threads split the destination rows (the A positions); each scans b in order, so repeated indices give
// the last write (or add in b order) whatever the thread count.
//   void index_put_kernel(Task& task);
//
// input a [N...] contiguous; output out [n, a.dim()] int64 (n = the number of nonzero elements):
//   out[m] = the multi-index of the m-th nonzero element of a in row-major order
//   void nonzero_kernel(Task& task);

namespace dg::cpu {

namespace {
constexpr int64_t kWorkGrain = kIndexWorkGrain;  // elements of work per parallel chunk (runtime/scratch.h)

template <size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };
struct Bits128 { uint64_t low, high; };  // complex128
template <> struct Bits<16> { using type = Bits128; };

template <typename F>
void visit_width(size_t itemsize, F&& f) {
  switch (itemsize) {
    case 1: f.template operator()<Bits<1>::type>(); break;
    case 2: f.template operator()<Bits<2>::type>(); break;
    case 4: f.template operator()<Bits<4>::type>(); break;
    case 16: f.template operator()<Bits<16>::type>(); break;
    default: f.template operator()<Bits<8>::type>(); break;
  }
}

// Walks the R dims of two operands (destination d, source s) in row-major order; dims are coalesced
// where both operands step contiguously across them and size-1 dims dropped. Strides in elements.
struct RowWalker {
  Dims sizes, dst_strides, src_strides;  // outermost first
  int64_t numel = 1;

  RowWalker(IntSpan shape, IntSpan dst, IntSpan src) {
    for (size_t d = 0; d < shape.size(); ++d) {
      numel *= shape[d];
      if (shape[d] == 1) continue;
      if (!sizes.empty()) {
        const size_t last = sizes.size() - 1;
        if (dst_strides[last] == dst[d] * shape[d] && src_strides[last] == src[d] * shape[d]) {
          sizes[last] *= shape[d];
          dst_strides[last] = dst[d];
          src_strides[last] = src[d];
          continue;
        }
      }
      sizes.push_back(shape[d]);
      dst_strides.push_back(dst[d]);
      src_strides.push_back(src[d]);
    }
  }

  // row(dst_ptr, src_ptr, n, dst_stride, src_stride) on each innermost run.
  template <typename T, typename F>
  void walk(T* dst, const T* src, F&& row) const {
    const int nd = static_cast<int>(sizes.size());
    if (numel == 0) return;
    if (nd == 0) return row(dst, src, int64_t{1}, int64_t{1}, int64_t{1});
    const int64_t n = sizes[nd - 1], sd = dst_strides[nd - 1], ss = src_strides[nd - 1];
    if (nd == 1) return row(dst, src, n, sd, ss);
    SmallVector<int64_t, 6> index(static_cast<size_t>(nd - 1), 0);
    int64_t od = 0, os = 0;
    for (;;) {
      row(dst + od, src + os, n, sd, ss);
      int d = nd - 2;
      for (; d >= 0; --d) {
        od += dst_strides[d];
        os += src_strides[d];
        if (++index[static_cast<size_t>(d)] < sizes[d]) break;
        od -= dst_strides[d] * sizes[d];
        os -= src_strides[d] * sizes[d];
        index[static_cast<size_t>(d)] = 0;
      }
      if (d < 0) return;
    }
  }
};

// Element offsets of several operands over the B dims, stepped in row-major order. Held inline (copied by every
// worker without a heap allocation) up to kInlineOperands operands and 6 B dims.
constexpr size_t kInlineOperands = 7;  // k index tensors and one more: a tensor of up to 6 dims
struct OffsetCounter {
  Dims sizes;
  SmallVector<Dims, kInlineOperands> strides;  // per operand, per B dim
  Dims index;
  Dims offsets;

  void seek(int64_t linear) {
    index = Dims(sizes.size(), 0);
    offsets = Dims(strides.size(), 0);
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      index[static_cast<size_t>(d)] = i;
      for (size_t k = 0; k < strides.size(); ++k) offsets[k] += i * strides[k][d];
    }
  }
  void next() {
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
      for (size_t k = 0; k < strides.size(); ++k) offsets[k] += strides[k][d];
      if (++index[static_cast<size_t>(d)] < sizes[d]) return;
      for (size_t k = 0; k < strides.size(); ++k) offsets[k] -= strides[k][d] * sizes[d];
      index[static_cast<size_t>(d)] = 0;
    }
  }
};

// The layout shared by both kernels: k, B, the counter over (idx_0..idx_{k-1}, other), the R walker.
struct Layout {
  int64_t k = 0, positions = 1;
  OffsetCounter counter;  // operands idx_0..idx_{k-1}, then `other` (out or values)
  Dims a_sizes, a_strides;
};

Layout make_layout(const Task& task, const Tensor& x, const Tensor& other) {
  Layout l;
  l.k = static_cast<int64_t>(task.attrs.get<AdvancedIndexAttrs>().dims.size());
  const int64_t nb = other.dim() - (x.dim() - l.k);
  for (int64_t d = 0; d < nb; ++d) {
    l.counter.sizes.push_back(other.shape()[d]);
    l.positions *= other.shape()[d];
  }
  for (int64_t j = 0; j < l.k; ++j) {
    const Tensor& idx = task.inputs[static_cast<size_t>(1 + j)];
    l.counter.strides.emplace_back(idx.strides());
    l.a_sizes.push_back(x.shape()[j]);
    l.a_strides.push_back(x.strides()[j]);
  }
  l.counter.strides.emplace_back(other.strides().subspan(0, static_cast<size_t>(nb)));
  return l;
}

[[noreturn]] void out_of_bounds(const Task& task, int64_t value, int64_t j, int64_t size) {
  const Dims& dims = task.attrs.get<AdvancedIndexAttrs>().dims;
    const int64_t dim = j < static_cast<int64_t>(dims.size()) ? dims[j] : j;
  fail(ErrorKind::Index, "[", task.op->name, "] index ", value, " is out of bounds for dimension ", dim,
       " with size ", size);
}

// The wrapped index values at the counter's position: the x offset and the A-linear row number.
inline void locate(const Task& task, const Layout& l, const Dims& positions, const int64_t* const* idx, int64_t& offset,
                   int64_t& row) {
  offset = 0;
  row = 0;
  for (int64_t j = 0; j < l.k; ++j) {
    int64_t v = idx[j][positions[static_cast<size_t>(j)]];
    const int64_t size = l.a_sizes[j];
    if (v < -size || v >= size) out_of_bounds(task, v, j, size);
    if (v < 0) v += size;
    offset += v * l.a_strides[j];
    row = row * size + v;
  }
}
}  // namespace

void index_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const Tensor& out = task.outputs[0];
  Layout l = make_layout(task, x, out);
  const int64_t nb = static_cast<int64_t>(l.counter.sizes.size());
  const RowWalker rows(x.shape().subspan(static_cast<size_t>(l.k)), out.strides().subspan(static_cast<size_t>(nb)),
                       x.strides().subspan(static_cast<size_t>(l.k)));
  if (l.positions == 0) return;
  SmallVector<const int64_t*, 8> idx;
  for (int64_t j = 0; j < l.k; ++j) idx.push_back(task.inputs[static_cast<size_t>(1 + j)].data<int64_t>());
  const int64_t grain = std::max<int64_t>(1, kWorkGrain / std::max<int64_t>(rows.numel, 1));
  visit_width(x.itemsize(), [&]<typename U>() {
    const U* xs = x.data<U>();
    U* os = out.data<U>();
    parallel_for(0, l.positions, grain, [&](int64_t lo, int64_t hi) {
      OffsetCounter counter = l.counter;
      counter.seek(lo);
      for (int64_t b = lo; b < hi; ++b, counter.next()) {
        int64_t offset = 0, row = 0;
        locate(task, l, counter.offsets, idx.data(), offset, row);
        rows.walk(os + counter.offsets[static_cast<size_t>(l.k)], xs + offset,
                  [](U* d, const U* s, int64_t n, int64_t sd, int64_t ss) {
                    if (sd == 1 && ss == 1) std::memcpy(d, s, static_cast<size_t>(n) * sizeof(U));
                    else for (int64_t e = 0; e < n; ++e) d[e * sd] = s[e * ss];
                  });
      }
    });
  });
}

void index_put_kernel(Task& task) {
  const Tensor& x = task.outputs[0];
  const Tensor& values = task.inputs[task.inputs.size() - 1];
  const bool accumulate = task.attrs.get<AdvancedIndexAttrs>().accumulate;
  Layout l = make_layout(task, x, values);
  const int64_t nb = static_cast<int64_t>(l.counter.sizes.size());
  const RowWalker rows(x.shape().subspan(static_cast<size_t>(l.k)), x.strides().subspan(static_cast<size_t>(l.k)),
                       values.strides().subspan(static_cast<size_t>(nb)));
  if (l.positions == 0 || rows.numel == 0) return;
  SmallVector<const int64_t*, 8> idx;
  for (int64_t j = 0; j < l.k; ++j) idx.push_back(task.inputs[static_cast<size_t>(1 + j)].data<int64_t>());
  // Pass 1 (parallel over b): each position's destination offset, source offset and row number.
  const size_t count = static_cast<size_t>(l.positions);
  ScratchArena& scratch = task_scratch(task);
  int64_t* dst_offset = scratch.take<int64_t>(l.positions);
  int64_t* src_offset = scratch.take<int64_t>(l.positions);
  int64_t* row_of = scratch.take<int64_t>(l.positions);
  parallel_for(0, l.positions, kWorkGrain, [&](int64_t lo, int64_t hi) {
    OffsetCounter counter = l.counter;
    counter.seek(lo);
    for (int64_t b = lo; b < hi; ++b, counter.next()) {
      const size_t ub = static_cast<size_t>(b);
      locate(task, l, counter.offsets, idx.data(), dst_offset[ub], row_of[ub]);
      src_offset[ub] = counter.offsets[static_cast<size_t>(l.k)];
    }
  });
  // Pass 2 (parallel over destination rows): every thread scans b in order and writes the rows it owns.
  int64_t a_rows = 1;
  for (int64_t s : l.a_sizes) a_rows *= s;
  const int64_t work = l.positions * rows.numel;
  const int64_t chunks = std::max<int64_t>(1, work / kWorkGrain);
  const int64_t grain = std::max<int64_t>(1, a_rows / chunks);
  // float8 reaches here only to accumulate (ops/indexing.cpp): each addition in float, rounded to float8, as torch's.
  const auto visit = [&](auto&& f) {
    switch (x.dtype()) {
      case DType::Float8_e4m3fn: return f.template operator()<Float8_e4m3fn>();
      case DType::Float8_e5m2: return f.template operator()<Float8_e5m2>();
      default: return visit_dtype(x.dtype(), f);
    }
  };
  visit([&]<typename T>() {
    using C = compute_t<T>;
    T* xs = x.data<T>();
    const T* vs = values.data<T>();
    parallel_for(0, a_rows, grain, [&](int64_t lo, int64_t hi) {
      for (size_t b = 0; b < count; ++b) {
        if (row_of[b] < lo || row_of[b] >= hi) continue;
        if (accumulate) {
          rows.walk(xs + dst_offset[b], vs + src_offset[b], [](T* d, const T* s, int64_t n, int64_t sd, int64_t ss) {
            for (int64_t e = 0; e < n; ++e) d[e * sd] = static_cast<T>(static_cast<C>(d[e * sd]) + static_cast<C>(s[e * ss]));
          });
        } else {
          rows.walk(xs + dst_offset[b], vs + src_offset[b], [](T* d, const T* s, int64_t n, int64_t sd, int64_t ss) {
            if (sd == 1 && ss == 1) std::memcpy(d, s, static_cast<size_t>(n) * sizeof(T));
            else for (int64_t e = 0; e < n; ++e) d[e * sd] = s[e * ss];
          });
        }
      }
    });
  });
}

// Fixed chunks of the flat input (from its size alone): count per chunk, then each chunk writes from its
// prefix offset, so the order is row-major whatever the thread count.
void nonzero_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const int64_t nd = a.dim(), n = a.numel();
  if (out.shape()[0] == 0) return;
  int64_t* o = out.data<int64_t>();
  const int64_t chunks = std::max<int64_t>(1, (n + kWorkGrain - 1) / kWorkGrain);
  int64_t* first = task_scratch(task).take<int64_t>(chunks + 1);
  std::fill(first, first + chunks + 1, int64_t{0});
  visit_dtype(a.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* p = a.data<T>();
    auto bounds = [&](int64_t c) { return std::pair<int64_t, int64_t>{n * c / chunks, n * (c + 1) / chunks}; };
    parallel_chunks(chunks, [&](int64_t c) {
      const auto [lo, hi] = bounds(c);
      int64_t count = 0;
      for (int64_t i = lo; i < hi; ++i) count += static_cast<C>(p[i]) != C(0);
      first[static_cast<size_t>(c) + 1] = count;
    });
    for (int64_t c = 0; c < chunks; ++c) first[static_cast<size_t>(c) + 1] += first[static_cast<size_t>(c)];
    const int64_t rows = out.shape()[0];
    parallel_chunks(chunks, [&](int64_t c) {
      const auto [lo, hi] = bounds(c);
      int64_t m = first[static_cast<size_t>(c)];
      Dims index(static_cast<size_t>(nd), 0);
      for (int64_t d = nd - 1, rem = lo; d >= 0; --d) {
        index[static_cast<size_t>(d)] = rem % a.shape()[d];
        rem /= a.shape()[d];
      }
      for (int64_t i = lo; i < hi && m < rows; ++i) {
        if (static_cast<C>(p[i]) != C(0)) {
          for (int64_t d = 0; d < nd; ++d) o[m * nd + d] = index[static_cast<size_t>(d)];
          ++m;
        }
        for (int64_t d = nd - 1; d >= 0; --d) {
          if (++index[static_cast<size_t>(d)] < a.shape()[d]) break;
          index[static_cast<size_t>(d)] = 0;
        }
      }
    });
  });
}


DG_REGISTER_KERNEL(index, Device::Type::CPU, index_kernel);
DG_REGISTER_KERNEL(index_put, Device::Type::CPU, index_put_kernel);
DG_REGISTER_KERNEL(nonzero, Device::Type::CPU, nonzero_kernel);

}  // namespace dg::cpu
