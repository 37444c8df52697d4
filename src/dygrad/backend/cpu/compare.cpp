// CPU kernels: comparisons, logical ops, where, masked_fill and clamp over strided, broadcast operands.
//
// Shapes: out[N...] = f(in0[N...], in1[N...], ...), every input broadcast to the output (stride 0).
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dygrad/backend/cpu/elementwise_kernels.h"
#include "dygrad/math/arithmetic.h"

// The kernels of this file and their operands:
// inputs (a, b) of one dtype, output bool: out = a <op> b
//   void eq_kernel(Task& task);
//   void ne_kernel(Task& task);
//   void lt_kernel(Task& task);
//   void le_kernel(Task& task);
//   void gt_kernel(Task& task);
//   void ge_kernel(Task& task);
// input (a), ScalarAttrs value = s, output bool: out = a <op> s
//   void eq_scalar_kernel(Task& task);
//   void ne_scalar_kernel(Task& task);
//   void lt_scalar_kernel(Task& task);
//   void le_scalar_kernel(Task& task);
//   void gt_scalar_kernel(Task& task);
//   void ge_scalar_kernel(Task& task);
// input (a) of any dtype, output bool: out = (a == 0)
//   void logical_not_kernel(Task& task);
// inputs (a, b) bool, output bool
//   void logical_and_kernel(Task& task);
//   void logical_or_kernel(Task& task);
// inputs (a, b) of the output's dtype, integral or bool: out = a & b, a | b, a ^ b, a << b, a >> b
//   void bitwise_and_kernel(Task& task);  (and bitwise_or, bitwise_xor, bitwise_left_shift, bitwise_right_shift)
// input (a), ScalarAttrs value = s: the same with s as the second operand
//   void bitwise_and_scalar_kernel(Task& task);  (and the other four)
// input (a) integral or bool: out = ~a (not, for bool)
//   void bitwise_not_kernel(Task& task);
// inputs (cond bool, a, b), a and b of the output's dtype: out = cond ? a : b
//   void where_kernel(Task& task);
// inputs (cond bool, a), WhereScalarAttrs: out = cond ? a : value, or cond ? value : a when scalar_when_true
//   void where_scalar_kernel(Task& task);
// inputs (a, mask bool), ScalarAttrs value: out = mask ? value : a
//   void masked_fill_kernel(Task& task);
// input (x), ClampAttrs: min when has_min, max when has_max
//   void clamp_scalar_kernel(Task& task);
// inputs (x, bounds...) of the output's dtype, ClampAttrs has_min / has_max say which bounds are present
// (inputs (x, min, max), (x, min) or (x, max)): out = min(max(x, min), max), nan in any operand gives nan
//   void clamp_tensor_kernel(Task& task);

