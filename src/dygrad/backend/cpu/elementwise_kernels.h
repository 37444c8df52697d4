// Kernel templates for elementwise ops: a functor computes one element in the compute type (float for
// float16/bfloat16, rounded once on store); these templates run it over flat or strided operands.
//
// Shapes: out[N...] = f(a[N...] broadcast, b[N...] broadcast). All operands share one dtype T except where
// a template says otherwise (comparisons write bool).
#pragma once
#include "dygrad/backend/cpu/loops.h"
#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// out = f(a): Fn is a functor template instantiated per compute type: Fn::template apply<C>(C x, attrs).
template <typename Fn, typename TOut, typename TIn>
void unary_loop(Task& task, const Fn& fn) {
  using C = compute_t<TIn>;
  const Tensor operands[2] = {task.outputs[0], task.inputs[0]};
  StridedIteration it(operands);
  if (it.is_flat()) {
    TOut* out = operands[0].data<TOut>();
    const TIn* in = operands[1].data<TIn>();
    parallel_for(0, it.numel, kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = static_cast<TOut>(fn(static_cast<C>(in[i])));
    });
    return;
  }
  for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
    char* o = p[0];
    const char* x = p[1];
    for (int64_t i = 0; i < n; ++i, o += s[0], x += s[1])
      *reinterpret_cast<TOut*>(o) = static_cast<TOut>(fn(static_cast<C>(*reinterpret_cast<const TIn*>(x))));
  });
}

// out = f(a, b), a and b of type TIn, out of type TOut.
template <typename Fn, typename TOut, typename TIn>
void binary_loop(Task& task, const Fn& fn) {
  using C = compute_t<TIn>;
  const Tensor operands[3] = {task.outputs[0], task.inputs[0], task.inputs[1]};
  StridedIteration it(operands);
  if (it.is_flat()) {
    TOut* __restrict out = operands[0].data<TOut>();
    const TIn* a = operands[1].data<TIn>();
    const TIn* b = operands[2].data<TIn>();
    parallel_for(0, it.numel, kElementwiseGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<TOut>(fn(static_cast<C>(a[i]), static_cast<C>(b[i])));
    });
    return;
  }
  for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
    TOut* o = reinterpret_cast<TOut*>(p[0]);
    const TIn* a = reinterpret_cast<const TIn*>(p[1]);
    const TIn* b = reinterpret_cast<const TIn*>(p[2]);
    if (s[0] == sizeof(TOut) && s[1] == sizeof(TIn) && s[2] == sizeof(TIn)) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(static_cast<C>(a[i]), static_cast<C>(b[i])));
    } else if (s[0] == sizeof(TOut) && s[1] == sizeof(TIn) && s[2] == 0) {
      const C bv = static_cast<C>(*b);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(static_cast<C>(a[i]), bv));
    } else if (s[0] == sizeof(TOut) && s[1] == 0 && s[2] == sizeof(TIn)) {
      const C av = static_cast<C>(*a);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<TOut>(fn(av, static_cast<C>(b[i])));
    } else {
      const int64_t so = s[0] / static_cast<int64_t>(sizeof(TOut)), sa = s[1] / static_cast<int64_t>(sizeof(TIn)),
                    sb = s[2] / static_cast<int64_t>(sizeof(TIn));
      for (int64_t i = 0; i < n; ++i)
        o[i * so] = static_cast<TOut>(fn(static_cast<C>(a[i * sa]), static_cast<C>(b[i * sb])));
    }
  });
}

// out = f(a, b, c) (where, lerp, clamp with tensor bounds): operands of types TOut, TA, TB, TC.
template <typename Fn, typename TOut, typename TA, typename TB, typename TC>
void ternary_loop(Task& task, const Fn& fn) {
  const Tensor operands[4] = {task.outputs[0], task.inputs[0], task.inputs[1], task.inputs[2]};
  StridedIteration it(operands);
  for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<TOut*>(p[0] + i * s[0]) = static_cast<TOut>(fn(*reinterpret_cast<const TA*>(p[1] + i * s[1]),
                                                                      *reinterpret_cast<const TB*>(p[2] + i * s[2]),
                                                                      *reinterpret_cast<const TC*>(p[3] + i * s[3])));
  });
}

}  // namespace dg::cpu
