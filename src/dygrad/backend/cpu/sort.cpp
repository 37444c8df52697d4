// CPU kernels of the ordering and scan ops: sort, topk, cumsum, cumprod (and its backward), flip.
//
// Notation: dim is the sorted / scanned dim, L its size; a "line" is the run j = 0..L-1 along dim at one
// position p over the other dims (P = numel / L positions). line_offset(t, p) is where t's line p starts (in
// elements, t's own strides), s_t its stride along dim. Every operand keeps its own strides.
//
// Determinism: threads split the positions, never a line; a line is processed in a fixed order by one
// thread, so results do not depend on the thread count.
//
// The kernels and their operands:
// input a [.., L, ..] (any dtype, any strides); outputs values (a's dtype), indices (int64), contiguous, of
// a's shape; SortAttrs dim, descending:
//   values[p, :] = a[p, indices[p, :]], indices a stable order of a[p, :] (NaN the largest value)
//   void sort_kernel(Task& task);
// the same with outputs of size k along dim; TopkAttrs k, dim, largest:
//   the k largest (smallest) of a[p, :] in order, ties broken by the lower index
//   void topk_kernel(Task& task);
// input a, output out (a's dtype: the op layer has cast), contiguous; ScanAttrs dim, reverse:
//   out[p, j] = a[p, 0] + ... + a[p, j] (reverse: a[p, j] + ... + a[p, L-1]); cumprod with *
//   accumulated in torch's CPU accumulate type (double for float32 / float64, float for 16-bit, int64)
//   void scan_kernel<Op>(Task& task);
// inputs (x, g), output grad_x, contiguous; ScanAttrs dim; out = cumprod(x) recomputed in the accumulate type;
// z = the first j with x[p, j] == 0:
//   grad_x[p, i] = sum_{i <= j < z} g[p, j] out[p, j] / x[p, i]            for i < z
//   grad_x[p, z] = sum_{j >= z} g[p, j] out[p, z-1] prod_{z < k <= j} x[p, k]
//   grad_x[p, i] = 0                                                      for i > z
//   void cumprod_backward_kernel(Task& task);
// input a (any strides), output out contiguous; FlipAttrs dims:
//   out[.., i, ..] = a[.., size - 1 - i, ..] along each dim of dims: a copy from a view with negated strides
//   void flip_kernel(Task& task);
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/scratch.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "dygrad/backend/cpu/loops.h"
#include "dygrad/core/error.h"

namespace dg::cpu {

namespace {
constexpr int64_t kWorkGrain = kIndexWorkGrain;  // elements of work per parallel chunk (runtime/scratch.h)

// Where line p of `t` starts: p unravelled over the dims other than dim (the last one fastest).
int64_t line_offset(const Tensor& t, int64_t dim, int64_t p) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0 && p > 0; --d) {
    if (d == dim) continue;
    const int64_t size = t.shape()[d];
    offset += (p % size) * t.strides()[d];
    p /= size;
  }
  return offset;
}

// Splits the P lines of length L over the pool (about kWorkGrain elements per chunk).
template <typename F>
void for_each_line(int64_t positions, int64_t length, F&& body) {
  parallel_for(0, positions, std::max<int64_t>(1, kWorkGrain / std::max<int64_t>(length, 1)), body);
}

// A stable sort of data[0, n) with `buffer` (room for n) as its merge space: insertion-sorted runs of 32, merged
// bottom-up (std::merge takes the left run's element on ties). A stable order is unique, so the result is
// std::stable_sort's, without its heap buffer (the Task's scratch holds this one).
template <typename E, typename Less>
void stable_sort_into(E* data, E* buffer, int64_t n, Less less) {
  constexpr int64_t kRun = 32;
  for (int64_t b = 0; b < n; b += kRun) {
    const int64_t e = std::min(n, b + kRun);
    for (int64_t i = b + 1; i < e; ++i) {
      E v = data[i];
      int64_t j = i;
      for (; j > b && less(v, data[j - 1]); --j) data[j] = data[j - 1];
      data[j] = v;
    }
  }
  E* from = data;
  E* to = buffer;
  for (int64_t width = kRun; width < n; width *= 2) {
    for (int64_t b = 0; b < n; b += 2 * width) {
      const int64_t m = std::min(n, b + width), e = std::min(n, b + 2 * width);
      std::merge(from + b, from + m, from + m, from + e, to + b, less);
    }
    std::swap(from, to);
  }
  if (from != data) std::copy(from, from + n, data);
}

// a < b with NaN the largest value (NaNs equal among themselves): torch's sort and topk order.
template <typename K>
inline bool less_nan_last(K a, K b) {
  if constexpr (std::is_floating_point_v<K>) return a < b || (b != b && a == a);
  else return a < b;
}

