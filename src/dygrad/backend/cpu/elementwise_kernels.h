// Kernel templates for elementwise ops: a functor computes one element in the compute type (float for
// float16/bfloat16, rounded once on store); these templates run it over flat or strided operands.
//
// Shapes: out[N...] = f(a[N...] broadcast, b[N...] broadcast). All operands share one dtype T except where
// a template says otherwise (comparisons write bool).
#pragma once
#include <algorithm>
#include <initializer_list>

#include "dygrad/backend/cpu/loops.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cpu {

// True when the output and every input are contiguous with the same shape (no broadcast, no view
// strides): a flat loop over numel elements. Checked on the Task's own tensors, before building an
// iteration plan or copying any operand, so a tiny op pays neither (docs/stream.md, "Inline execution").
inline bool flat_operands(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : inputs)
    if (!t->is_contiguous() || !std::ranges::equal(t->shape(), out.shape())) return false;
  return true;
}

// out[i] = f(a[i]) over n contiguous elements on one thread. Neither loop carries an aliasing doubt (an
// in-place call, out == in, gets its own loop over one pointer), so the compiler vectorises both without
// runtime overlap checks.
template <typename Fn, typename TOut, typename TIn>
void unary_contiguous(TOut* out, const TIn* in, int64_t n, const Fn& fn) {
  using C = compute_t<TIn>;
  if (static_cast<const void*>(out) == static_cast<const void*>(in)) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<TOut>(fn(static_cast<C>(out[i])));
    return;
  }
  TOut* __restrict o = out;
  const TIn* __restrict x = in;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(static_cast<C>(x[i])));
}

// The same over the pool (the flat path of unary_loop).
template <typename Fn, typename TOut, typename TIn>
void unary_flat(TOut* out, const TIn* in, int64_t n, const Fn& fn) {
  parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) { unary_contiguous(out + b, in + b, e - b, fn); });
}

// out = f(a), a of type TIn, out of type TOut: the one unary loop (unary.cpp, casts, comparisons with a
// scalar). fn takes and returns the compute type of TIn.
template <typename Fn, typename TOut, typename TIn>
void unary_loop(Task& task, const Fn& fn) {
  using C = compute_t<TIn>;
  const Tensor& out = task.outputs[0];
  const Tensor& in = task.inputs[0];
  if (flat_operands(out, {&in})) return unary_flat<Fn, TOut, TIn>(out.data<TOut>(), in.data<TIn>(), out.numel(), fn);
  const Tensor operands[2] = {out, in};
  StridedIteration it(operands);
  if (it.is_flat()) return unary_flat<Fn, TOut, TIn>(out.data<TOut>(), in.data<TIn>(), it.numel, fn);
  for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
    TOut* o = reinterpret_cast<TOut*>(p[0]);
    const TIn* x = reinterpret_cast<const TIn*>(p[1]);
    const int64_t so = s[0] / static_cast<int64_t>(sizeof(TOut)), sx = s[1] / static_cast<int64_t>(sizeof(TIn));
    // One loop per common stride pattern, each vectorised (a strided copy reads or writes with permutes).
    if (so == 1 && sx == 1) unary_contiguous(o, x, n, fn);
    else if (so == 1) for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(static_cast<C>(x[i * sx])));
    else if (sx == 1) for (int64_t i = 0; i < n; ++i) o[i * so] = static_cast<TOut>(fn(static_cast<C>(x[i])));
    else for (int64_t i = 0; i < n; ++i) o[i * so] = static_cast<TOut>(fn(static_cast<C>(x[i * sx])));
  });
}

// out[i] = f(a[i], b[i]) over n contiguous elements (the flat path of binary_loop).
template <typename Fn, typename TOut, typename TIn>
void binary_flat(TOut* __restrict out, const TIn* a, const TIn* b, int64_t n, const Fn& fn) {
  using C = compute_t<TIn>;
  parallel_for(0, n, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<TOut>(fn(static_cast<C>(a[i]), static_cast<C>(b[i])));
  });
}

