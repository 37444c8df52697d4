// CPU kernels for cat, gather (and index_select), scatter_add (and index_add), scatter (and scatter_value),
// tril/triu.
//
// Notation: dim is the indexed dim; a "position" p is an index over the other dims of the index tensor;
// a "line" is the run j = 0..L-1 along dim at one position (L = index.size(dim)). Positions are iterated
// with StridedIteration over views that drop dim, so every operand keeps its own strides.
//
// Determinism of scatter_add: threads split the positions, never a line. Every destination element
// out[p, v] is reached only from position p, and a position's line is walked in increasing j, so each
// element's sum is added in the order j = 0, 1, ..., L-1 whatever the number of threads.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "dygrad/backend/cpu/loops.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/scratch.h"

// The kernels of this file and their operands:
// inputs t_0..t_{k-1} (output dtype, same dims except DimAttrs dim, any strides); output out (dense, any
// dim order: contiguous, or the strides the op layer gave it):
// out[..., off_k + j, ...] = t_k[..., j, ...] with off_k = the sizes of t_0..t_{k-1} along dim.
//   void cat_kernel(Task& task);
//
// inputs (a, index); output out of index's shape; DimAttrs dim:
//   out[p, j] = a[p, index[p, j]]   (p: position over the dims other than dim, j: along dim)
// index_select passes index expanded to out's shape (stride 0 off dim). Raises, naming the op, for an index
// outside [0, a.size(dim)): IndexError for index_select, RuntimeError for gather (as torch).
//   void gather_kernel(Task& task);
//
// inputs (out, index, src), output out (the same tensor: accumulates in place); DimAttrs dim:
//   out[p, index[p, j]] += src[p, j]
//   void scatter_add_kernel(Task& task);
//
// inputs (out, index, src) for scatter, (out, index) for scatter_value; output out (the same tensor);
// ScatterAttrs dim, reduce, value:
//   out[p, index[p, j]] = src[p, j] (or value); reduce Add: +=, Multiply: *= (bool: or / and)
// Where an element is written twice without reduce, the largest j wins. Raises RuntimeError (as torch) for an
// index outside [0, out.size(dim)).
//   void scatter_kernel(Task& task);
//
// input a (ndim >= 2), output out contiguous of a's shape; TriangleAttrs diagonal, upper for triu:
//   out[..., r, c] = a[..., r, c] where c - r <= diagonal (tril) / c - r >= diagonal (triu), else 0
//   void triangle_kernel(Task& task);

namespace dg::cpu {

namespace {
constexpr int64_t kWorkGrain = kIndexWorkGrain;  // elements of work per parallel chunk (runtime/scratch.h)

// `t` over the positions of `shape` (dims other than `dim`), with t's own strides: the sizes and strides are kept
// here, the operand points at them (no view is made: a kernel allocates nothing).
struct PositionsView {
  Dims sizes, strides;
  StridedIteration::Operand operand;
  PositionsView(const Tensor& t, IntSpan shape, int64_t dim) {
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      if (d == dim) continue;
      sizes.push_back(shape[d]);
      strides.push_back(t.strides()[d]);
    }
    operand = {static_cast<char*>(t.raw_data()), sizes, strides, static_cast<int64_t>(t.itemsize())};
  }
  PositionsView(const PositionsView&) = delete;
  PositionsView& operator=(const PositionsView&) = delete;
};

// Visits the index dtype (int64 or int32; the op layer has checked).
template <typename F>
void visit_index(DType t, F&& f) {
  if (t == DType::Int32) f.template operator()<int32_t>();
  else f.template operator()<int64_t>();
}

// The error torch raises for the op: IndexError for index_select, RuntimeError for gather and the scatters.
[[noreturn]] void index_out_of_bounds(const Task& task, int64_t value, int64_t dim, int64_t size) {
  const bool select = std::strcmp(task.op->name, "index_select") == 0;
  fail(select ? ErrorKind::Index : ErrorKind::Runtime, "[", task.op->name, "] index ", value,
       " is out of bounds for dimension ", dim, " with size ", size);
}

// An unsigned type of each element width: copies move bits, whatever the dtype.
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

// Small gathers and scatters (at most kSmallWalk index elements: less than one work grain, so one thread runs
// them either way) walk the index in row-major order with three running offsets, without the position views
// and their iteration (the host cost of a call on a few elements). Row-major order visits each position's line
// in increasing j, as the general loops do: the results are bitwise the same.
constexpr int64_t kSmallWalk = 4096;

// f(offset_0, offset_1, offset_2) for every element of `shape` in row-major order; strides in elements.
template <typename F>
void walk_row_major(IntSpan shape, IntSpan s0, IntSpan s1, IntSpan s2, F&& f) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t numel = 1;
  for (int64_t size : shape) numel *= size;
  Dims counter(shape.size(), 0);
  int64_t o0 = 0, o1 = 0, o2 = 0;
  for (int64_t e = 0; e < numel; ++e) {
    f(o0, o1, o2);
    for (int64_t d = nd - 1; d >= 0; --d) {
      const size_t k = static_cast<size_t>(d);
      o0 += s0[k];
      o1 += s1[k];
      o2 += s2[k];
      if (++counter[k] < shape[k]) break;
      o0 -= s0[k] * shape[k];
      o1 -= s1[k] * shape[k];
      o2 -= s2[k] * shape[k];
      counter[k] = 0;
    }
  }
}

