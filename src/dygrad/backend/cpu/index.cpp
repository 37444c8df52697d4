// CPU kernels for cat, gather (and index_select), scatter_add (and index_add), tril/triu.
//
// Notation: dim is the indexed dim; a "position" p is an index over the other dims of the index tensor;
// a "line" is the run j = 0..L-1 along dim at one position (L = index.size(dim)). Positions are iterated
// with StridedIteration over views that drop dim, so every operand keeps its own strides.
//
// Determinism of scatter_add: threads split the positions, never a line. Every destination element
// out[p, v] is reached only from position p, and a position's line is walked in increasing j, so each
// element's sum is added in the order j = 0, 1, ..., L-1 whatever the number of threads.
#include "dygrad/backend/cpu/index.h"

#include <algorithm>

#include <cstring>

#include "dygrad/backend/cpu/loops.h"
#include "dygrad/runtime/error.h"

namespace dg::cpu {

namespace {
constexpr int64_t kWorkGrain = 32768;  // elements of work per parallel chunk

// A view of `t` over the positions of `shape` (dims other than `dim`), with t's own strides.
Tensor positions_view(const Tensor& t, IntSpan shape, int64_t dim) {
  Dims sizes, strides;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d == dim) continue;
    sizes.push_back(shape[d]);
    strides.push_back(t.strides()[d]);
  }
  return Tensor::make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

// Visits the index dtype (int64 or int32; the op layer has checked).
template <typename F>
void visit_index(DType t, F&& f) {
  if (t == DType::Int32) f.template operator()<int32_t>();
  else f.template operator()<int64_t>();
}

[[noreturn]] void index_out_of_bounds(const Task& task, int64_t value, int64_t dim, int64_t size) {
  fail(ErrorKind::Index, "[", task.op->name, "] index ", value, " is out of bounds for dimension ", dim,
       " with size ", size);
}

// An unsigned type of each element width: copies move bits, whatever the dtype.
template <size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

// dst = src, same dtype and shape, any strides.
template <typename U>
void copy_elements(const Tensor& dst, const Tensor& src) {
  const Tensor operands[2] = {dst, src};
  StridedIteration it(operands);
  if (it.numel == 0) return;
  if (it.is_flat()) {
    char* d = static_cast<char*>(dst.raw_data());
    const char* s = static_cast<const char*>(src.raw_data());
    parallel_for(0, it.numel, kWorkGrain, [&](int64_t b, int64_t e) {
      std::memcpy(d + b * int64_t(sizeof(U)), s + b * int64_t(sizeof(U)), static_cast<size_t>(e - b) * sizeof(U));
    });
    return;
  }
  for_each_element(it, [&](char** p, const int64_t* st, int64_t n) {
    U* d = reinterpret_cast<U*>(p[0]);
    const U* s = reinterpret_cast<const U*>(p[1]);
    const int64_t sd = st[0] / int64_t(sizeof(U)), ss = st[1] / int64_t(sizeof(U));
    if (sd == 1 && ss == 1) std::memcpy(d, s, static_cast<size_t>(n) * sizeof(U));
    else for (int64_t k = 0; k < n; ++k) d[k * sd] = s[k * ss];
  });
}

template <typename F>
void visit_width(size_t itemsize, F&& f) {
  switch (itemsize) {
    case 1: f.template operator()<Bits<1>::type>(); break;
    case 2: f.template operator()<Bits<2>::type>(); break;
    case 4: f.template operator()<Bits<4>::type>(); break;
    default: f.template operator()<Bits<8>::type>(); break;
  }
}
}  // namespace

// `t`'s dims reordered as `order` lists them (a view of the same elements).
Tensor reorder_dims(const Tensor& t, const std::vector<size_t>& order) {
  Dims sizes, strides;
  for (size_t d : order) {
    sizes.push_back(t.shape()[d]);
    strides.push_back(t.strides()[d]);
  }
  return Tensor::make_view(t, std::move(sizes), std::move(strides), t.storage_offset());
}

void cat_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const int64_t dim = task.attrs.i[0];
  // The copies walk the output in memory order (its dims sorted by stride), so a permuted output (the
  // gradient of unbind, laid out like its input) is written in sequential runs rather than strided ones.
  std::vector<size_t> order(static_cast<size_t>(out.dim()));
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return out.strides()[x] > out.strides()[y]; });
  int64_t offset = 0;
  for (const Tensor& in : task.inputs) {
    // out[..., offset : offset + n, ...] as a view, then a strided copy into it.
    Tensor target = Tensor::make_view(out, Dims(in.shape()), Dims(out.strides()),
                                      out.storage_offset() + offset * out.strides()[dim]);
    visit_width(out.itemsize(), [&]<typename U>() { copy_elements<U>(reorder_dims(target, order), reorder_dims(in, order)); });
    offset += in.shape()[dim];
  }
}