namespace dg::cpu {

namespace {
template <typename T>
using C = compute_t<T>;

// x[i]; a bool is read as its byte compared with 0, which GCC vectorises (a bool load it does not).
template <typename T>
inline T load_value(const T* x, int64_t i) {
  if constexpr (std::is_same_v<T, bool>) return reinterpret_cast<const uint8_t*>(x)[i] != 0;
  else return x[i];
}

// out = fn(in0, in1, ...) with each operand of its own stored type (TOut, TIn...): fn sees stored values.
// Contiguous operands run one flat loop; otherwise rows of the coalesced iteration.
template <typename TOut, typename... TIn, typename Fn>
void map_elements(Task& task, const Fn& fn) {
  constexpr size_t num_inputs = sizeof...(TIn);
  Tensor operands[num_inputs + 1];
  operands[0] = task.outputs[0];
  for (size_t k = 0; k < num_inputs; ++k) operands[k + 1] = task.inputs[k];
  StridedIteration it(std::span<const Tensor>(operands, num_inputs + 1));
  [&]<size_t... K>(std::index_sequence<K...>) {
    if (it.is_flat()) {
      TOut* out = operands[0].template data<TOut>();
      const std::tuple<const TIn*...> in{operands[K + 1].template data<TIn>()...};
      parallel_for(0, it.numel, kElementwiseGrain, [&](int64_t b, int64_t e) {
        const Fn local = fn;  // a local copy: its captures cannot alias out, so they stay in registers
        for (int64_t i = b; i < e; ++i) out[i] = static_cast<TOut>(local(load_value(std::get<K>(in), i)...));
      });
      return;
    }
    for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
      // Rows contiguous in every operand (e.g. a mask broadcast over leading dims): typed pointers, so the
      // loop vectorises; otherwise byte strides.
      if (s[0] == int64_t(sizeof(TOut)) && ((s[K + 1] == int64_t(sizeof(TIn))) && ...)) {
        TOut* out = reinterpret_cast<TOut*>(p[0]);
        const std::tuple<const TIn*...> in{reinterpret_cast<const TIn*>(p[K + 1])...};
        const Fn local = fn;  // a local copy: its captures cannot alias out, so they stay in registers
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<TOut>(local(load_value(std::get<K>(in), i)...));
        return;
      }
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<TOut*>(p[0] + i * s[0]) =
            static_cast<TOut>(fn(*reinterpret_cast<const TIn*>(p[K + 1] + i * s[K + 1])...));
    });
  }(std::index_sequence_for<TIn...>{});
}

// kAnyDType: eq and ne, which take the storage-only dtypes too (the other comparisons are compiled for the compute
// dtypes only).
template <bool kAnyDType = false, typename Compare>
void compare_tensors(Task& task, Compare cmp) {
  visit_dtypes<kAnyDType>(task.inputs[0].dtype(), [&]<typename T>() {
    auto fn = [cmp](C<T> a, C<T> b) { return cmp(a, b); };
    binary_loop<decltype(fn), bool, T>(task, fn);
  });
}

template <bool kAnyDType = false, typename Compare>
void compare_scalar(Task& task, Compare cmp) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  visit_dtypes<kAnyDType>(task.inputs[0].dtype(), [&]<typename T>() {
    const C<T> v = s.to<C<T>>();
    auto fn = [cmp, v](C<T> a) { return cmp(a, v); };
    unary_loop<decltype(fn), bool, T>(task, fn);
  });
}

// nan-propagating bounds: a nan bound gives nan, like torch.clamp.
template <typename V>
V clamp_value(V x, V lo, V hi, bool has_lo, bool has_hi) {
  if constexpr (std::is_floating_point_v<V>) {
    if (has_lo) x = math::clamp_below_propagating(x, lo);
    if (has_hi) x = math::clamp_above_propagating(x, hi);
  } else {
    if (has_lo) x = x < lo ? lo : x;
    if (has_hi) x = x > hi ? hi : x;
  }
  return x;
}
}  // namespace

void eq_kernel(Task& task) { compare_tensors<true>(task, [](auto a, auto b) { return a == b; }); }
void ne_kernel(Task& task) { compare_tensors<true>(task, [](auto a, auto b) { return a != b; }); }
void lt_kernel(Task& task) { compare_tensors(task, [](auto a, auto b) { return a < b; }); }
void le_kernel(Task& task) { compare_tensors(task, [](auto a, auto b) { return a <= b; }); }
void gt_kernel(Task& task) { compare_tensors(task, [](auto a, auto b) { return a > b; }); }
void ge_kernel(Task& task) { compare_tensors(task, [](auto a, auto b) { return a >= b; }); }
void eq_scalar_kernel(Task& task) { compare_scalar<true>(task, [](auto a, auto b) { return a == b; }); }
void ne_scalar_kernel(Task& task) { compare_scalar<true>(task, [](auto a, auto b) { return a != b; }); }
void lt_scalar_kernel(Task& task) { compare_scalar(task, [](auto a, auto b) { return a < b; }); }
void le_scalar_kernel(Task& task) { compare_scalar(task, [](auto a, auto b) { return a <= b; }); }
void gt_scalar_kernel(Task& task) { compare_scalar(task, [](auto a, auto b) { return a > b; }); }
void ge_scalar_kernel(Task& task) { compare_scalar(task, [](auto a, auto b) { return a >= b; }); }