// t's strides with the one at `dim` zeroed (the walk adds index * stride there itself).
Dims strides_without(const Tensor& t, int64_t dim) {
  Dims strides(t.strides());
  strides[static_cast<size_t>(dim)] = 0;
  return strides;
}

constexpr int64_t kCopySegment = 16384;  // elements: a long contiguous row is split into segments (jobs)

// One copy dst = src of the same shape (a cat input into its part of the output), coalesced: rows of
// the innermost dim (`inner` elements, strides sd / ss) over the outer dims, each row cut into `segments`
// pieces of at most kCopySegment elements. Job r = (outer row r / segments, segment r % segments).
struct CopyPiece {
  StridedIteration it;
  int64_t inner = 1, segments = 1, jobs = 0;
  explicit CopyPiece(const StridedIteration::Operand operands[2])
      : it(std::span<const StridedIteration::Operand>(operands, 2)) {
    if (it.numel == 0) return;
    inner = it.shape.back();
    segments = (inner + kCopySegment - 1) / kCopySegment;
    jobs = it.numel / inner * segments;
  }
};
static_assert(sizeof(CopyPiece) <= kCatPieceBytes, "cat's scratch declaration (ops/index.cpp) bounds a piece by kCatPieceBytes");


// Jobs [begin, end) of `piece`: the multi-index of the first outer row is found once, then an odometer
// steps the two pointers (no index arithmetic per element or per row). Contiguous rows are memcpy'd;
// otherwise a strided element loop.
template <typename U>
void copy_jobs(const CopyPiece& piece, int64_t begin, int64_t end) {
  const StridedIteration& it = piece.it;
  const int outer_dims = static_cast<int>(it.shape.size()) - 1;
  const int64_t sd = it.strides[0][outer_dims], ss = it.strides[1][outer_dims];
  Dims index(static_cast<size_t>(std::max(outer_dims, 0)), 0);
  int64_t row = begin / piece.segments, segment = begin % piece.segments;
  U* dst = reinterpret_cast<U*>(it.base[0]);
  const U* src = reinterpret_cast<const U*>(it.base[1]);
  for (int d = outer_dims - 1; d >= 0; --d) {
    index[d] = row % it.shape[d];
    row /= it.shape[d];
    dst += index[d] * it.strides[0][d];
    src += index[d] * it.strides[1][d];
  }
  for (int64_t job = begin; job < end; ++job) {
    const int64_t first = segment * kCopySegment, n = std::min(kCopySegment, piece.inner - first);
    U* d = dst + first * sd;
    const U* s = src + first * ss;
    if (sd == 1 && ss == 1) std::memcpy(d, s, static_cast<size_t>(n) * sizeof(U));
    else for (int64_t k = 0; k < n; ++k) d[k * sd] = s[k * ss];
    if (++segment < piece.segments) continue;
    segment = 0;
    for (int dim = outer_dims - 1; dim >= 0; --dim) {  // next outer row
      dst += it.strides[0][dim];
      src += it.strides[1][dim];
      if (++index[dim] < it.shape[dim]) break;
      index[dim] = 0;
      dst -= it.shape[dim] * it.strides[0][dim];
      src -= it.shape[dim] * it.strides[1][dim];
    }
  }
}
}  // namespace