// out[p, j] = a[p, index[p, j]]: parallel over (j, position) pairs, j outermost, so the innermost loop
// walks positions (the contiguous dims when dim is not the last).
void gather_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& index = task.inputs[1];
  const Tensor& out = task.outputs[0];
  const int64_t dim = task.attrs.i[0];
  const int64_t size = a.shape()[dim], lines = index.shape()[dim];
  const Tensor views[3] = {positions_view(out, index.shape(), dim), positions_view(a, index.shape(), dim),
                           positions_view(index, index.shape(), dim)};
  StridedIteration it(views);
  const int64_t positions = it.numel;
  if (positions == 0 || lines == 0) return;
  const int64_t so = out.strides()[dim], sa = a.strides()[dim], si = index.strides()[dim];
  visit_width(a.itemsize(), [&]<typename U>() {
    visit_index(index.dtype(), [&]<typename I>() {
      auto run_line_segment = [&](int64_t j, int64_t p0, int64_t p1) {
        it.for_range(p0, p1, [&](char** ptr, const int64_t* st, int64_t n) {
          U* o = reinterpret_cast<U*>(ptr[0]) + j * so;
          const U* x = reinterpret_cast<const U*>(ptr[1]);
          const I* ix = reinterpret_cast<const I*>(ptr[2]) + j * si;
          const int64_t sto = st[0] / int64_t(sizeof(U)), stx = st[1] / int64_t(sizeof(U)),
                        sti = st[2] / int64_t(sizeof(I));
          if (sti == 0) {  // one index for the whole run (index_select): a row copy
            const int64_t v = static_cast<int64_t>(ix[0]);
            if (v < 0 || v >= size) index_out_of_bounds(task, v, dim, size);
            const U* row = x + v * sa;
            if (sto == 1 && stx == 1) std::memcpy(o, row, static_cast<size_t>(n) * sizeof(U));
            else for (int64_t k = 0; k < n; ++k) o[k * sto] = row[k * stx];
            return;
          }
          for (int64_t k = 0; k < n; ++k) {
            const int64_t v = static_cast<int64_t>(ix[k * sti]);
            if (v < 0 || v >= size) index_out_of_bounds(task, v, dim, size);
            o[k * sto] = x[k * stx + v * sa];
          }
        });
      };
      parallel_for(0, lines * positions, kWorkGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t t = lo; t < hi;) {
          const int64_t j = t / positions, p0 = t % positions, p1 = std::min(positions, p0 + (hi - t));
          run_line_segment(j, p0, p1);
          t += p1 - p0;
        }
      });
    });
  });
}

// out[p, index[p, j]] += src[p, j]: threads split the positions; each walks its positions' lines in
// increasing j (see the file comment for why that is deterministic).
void scatter_add_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const Tensor& index = task.inputs[1];
  const Tensor& src = task.inputs[2];
  const int64_t dim = task.attrs.i[0];
  const int64_t size = out.shape()[dim], lines = index.shape()[dim];
  const Tensor views[3] = {positions_view(out, index.shape(), dim), positions_view(index, index.shape(), dim),
                           positions_view(src, index.shape(), dim)};
  StridedIteration it(views);
  const int64_t positions = it.numel;
  if (positions == 0 || lines == 0) return;
  const int64_t so = out.strides()[dim], si = index.strides()[dim], ss = src.strides()[dim];
  visit_dtype(out.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    visit_index(index.dtype(), [&]<typename I>() {
      const int64_t grain = std::max<int64_t>(1, kWorkGrain / lines);
      parallel_for(0, positions, grain, [&](int64_t p0, int64_t p1) {
        for (int64_t j = 0; j < lines; ++j) {
          it.for_range(p0, p1, [&](char** ptr, const int64_t* st, int64_t n) {
            T* o = reinterpret_cast<T*>(ptr[0]);
            const I* ix = reinterpret_cast<const I*>(ptr[1]) + j * si;
            const T* s = reinterpret_cast<const T*>(ptr[2]) + j * ss;
            const int64_t sto = st[0] / int64_t(sizeof(T)), sti = st[1] / int64_t(sizeof(I)),
                          sts = st[2] / int64_t(sizeof(T));
            for (int64_t k = 0; k < n; ++k) {
              const int64_t v = static_cast<int64_t>(ix[k * sti]);
              if (v < 0 || v >= size) index_out_of_bounds(task, v, dim, size);
              T& target = o[k * sto + v * so];
              target = static_cast<T>(static_cast<C>(target) + static_cast<C>(s[k * sts]));
            }
          });
        }
      });
    });
  });
}

// Rows of the last two dims [B, R, C]: one row per work item, batch offsets from the batch dims' strides.
void triangle_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const int64_t diagonal = task.attrs.i[0];
  const bool upper = task.attrs.i[1] != 0;
  const int64_t nd = a.dim(), R = a.shape()[nd - 2], C = a.shape()[nd - 1];
  const int64_t sr = a.strides()[nd - 2], sc = a.strides()[nd - 1];
  const int64_t rows = out.numel() / std::max<int64_t>(C, 1);
  if (out.numel() == 0) return;
  visit_width(a.itemsize(), [&]<typename U>() {
    const U* x = static_cast<const U*>(a.raw_data());
    U* y = static_cast<U*>(out.raw_data());
    parallel_for(0, rows, std::max<int64_t>(1, kWorkGrain / C), [&](int64_t lo, int64_t hi) {
      for (int64_t q = lo; q < hi; ++q) {
        const int64_t r = q % R;
        int64_t batch = q / R, off = r * sr;
        for (int64_t d = nd - 3; d >= 0; --d) {
          off += (batch % a.shape()[d]) * a.strides()[d];
          batch /= a.shape()[d];
        }
        const U* src = x + off;
        U* dst = y + q * C;
        // Kept columns: c <= r + diagonal (tril) or c >= r + diagonal (triu); all-zero bits are 0 in
        // every dtype.
        const int64_t edge = std::clamp<int64_t>(upper ? r + diagonal : r + diagonal + 1, 0, C);
        const int64_t keep_lo = upper ? edge : 0, keep_hi = upper ? C : edge;
        for (int64_t c = 0; c < keep_lo; ++c) dst[c] = U(0);
        for (int64_t c = keep_lo; c < keep_hi; ++c) dst[c] = src[c * sc];
        for (int64_t c = keep_hi; c < C; ++c) dst[c] = U(0);
      }
    });
  });
}

}  // namespace dg::cpu