void logical_not_kernel(Task& task) {
  visit_dtype(task.inputs[0].dtype(), [&]<typename T>() {
    auto fn = [](C<T> a) { return !(a != C<T>(0)); };  // nan is true, so its negation is false
    unary_loop<decltype(fn), bool, T>(task, fn);
  });
}
void logical_and_kernel(Task& task) { map_elements<bool, bool, bool>(task, [](bool a, bool b) { return a && b; }); }
void logical_or_kernel(Task& task) { map_elements<bool, bool, bool>(task, [](bool a, bool b) { return a || b; }); }

// --- bitwise ops: integral and bool dtypes (the op refuses floating ones before a Task exists) ---
namespace {
template <typename T>
constexpr bool kBitwiseType = std::is_integral_v<T>;

// Shifts as torch defines them for any count: a count below 0 or at least the width gives 0 (left), or the sign
// (right: -1 for a negative value, else 0); bool operands shift as 0 / 1 integers.
template <typename T>
T left_shift(T a, T b) {
  constexpr int64_t bits = sizeof(T) * 8;
  if (static_cast<int64_t>(b) < 0 || static_cast<int64_t>(b) >= bits) return T(0);
  return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) << static_cast<int>(b));
}
template <typename T>
T right_shift(T a, T b) {
  constexpr int64_t bits = sizeof(T) * 8;
  if (static_cast<int64_t>(b) < 0 || static_cast<int64_t>(b) >= bits) return std::is_signed_v<T> && a < 0 ? T(-1) : T(0);
  return static_cast<T>(a >> static_cast<int>(b));
}

template <bool kAnyDType = false, typename Fn>
void bitwise_tensors(Task& task, Fn fn) {
  visit_dtypes<kAnyDType>(task.outputs[0].dtype(), [&]<typename T>() {
    if constexpr (kBitwiseType<T>) {
      if constexpr (std::is_same_v<T, bool>) map_elements<bool, bool, bool>(task, [fn](bool a, bool b) { return bool(fn(uint8_t(a), uint8_t(b)) & 1); });
      else map_elements<T, T, T>(task, [fn](T a, T b) { return fn(a, b); });
    }
  });
}
template <bool kAnyDType = false, typename Fn>
void bitwise_scalar(Task& task, Fn fn) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  visit_dtypes<kAnyDType>(task.outputs[0].dtype(), [&]<typename T>() {
    if constexpr (kBitwiseType<T>) {
      if constexpr (std::is_same_v<T, bool>) {
        const uint8_t v = s.to<bool>();
        map_elements<bool, bool>(task, [fn, v](bool a) { return bool(fn(uint8_t(a), v) & 1); });
      } else {
        const T v = s.to<T>();
        map_elements<T, T>(task, [fn, v](T a) { return fn(a, v); });
      }
    }
  });
}
constexpr auto kAnd = [](auto a, auto b) { return decltype(a)(a & b); };
constexpr auto kOr = [](auto a, auto b) { return decltype(a)(a | b); };
constexpr auto kXor = [](auto a, auto b) { return decltype(a)(a ^ b); };
constexpr auto kLeft = [](auto a, auto b) { return left_shift(a, b); };
constexpr auto kRight = [](auto a, auto b) { return right_shift(a, b); };
}  // namespace