// One row of out[i] = f(a[i * sa], b[i * sb]) with a contiguous output: one loop per stride class of each
// input (SA, SB: 1 contiguous, 0 broadcast, 2 every other element, -1 any stride, known at run time), so
// the compiler vectorises each (strided loads become permutes or element inserts). Views such as x[..., ::2]
// (the composed rotary embedding) or a transposed operand take these loops instead of a scalar one.
template <int SA, int SB, typename Fn, typename TOut, typename TIn>
void binary_row(TOut* o, const TIn* a, const TIn* b, int64_t n, int64_t sa, int64_t sb, const Fn& fn) {
  using C = compute_t<TIn>;
  const int64_t step_a = SA >= 0 ? SA : sa, step_b = SB >= 0 ? SB : sb;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(static_cast<C>(a[i * step_a]), static_cast<C>(b[i * step_b])));
}

// The row loop for input strides sa, sb (in elements) and a contiguous output.
template <typename Fn, typename TOut, typename TIn>
void binary_contiguous_out(TOut* o, const TIn* a, const TIn* b, int64_t n, int64_t sa, int64_t sb, const Fn& fn) {
  auto stride_class = [](int64_t s) { return s == 0 || s == 1 || s == 2 ? int(s) : -1; };
  switch (stride_class(sa) * 4 + stride_class(sb)) {  // sa's class * 4 + sb's class, classes -1..2
    case 1 * 4 + 1: return binary_row<1, 1>(o, a, b, n, sa, sb, fn);
    case 1 * 4 + 0: return binary_row<1, 0>(o, a, b, n, sa, sb, fn);
    case 0 * 4 + 1: return binary_row<0, 1>(o, a, b, n, sa, sb, fn);
    case 2 * 4 + 1: return binary_row<2, 1>(o, a, b, n, sa, sb, fn);
    case 1 * 4 + 2: return binary_row<1, 2>(o, a, b, n, sa, sb, fn);
    case 2 * 4 + 0: return binary_row<2, 0>(o, a, b, n, sa, sb, fn);
    case 0 * 4 + 2: return binary_row<0, 2>(o, a, b, n, sa, sb, fn);
    case 2 * 4 + 2: return binary_row<2, 2>(o, a, b, n, sa, sb, fn);
    default:
      if (sb == 1) return binary_row<-1, 1>(o, a, b, n, sa, sb, fn);
      if (sa == 1) return binary_row<1, -1>(o, a, b, n, sa, sb, fn);
      if (sb == 0) return binary_row<-1, 0>(o, a, b, n, sa, sb, fn);
      if (sa == 0) return binary_row<0, -1>(o, a, b, n, sa, sb, fn);
      return binary_row<-1, -1>(o, a, b, n, sa, sb, fn);
  }
}