// All inputs in one parallel loop over their jobs (rows or row segments, numbered input after input),
// split by elements: every output element is written once, from its input alone, so the split does not
// change the result. The copies walk the output in memory order (its dims sorted by stride), so a
// permuted output (the gradient of unbind, laid out like its input) is written in sequential runs rather
// than strided ones.
void cat_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const int64_t dim = task.attrs.get<DimAttrs>().dim;
  if (task.inputs.size() == 2 && dim == out.dim() - 1 && task.inputs[0].shape()[dim] == 1 &&
      task.inputs[1].shape()[dim] == 1 && out.is_contiguous() && task.inputs[0].is_contiguous() &&
      task.inputs[1].is_contiguous()) {
    // A stack of two contiguous tensors along a new last dim (rotary embeddings): out[2 i + k] = in_k[i],
    // one interleaving pass that the compiler vectorises.
    visit_width(out.itemsize(), [&]<typename U>() {
      U* o = out.data<U>();
      const U* a = task.inputs[0].data<U>();
      const U* b = task.inputs[1].data<U>();
      parallel_for(0, out.numel() / 2, kWorkGrain, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          o[2 * i] = a[i];
          o[2 * i + 1] = b[i];
        }
      });
    });
    return;
  }
  // The copy plan in the Task's scratch: a piece per input, and first_job[k], the global number of piece k's job 0.
  ScratchArena& scratch = task_scratch(task);
  const int64_t count = static_cast<int64_t>(task.inputs.size());
  CopyPiece* pieces = scratch.take<CopyPiece>(count);
  int64_t* first_job = scratch.take<int64_t>(count + 1);
  first_job[0] = 0;
  int64_t offset = 0, numel = 0;
  const int64_t out_item = static_cast<int64_t>(out.itemsize());
  for (int64_t k = 0; k < count; ++k) {
    const Tensor& in = task.inputs[static_cast<size_t>(k)];
    // out[..., offset : offset + n, ...] (in's shape, out's strides), then a strided copy into it.
    const StridedIteration::Operand operands[2] = {  // StridedIteration walks the output in its memory order
        {static_cast<char*>(out.raw_data()) + offset * out.strides()[dim] * out_item, in.shape(), out.strides(), out_item},
        {static_cast<char*>(in.raw_data()), in.shape(), in.strides(), static_cast<int64_t>(in.itemsize())}};
    offset += in.shape()[dim];
    new (pieces + k) CopyPiece(operands);
    first_job[k + 1] = first_job[k] + pieces[k].jobs;
    numel += pieces[k].it.numel;
  }
  // The pieces own small vectors (no heap: at most 6 dims inline): destroyed when the kernel returns.
  struct DestroyPieces {
    CopyPiece* pieces;
    int64_t count;
    ~DestroyPieces() { for (int64_t k = 0; k < count; ++k) pieces[k].~CopyPiece(); }
  } destroy{pieces, count};
  const int64_t jobs = first_job[count];
  if (jobs == 0) return;
  const int64_t grain = std::max<int64_t>(1, kWorkGrain * jobs / numel);  // about kWorkGrain elements
  bool same_jobs = count > 1;
  for (int64_t k = 0; k < count; ++k) same_jobs = same_jobs && pieces[k].jobs == pieces[0].jobs;
  if (same_jobs) {
    // Equal pieces (stack, the gradient of unbind): blocks of kBlockJobs jobs of every piece in turn, so
    // the writes of a block stay in a small window of the output (for unbind's permuted layout, one
    // sequential stretch) instead of K passes over all of it.
    // A block: up to 32 jobs, about 4096 elements per piece.
    const int64_t per_piece = pieces[0].jobs, job_elements = std::max<int64_t>(1, numel / jobs);
    const int64_t kBlockJobs = std::clamp<int64_t>(4096 / job_elements, 1, 32);
    const int64_t blocks = (per_piece + kBlockJobs - 1) / kBlockJobs;
    const int64_t block_elements = kBlockJobs * job_elements * count;
    visit_width(out.itemsize(), [&]<typename U>() {
      parallel_for(0, blocks, std::max<int64_t>(1, kWorkGrain / block_elements), [&](int64_t lo, int64_t hi) {
        for (int64_t block = lo; block < hi; ++block)
          for (int64_t k = 0; k < count; ++k)
            copy_jobs<U>(pieces[k], block * kBlockJobs, std::min(per_piece, (block + 1) * kBlockJobs));
      });
    });
    return;
  }
  visit_width(out.itemsize(), [&]<typename U>() {
    parallel_for(0, jobs, grain, [&](int64_t lo, int64_t hi) {
      int64_t k = std::upper_bound(first_job, first_job + count + 1, lo) - first_job - 1;
      for (; k < count && first_job[k] < hi; ++k) {
        const int64_t b = std::max(lo, first_job[k]), e = std::min(hi, first_job[k + 1]);
        if (b < e) copy_jobs<U>(pieces[k], b - first_job[k], e - first_job[k]);
      }
    });
  });
}