void bitwise_and_kernel(Task& task) { bitwise_tensors<true>(task, kAnd); }
void bitwise_or_kernel(Task& task) { bitwise_tensors<true>(task, kOr); }
void bitwise_xor_kernel(Task& task) { bitwise_tensors<true>(task, kXor); }
void bitwise_left_shift_kernel(Task& task) { bitwise_tensors(task, kLeft); }
void bitwise_right_shift_kernel(Task& task) { bitwise_tensors(task, kRight); }
void bitwise_and_scalar_kernel(Task& task) { bitwise_scalar<true>(task, kAnd); }
void bitwise_or_scalar_kernel(Task& task) { bitwise_scalar<true>(task, kOr); }
void bitwise_xor_scalar_kernel(Task& task) { bitwise_scalar<true>(task, kXor); }
void bitwise_left_shift_scalar_kernel(Task& task) { bitwise_scalar(task, kLeft); }
void bitwise_right_shift_scalar_kernel(Task& task) { bitwise_scalar(task, kRight); }
void bitwise_not_kernel(Task& task) {
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) map_elements<bool, bool>(task, [](bool a) { return !a; });
    else if constexpr (kBitwiseType<T>) map_elements<T, T>(task, [](T a) { return T(~a); });
  });
}

void where_kernel(Task& task) {
  // Selection moves elements unchanged: a float8 runs as the uint8 of its bits (uint32 and uint64 as themselves).
  const DType t = task.outputs[0].dtype();
  visit_any_dtype(is_float8(t) ? DType::UInt8 : t, [&]<typename T>() {
    map_elements<T, bool, T, T>(task, [](bool c, T a, T b) { return c ? a : b; });
  });
}

void where_scalar_kernel(Task& task) {
  const WhereScalarAttrs& attrs = task.attrs.get<WhereScalarAttrs>();
  const Scalar value = attrs.value;
  const bool scalar_when_true = attrs.scalar_when_true;
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    const T s = value.to<T>();
    if (scalar_when_true) map_elements<T, bool, T>(task, [s](bool c, T a) { return c ? s : a; });
    else map_elements<T, bool, T>(task, [s](bool c, T a) { return c ? a : s; });
  });
}

void masked_fill_kernel(Task& task) {
  const Scalar value = task.attrs.get<ScalarAttrs>().value;
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    const T v = value.to<T>();
    map_elements<T, T, bool>(task, [v](T a, bool m) { return m ? v : a; });
  });
}

void clamp_scalar_kernel(Task& task) {
  const ClampAttrs& attrs = task.attrs.get<ClampAttrs>();
  const bool has_lo = attrs.has_min, has_hi = attrs.has_max;
  const Scalar lo_s = attrs.min, hi_s = attrs.max;
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    using V = C<T>;
    const V lo = lo_s.to<V>(), hi = hi_s.to<V>();
    if constexpr (std::is_floating_point_v<V>) {
      if ((has_lo && lo != lo) || (has_hi && hi != hi)) {  // a nan bound: nan everywhere, as torch.clamp
        auto nan = [](V) { return std::numeric_limits<V>::quiet_NaN(); };
        return unary_loop<decltype(nan), T, T>(task, nan);
      }
    }
    // One loop per set of bounds: the flags are then constants in each (a branch in the loop kept it scalar). With
    // bounds that are numbers, `lo > x ? lo : x` is one packed max (x86's max returns its second operand, x, when
    // either is nan: a nan x stays nan), where the general form's nan test on the bound made two blends.
    auto run = [&]<bool kLo, bool kHi>() {
      auto fn = [=](V x) {
        if constexpr (std::is_floating_point_v<V>) {
          if constexpr (kLo) x = math::clamp_below(x, lo);
          if constexpr (kHi) x = math::clamp_above(x, hi);
          return x;
        } else {
          return clamp_value(x, lo, hi, kLo, kHi);
        }
      };
      unary_loop<decltype(fn), T, T>(task, fn);
    };
    if (has_lo && has_hi) run.template operator()<true, true>();
    else if (has_lo) run.template operator()<true, false>();
    else if (has_hi) run.template operator()<false, true>();
    else run.template operator()<false, false>();
  });
}