// out = f(a, b), a and b of type TIn, out of type TOut.
template <typename Fn, typename TOut, typename TIn>
void binary_loop(Task& task, const Fn& fn) {
  using C = compute_t<TIn>;
  const Tensor& out = task.outputs[0];
  const Tensor& lhs = task.inputs[0];
  const Tensor& rhs = task.inputs[1];
  if (flat_operands(out, {&lhs, &rhs}))
    return binary_flat<Fn, TOut, TIn>(out.data<TOut>(), lhs.data<TIn>(), rhs.data<TIn>(), out.numel(), fn);
  const Tensor operands[3] = {out, lhs, rhs};
  StridedIteration it(operands);
  if (it.is_flat())
    return binary_flat<Fn, TOut, TIn>(out.data<TOut>(), lhs.data<TIn>(), rhs.data<TIn>(), it.numel, fn);
  if (it.shape.size() == 2 && it.strides[0][1] == 1) {
    // Rows of a contiguous output (a bias or a row scale broadcast over a matrix, [B, T, C] + [C] after
    // coalescing): each row's pointers from its index, in registers. The general walk below keeps them in arrays
    // it updates per row (store-forwarding stalls measured at ~17 ns a row: add of [256, 320] and [320] took
    // 1.5x the time of two [256, 320] operands).
    const int64_t rows = it.shape[0], columns = it.shape[1];
    TOut* o = reinterpret_cast<TOut*>(it.base[0]);
    const TIn* a = reinterpret_cast<const TIn*>(it.base[1]);
    const TIn* b = reinterpret_cast<const TIn*>(it.base[2]);
    const int64_t ro = it.strides[0][0], ra = it.strides[1][0], rb = it.strides[2][0];
    const int64_t sa = it.strides[1][1], sb = it.strides[2][1];
    return parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(columns, 1)),
                        [&](int64_t begin, int64_t end) {
                          for (int64_t r = begin; r < end; ++r)
                            binary_contiguous_out(o + r * ro, a + r * ra, b + r * rb, columns, sa, sb, fn);
                        });
  }
  for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
    TOut* o = reinterpret_cast<TOut*>(p[0]);
    const TIn* a = reinterpret_cast<const TIn*>(p[1]);
    const TIn* b = reinterpret_cast<const TIn*>(p[2]);
    const int64_t so = s[0] / static_cast<int64_t>(sizeof(TOut)), sa = s[1] / static_cast<int64_t>(sizeof(TIn)),
                  sb = s[2] / static_cast<int64_t>(sizeof(TIn));
    if (so == 1) return binary_contiguous_out(o, a, b, n, sa, sb, fn);
    for (int64_t i = 0; i < n; ++i)
      o[i * so] = static_cast<TOut>(fn(static_cast<C>(a[i * sa]), static_cast<C>(b[i * sb])));
  });
}

// out[i] = f(a[i], b[i], c[i]) over n contiguous elements of each operand (vectorised).
template <typename Fn, typename TOut, typename TA, typename TB, typename TC>
void ternary_contiguous(TOut* o, const TA* a, const TB* b, const TC* c, int64_t n, const Fn& fn) {
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(a[i], b[i], c[i]));
}

// out = f(a, b, c) (lerp; clamp with tensor bounds and where take compare.cpp's map_elements): operands of types
// TOut, TA, TB, TC. Contiguous operands of one shape run one flat loop; rows contiguous in every operand (a
// broadcast [C] operand over [R, C]) run one vectorised loop per row; other layouts go element by element.
template <typename Fn, typename TOut, typename TA, typename TB, typename TC>
void ternary_loop(Task& task, const Fn& fn) {
  const Tensor operands[4] = {task.outputs[0], task.inputs[0], task.inputs[1], task.inputs[2]};
  if (flat_operands(operands[0], {&operands[1], &operands[2], &operands[3]})) {
    TOut* o = operands[0].data<TOut>();
    const TA* a = operands[1].data<TA>();
    const TB* b = operands[2].data<TB>();
    const TC* c = operands[3].data<TC>();
    return parallel_for(0, operands[0].numel(), kElementwiseGrain, [&](int64_t begin, int64_t end) {
      ternary_contiguous(o + begin, a + begin, b + begin, c + begin, end - begin, fn);
    });
  }
  StridedIteration it(operands);
  const int64_t sizes[4] = {sizeof(TOut), sizeof(TA), sizeof(TB), sizeof(TC)};
  for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizes[0] && s[1] == sizes[1] && s[2] == sizes[2] && s[3] == sizes[3])
      return ternary_contiguous(reinterpret_cast<TOut*>(p[0]), reinterpret_cast<const TA*>(p[1]),
                                reinterpret_cast<const TB*>(p[2]), reinterpret_cast<const TC*>(p[3]), n, fn);
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<TOut*>(p[0] + i * s[0]) = static_cast<TOut>(fn(*reinterpret_cast<const TA*>(p[1] + i * s[1]),
                                                                      *reinterpret_cast<const TB*>(p[2] + i * s[2]),
                                                                      *reinterpret_cast<const TC*>(p[3] + i * s[3])));
  });
}

}  // namespace dg::cpu