// out[p, j] = a[p, index[p, j]]: parallel over (j, position) pairs, j outermost, so the innermost loop
// walks positions (the contiguous dims when dim is not the last).
void gather_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& index = task.inputs[1];
  const Tensor& out = task.outputs[0];
  const int64_t dim = task.attrs.get<DimAttrs>().dim;
  const int64_t size = a.shape()[dim], lines = index.shape()[dim];
  if (index.numel() == 0) return;  // nothing to visit (the position views would be out of bounds)
  if (index.numel() <= kSmallWalk) {
    const int64_t sa = a.strides()[dim];
    visit_width(a.itemsize(), [&]<typename U>() {
      visit_index(index.dtype(), [&]<typename I>() {
        U* o = out.data<U>();
        const U* x = a.data<U>();
        const I* ix = index.data<I>();
        walk_row_major(index.shape(), out.strides(), strides_without(a, dim), index.strides(),
                       [&](int64_t po, int64_t pa, int64_t pi) {
                         const int64_t v = static_cast<int64_t>(ix[pi]);
                         if (v < 0 || v >= size) index_out_of_bounds(task, v, dim, size);
                         o[po] = x[pa + v * sa];
                       });
      });
    });
    return;
  }
  const PositionsView out_view(out, index.shape(), dim), a_view(a, index.shape(), dim),
      index_view(index, index.shape(), dim);
  const StridedIteration::Operand views[3] = {out_view.operand, a_view.operand, index_view.operand};
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

// target = x, or combined with it by `reduce` (in the compute type; bool: or / and).
template <typename T>
inline void scatter_update(T& target, T x, ScatterReduce reduce) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<T, bool>) {
    if (reduce == ScatterReduce::None) target = x;
    else if (reduce == ScatterReduce::Add) target = target || x;
    else target = target && x;
  } else {
    if (reduce == ScatterReduce::None) target = x;
    else if (reduce == ScatterReduce::Add) target = static_cast<T>(static_cast<C>(target) + static_cast<C>(x));
    else target = static_cast<T>(static_cast<C>(target) * static_cast<C>(x));
  }
}

// out[p, index[p, j]] = combine(out[p, index[p, j]], source[p, j]): threads split the positions; each walks
// its positions' lines in increasing j (see the file comment for why that is deterministic: it also makes
// the last j win where scatter writes one element twice). `src` null: the source is `value` everywhere.
// An index out of range raises `error` naming `name` (scatter for both scatter ops: what the user called).
void scatter_lines(Task& task, const char* name, int64_t dim, const Tensor* src, Scalar value, ScatterReduce reduce,
                   ErrorKind error) {
  const Tensor& out = task.outputs[0];
  const Tensor& index = task.inputs[1];
  const int64_t size = out.shape()[dim], lines = index.shape()[dim];
  if (index.numel() == 0) return;  // nothing to visit (the position views would be out of bounds)
  if (index.numel() <= kSmallWalk) {
    const int64_t so = out.strides()[dim];
    visit_dtype(out.dtype(), [&]<typename T>() {
      const T constant = value.to<T>();
      visit_index(index.dtype(), [&]<typename I>() {
        T* o = out.data<T>();
        const I* ix = index.data<I>();
        const T* s = src ? src->data<T>() : nullptr;
        walk_row_major(index.shape(), strides_without(out, dim), index.strides(), src ? src->strides() : index.strides(),
                       [&](int64_t po, int64_t pi, int64_t ps) {
                         const int64_t v = static_cast<int64_t>(ix[pi]);
                         if (v < 0 || v >= size)
                           fail(error, "[", name, "] index ", v, " is out of bounds for dimension ", dim, " with size ", size);
                         scatter_update(o[po + v * so], src ? s[ps] : constant, reduce);
                       });
      });
    });
    return;
  }
  const Tensor& source = src ? *src : index;  // scatter_value: a placeholder view that is never read
  const PositionsView out_view(out, index.shape(), dim), index_view(index, index.shape(), dim),
      source_view(source, index.shape(), dim);
  const StridedIteration::Operand views[3] = {out_view.operand, index_view.operand, source_view.operand};
  StridedIteration it(views);
  const int64_t positions = it.numel;
  if (positions == 0 || lines == 0) return;
  const int64_t so = out.strides()[dim], si = index.strides()[dim], ss = src ? src->strides()[dim] : 0;
  visit_dtype(out.dtype(), [&]<typename T>() {
    const T constant = value.to<T>();
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
              if (v < 0 || v >= size)
                fail(error, "[", name, "] index ", v, " is out of bounds for dimension ", dim, " with size ", size);
              scatter_update(o[k * sto + v * so], src ? s[k * sts] : constant, reduce);
            }
          });
        }
      });
    });
  });
}