// The accumulate type of torch's CPU cumsum / cumprod (at::acc_type<T, false>).
template <typename T>
using scan_acc_t = std::conditional_t<std::is_same_v<T, double> || std::is_same_v<T, float>, double,
                                      std::conditional_t<std::is_floating_point_v<compute_t<T>>, float, int64_t>>;
}  // namespace

void sort_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& values = task.outputs[0];
  const Tensor& indices = task.outputs[1];
  const SortAttrs& attrs = task.attrs.get<SortAttrs>();
  const int64_t dim = attrs.dim, L = a.shape()[dim];
  if (a.numel() == 0) return;
  const int64_t positions = a.numel() / L, sa = a.strides()[dim], sv = values.strides()[dim];
  const bool descending = attrs.descending;
  visit_dtype(a.dtype(), [&]<typename T>() {
    using K = compute_t<T>;
    using Entry = std::pair<K, int64_t>;
    // Per pool thread: a line of (key, index) pairs and the sort's merge space, as many.
    auto lines = task_scratch(task).per_worker<Entry>(2 * L, positions);
    for_each_line(positions, L, [&](int64_t lo, int64_t hi) {
      const auto held = lines.acquire();
      Entry* line = held.data();
      Entry* merge_space = line + L;
      for (int64_t p = lo; p < hi; ++p) {
        const T* x = a.data<T>() + line_offset(a, dim, p);
        for (int64_t j = 0; j < L; ++j) line[j] = {static_cast<K>(x[j * sa]), j};
        if (descending)
          stable_sort_into(line, merge_space, L, [](const Entry& u, const Entry& v) { return less_nan_last(v.first, u.first); });
        else
          stable_sort_into(line, merge_space, L, [](const Entry& u, const Entry& v) { return less_nan_last(u.first, v.first); });
        T* out = values.data<T>() + line_offset(values, dim, p);
        int64_t* index = indices.data<int64_t>() + line_offset(indices, dim, p);
        for (int64_t j = 0; j < L; ++j) {
          const int64_t from = line[j].second;
          out[j * sv] = x[from * sa];
          index[j * sv] = from;
        }
      }
    });
  });
}

void topk_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& values = task.outputs[0];
  const Tensor& indices = task.outputs[1];
  const TopkAttrs& attrs = task.attrs.get<TopkAttrs>();
  const int64_t dim = attrs.dim, L = a.shape()[dim], k = attrs.k;
  if (a.numel() == 0 || k == 0) return;
  const int64_t positions = a.numel() / L, sa = a.strides()[dim], sv = values.strides()[dim];
  const bool largest = attrs.largest;
  visit_dtype(a.dtype(), [&]<typename T>() {
    using K = compute_t<T>;
    auto orders = task_scratch(task).per_worker<int64_t>(L, positions);  // per pool thread, a line of indices
    for_each_line(positions, L, [&](int64_t lo, int64_t hi) {
      const auto held = orders.acquire();
      int64_t* order = held.data();
      for (int64_t p = lo; p < hi; ++p) {
        const T* x = a.data<T>() + line_offset(a, dim, p);
        std::iota(order, order + L, int64_t{0});
        // A total order (value, then index), so partial_sort's result is unique.
        auto before = [&](int64_t i, int64_t j) {
          const K xi = static_cast<K>(x[i * sa]), xj = static_cast<K>(x[j * sa]);
          if (largest) return less_nan_last(xj, xi) || (!less_nan_last(xi, xj) && i < j);
          return less_nan_last(xi, xj) || (!less_nan_last(xj, xi) && i < j);
        };
        std::partial_sort(order, order + k, order + L, before);
        T* out = values.data<T>() + line_offset(values, dim, p);
        int64_t* index = indices.data<int64_t>() + line_offset(indices, dim, p);
        for (int64_t j = 0; j < k; ++j) {
          out[j * sv] = x[order[j] * sa];
          index[j * sv] = order[j];
        }
      }
    });
  });
}

namespace {
struct Plus {
  template <typename A> static A identity() { return A(0); }
  template <typename A> static A apply(A x, A y) { return x + y; }
};
struct Times {
  template <typename A> static A identity() { return A(1); }
  template <typename A> static A apply(A x, A y) { return x * y; }
};
}  // namespace

template <typename Op>
void scan_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const ScanAttrs& attrs = task.attrs.get<ScanAttrs>();
  const int64_t dim = attrs.dim, L = a.shape()[dim];
  if (a.numel() == 0) return;
  const int64_t positions = a.numel() / L, sa = a.strides()[dim], so = out.strides()[dim];
  const bool reverse = attrs.reverse;
  visit_dtype(out.dtype(), [&]<typename T>() {
    using A = scan_acc_t<T>;
    for_each_line(positions, L, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const T* x = a.data<T>() + line_offset(a, dim, p);
        T* y = out.data<T>() + line_offset(out, dim, p);
        A acc = Op::template identity<A>();
        for (int64_t step = 0; step < L; ++step) {
          const int64_t j = reverse ? L - 1 - step : step;
          acc = Op::apply(acc, static_cast<A>(static_cast<compute_t<T>>(x[j * sa])));
          y[j * so] = static_cast<T>(static_cast<compute_t<T>>(acc));
        }
      }
    });
  });
}