void clamp_tensor_kernel(Task& task) {
  const ClampAttrs& attrs = task.attrs.get<ClampAttrs>();
  const int64_t bounds = (attrs.has_min ? 1 : 0) | (attrs.has_max ? 2 : 0);
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    using V = C<T>;
    if (bounds == 3) {
      map_elements<T, T, T, T>(task, [](T x, T lo, T hi) {
        return static_cast<T>(clamp_value<V>(static_cast<V>(x), static_cast<V>(lo), static_cast<V>(hi), true, true));
      });
    } else {
      const bool is_min = bounds == 1;
      map_elements<T, T, T>(task, [is_min](T x, T bound) {
        const V b = static_cast<V>(bound);
        return static_cast<T>(clamp_value<V>(static_cast<V>(x), b, b, is_min, !is_min));
      });
    }
  });
}


DG_REGISTER_KERNEL(eq, Device::Type::CPU, eq_kernel);
DG_REGISTER_KERNEL(ne, Device::Type::CPU, ne_kernel);
DG_REGISTER_KERNEL(lt, Device::Type::CPU, lt_kernel);
DG_REGISTER_KERNEL(le, Device::Type::CPU, le_kernel);
DG_REGISTER_KERNEL(gt, Device::Type::CPU, gt_kernel);
DG_REGISTER_KERNEL(ge, Device::Type::CPU, ge_kernel);
DG_REGISTER_KERNEL(eq_scalar, Device::Type::CPU, eq_scalar_kernel);
DG_REGISTER_KERNEL(ne_scalar, Device::Type::CPU, ne_scalar_kernel);
DG_REGISTER_KERNEL(lt_scalar, Device::Type::CPU, lt_scalar_kernel);
DG_REGISTER_KERNEL(le_scalar, Device::Type::CPU, le_scalar_kernel);
DG_REGISTER_KERNEL(gt_scalar, Device::Type::CPU, gt_scalar_kernel);
DG_REGISTER_KERNEL(ge_scalar, Device::Type::CPU, ge_scalar_kernel);
DG_REGISTER_KERNEL(logical_not, Device::Type::CPU, logical_not_kernel);
DG_REGISTER_KERNEL(logical_and, Device::Type::CPU, logical_and_kernel);
DG_REGISTER_KERNEL(bitwise_and, Device::Type::CPU, bitwise_and_kernel);
DG_REGISTER_KERNEL(bitwise_or, Device::Type::CPU, bitwise_or_kernel);
DG_REGISTER_KERNEL(bitwise_xor, Device::Type::CPU, bitwise_xor_kernel);
DG_REGISTER_KERNEL(bitwise_left_shift, Device::Type::CPU, bitwise_left_shift_kernel);
DG_REGISTER_KERNEL(bitwise_right_shift, Device::Type::CPU, bitwise_right_shift_kernel);
DG_REGISTER_KERNEL(bitwise_and_scalar, Device::Type::CPU, bitwise_and_scalar_kernel);
DG_REGISTER_KERNEL(bitwise_or_scalar, Device::Type::CPU, bitwise_or_scalar_kernel);
DG_REGISTER_KERNEL(bitwise_xor_scalar, Device::Type::CPU, bitwise_xor_scalar_kernel);
DG_REGISTER_KERNEL(bitwise_left_shift_scalar, Device::Type::CPU, bitwise_left_shift_scalar_kernel);
DG_REGISTER_KERNEL(bitwise_right_shift_scalar, Device::Type::CPU, bitwise_right_shift_scalar_kernel);
DG_REGISTER_KERNEL(bitwise_not, Device::Type::CPU, bitwise_not_kernel);
DG_REGISTER_KERNEL(logical_or, Device::Type::CPU, logical_or_kernel);
DG_REGISTER_KERNEL(where, Device::Type::CPU, where_kernel);
DG_REGISTER_KERNEL(where_scalar, Device::Type::CPU, where_scalar_kernel);
DG_REGISTER_KERNEL(masked_fill, Device::Type::CPU, masked_fill_kernel);
DG_REGISTER_KERNEL(clamp_scalar, Device::Type::CPU, clamp_scalar_kernel);
DG_REGISTER_KERNEL(clamp_tensor, Device::Type::CPU, clamp_tensor_kernel);

}  // namespace dg::cpu