void scatter_add_kernel(Task& task) {
  scatter_lines(task, task.op->name, task.attrs.get<DimAttrs>().dim, &task.inputs[2], Scalar(0), ScatterReduce::Add,
                ErrorKind::Runtime);
}
// inputs (out, index, src) or (out, index); output out (the same tensor); ScatterAttrs.
void scatter_kernel(Task& task) {
  const ScatterAttrs& attrs = task.attrs.get<ScatterAttrs>();
  scatter_lines(task, "scatter", attrs.dim, task.inputs.size() > 2 ? &task.inputs[2] : nullptr, attrs.value, attrs.reduce,
                ErrorKind::Runtime);
}

// Rows of the last two dims [B, R, C]: one row per work item, batch offsets from the batch dims' strides.
void triangle_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const TriangleAttrs& attrs = task.attrs.get<TriangleAttrs>();
  const int64_t diagonal = attrs.diagonal;
  const bool upper = attrs.upper;
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

// repeat_interleave_kernel: inputs (counts: 1-D, integral), outputs (index [output_size], the counts' dtype): k written
// counts[k] times. The counts are checked (none negative, their sum output_size) before anything is written.
void repeat_interleave_kernel(Task& task) {
  const Tensor& counts = task.inputs[0];
  Tensor& out = task.outputs[0];
  const int64_t n = counts.numel(), stride = n ? counts.strides()[0] : 1, size = out.numel();
  visit_dtype(counts.dtype(), [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* c = counts.data<T>();
      int64_t total = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t r = static_cast<int64_t>(c[k * stride]);
        DG_CHECK(r >= 0, Runtime, "[repeat_interleave] repeats can not be negative, got ", r);
        total += r;
      }
      DG_CHECK(total == size, Runtime, "[repeat_interleave] output_size=", size, " does not match the required size ",
               total, " (the sum of repeats)");
      T* o = out.data<T>();
      for (int64_t k = 0, at = 0; k < n; ++k)
        for (int64_t r = static_cast<int64_t>(c[k * stride]); r > 0; --r) o[at++] = static_cast<T>(k);
    } else {
      fail(ErrorKind::Runtime, "[repeat_interleave] internal error: counts of dtype ", dtype_name(counts.dtype()));
    }
  });
}

DG_REGISTER_KERNEL(cat, Device::Type::CPU, cat_kernel);
DG_REGISTER_KERNEL(gather, Device::Type::CPU, gather_kernel);
DG_REGISTER_KERNEL(index_select, Device::Type::CPU, gather_kernel);
DG_REGISTER_KERNEL(scatter_add, Device::Type::CPU, scatter_add_kernel);
DG_REGISTER_KERNEL(index_add, Device::Type::CPU, scatter_add_kernel);
DG_REGISTER_KERNEL(scatter, Device::Type::CPU, scatter_kernel);
DG_REGISTER_KERNEL(scatter_value, Device::Type::CPU, scatter_kernel);
DG_REGISTER_KERNEL(tril, Device::Type::CPU, triangle_kernel);
DG_REGISTER_KERNEL(triu, Device::Type::CPU, triangle_kernel);
DG_REGISTER_KERNEL(repeat_interleave, Device::Type::CPU, repeat_interleave_kernel);

}  // namespace dg::cpu