void cumprod_backward_kernel(Task& task) {
  const Tensor& x = task.inputs[0];
  const Tensor& g = task.inputs[1];
  const Tensor& result = task.outputs[0];
  const int64_t dim = task.attrs.get<ScanAttrs>().dim, L = x.shape()[dim];
  if (x.numel() == 0) return;
  const int64_t positions = x.numel() / L, sx = x.strides()[dim], sg = g.strides()[dim], sr = result.strides()[dim];
  visit_floating(x.dtype(), [&]<typename T>() {
    using A = scan_acc_t<T>;
    for_each_line(positions, L, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const T* xs = x.data<T>() + line_offset(x, dim, p);
        const T* gs = g.data<T>() + line_offset(g, dim, p);
        T* r = result.data<T>() + line_offset(result, dim, p);
        auto at = [](const T* base, int64_t j, int64_t stride) { return static_cast<A>(static_cast<compute_t<T>>(base[j * stride])); };
        // out[j] for j < z recomputed in the accumulate type (not read back rounded to T), from the end.
        int64_t z = 0;
        A before_zero = 1;  // out[z - 1] (1 when z = 0)
        while (z < L && at(xs, z, sx) != A(0)) before_zero *= at(xs, z++, sx);
        A suffix = 0, out_j = before_zero;  // suffix: sum_{i <= j < z} g[j] out[j]
        for (int64_t i = z - 1; i >= 0; --i) {
          suffix += at(gs, i, sg) * out_j;
          const A xi = at(xs, i, sx);
          r[i * sr] = static_cast<T>(static_cast<compute_t<T>>(suffix / xi));
          out_j /= xi;  // out[i - 1]
        }
        if (z == L) continue;
        A partial = before_zero, total = 0;  // out[z-1] prod_{z < k <= j} x[k]
        for (int64_t j = z; j < L; ++j) {
          if (j > z) partial *= at(xs, j, sx);
          total += at(gs, j, sg) * partial;
        }
        r[z * sr] = static_cast<T>(static_cast<compute_t<T>>(total));
        for (int64_t i = z + 1; i < L; ++i) r[i * sr] = T(0);
      }
    });
  });
}

void flip_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& out = task.outputs[0];
  if (out.numel() == 0) return;
  // a with the flipped dims' strides negated, from its last element along them.
  Dims strides(a.strides());
  int64_t offset = 0;
  for (int64_t d : task.attrs.get<FlipAttrs>().dims) {
    offset += (a.shape()[d] - 1) * strides[static_cast<size_t>(d)];
    strides[static_cast<size_t>(d)] = -strides[static_cast<size_t>(d)];
  }
  const int64_t item = static_cast<int64_t>(a.itemsize());
  const StridedIteration::Operand operands[2] = {
      {static_cast<char*>(out.raw_data()), out.shape(), out.strides(), static_cast<int64_t>(out.itemsize())},
      {static_cast<char*>(a.raw_data()) + offset * item, a.shape(), strides, item}};
  StridedIteration it(operands);
  visit_dtype(out.dtype(), [&]<typename T>() {
    for_each_element(it, [&](char** ptr, const int64_t* st, int64_t n) {
      T* o = reinterpret_cast<T*>(ptr[0]);
      const T* x = reinterpret_cast<const T*>(ptr[1]);
      const int64_t so = st[0] / int64_t(sizeof(T)), sx = st[1] / int64_t(sizeof(T));
      if (so == 1 && sx == -1) for (int64_t k = 0; k < n; ++k) o[k] = x[-k];  // a reversed row
      else for (int64_t k = 0; k < n; ++k) o[k * so] = x[k * sx];
    });
  });
}

DG_REGISTER_KERNEL(sort, Device::Type::CPU, sort_kernel);
DG_REGISTER_KERNEL(topk, Device::Type::CPU, topk_kernel);
DG_REGISTER_KERNEL(cumsum, Device::Type::CPU, scan_kernel<Plus>);
DG_REGISTER_KERNEL(cumprod, Device::Type::CPU, scan_kernel<Times>);
DG_REGISTER_KERNEL(cumprod_backward, Device::Type::CPU, cumprod_backward_kernel);
DG_REGISTER_KERNEL(flip, Device::Type::CPU, flip_kernel);

}  // namespace dg::cpu
