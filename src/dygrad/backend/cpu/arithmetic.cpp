// CPU kernels: arithmetic, casts, copies and fills over strided, broadcast operands.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <cstring>

#include "dygrad/backend/cpu/elementwise_kernels.h"
#include "dygrad/math/arithmetic.h"

// The kernels of this file and their operands:
// inputs (a, b) same dtype as output; AddAttrs: out = a + alpha * b: out = a + alpha * b
//   void add_kernel(Task& task);
//   void mul_kernel(Task& task);
//   void div_kernel(Task& task);
// input (a); ScalarAttrs value = s
//   void add_scalar_kernel(Task& task);   // a + s
//   void mul_scalar_kernel(Task& task);   // a * s
//   void div_scalar_kernel(Task& task);   // a / s
//   void rsub_scalar_kernel(Task& task);  // s - a
//   void rdiv_scalar_kernel(Task& task);  // s / a
//   void neg_kernel(Task& task);
// input (src) of any dtype, output of any dtype and shape src broadcasts to: out = cast(src)
//   void copy_kernel(Task& task);
// no inputs; ScalarAttrs value
//   void fill_kernel(Task& task);

namespace dg::cpu {

namespace {
template <typename T>
using C = compute_t<T>;

// Binary kernels over the output's dtype T (the op layer has cast the inputs to it).
template <typename MakeFn>
void binary_same_type(Task& task, MakeFn make) {
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() { binary_loop<decltype(make.template operator()<T>()), T, T>(task, make.template operator()<T>()); });
}
template <typename MakeFn>
void unary_same_type(Task& task, MakeFn make) {
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() { unary_loop<decltype(make.template operator()<T>()), T, T>(task, make.template operator()<T>()); });
}
}  // namespace

void add_kernel(Task& task) {
  const Scalar alpha = task.attrs.get<AddAttrs>().alpha;
  if (alpha.to_double() == 1.0) {  // the common a + b: no multiply by one (the same values: alpha * y == y)
    binary_same_type(task, [&]<typename T>() { return [](C<T> x, C<T> y) { return math::add_scaled(x, y, C<T>(1)); }; });
    return;
  }
  binary_same_type(task, [&]<typename T>() {
    const C<T> al = alpha.to<C<T>>();
    return [al](C<T> x, C<T> y) { return math::add_scaled(x, y, al); };  // math/arithmetic.h
  });
}

void mul_kernel(Task& task) {
  binary_same_type(task, [&]<typename T>() {
    return [](C<T> x, C<T> y) { return math::mul(x, y); };
  });
}

void div_kernel(Task& task) {
  binary_same_type(task, [&]<typename T>() { return [](C<T> x, C<T> y) { return math::div(x, y); }; });
}

void add_scalar_kernel(Task& task) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  unary_same_type(task, [&]<typename T>() { const C<T> v = s.to<C<T>>(); return [v](C<T> x) { return x + v; }; });
}
void mul_scalar_kernel(Task& task) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  unary_same_type(task, [&]<typename T>() { const C<T> v = s.to<C<T>>(); return [v](C<T> x) { return x * v; }; });
}
void div_scalar_kernel(Task& task) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  unary_same_type(task, [&]<typename T>() { const C<T> v = s.to<C<T>>(); return [v](C<T> x) { return x / v; }; });
}
void rsub_scalar_kernel(Task& task) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  unary_same_type(task, [&]<typename T>() { const C<T> v = s.to<C<T>>(); return [v](C<T> x) { return math::rsub(x, v); }; });
}
void rdiv_scalar_kernel(Task& task) {
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  unary_same_type(task, [&]<typename T>() { const C<T> v = s.to<C<T>>(); return [v](C<T> x) { return v / x; }; });
}
void neg_kernel(Task& task) {
  unary_same_type(task, [&]<typename T>() { return [](C<T> x) { return math::neg(x); }; });
}

namespace {
// One element's conversion, as torch's on x86-64 (c10's static_cast_with_inter_type and the code the compiler makes of
// it): a floating value reaches int8/int16 through int32 (70000.0 -> int16 4464), uint8 through int64 (2**32 + 5
// -> 5), uint32 through int32 below 2**31 and int32 of x - 2**31 above, uint64 the same with int64 and 2**63. Values
// out of the route's range (and NaN) are undefined in torch, whose results differ between its vector and scalar
// loops; these routes give what x86's truncating conversions give in torch's vector loop. The other targets (bool,
// uint16, int32, int64, floating) keep a plain static_cast.
template <typename TOut, typename V>
C<TOut> convert(V x) {
  if constexpr (std::is_same_v<TOut, bool>) return x != V(0);
  else if constexpr (!std::is_floating_point_v<V>) return static_cast<C<TOut>>(x);
  else if constexpr (std::is_same_v<TOut, int8_t> || std::is_same_v<TOut, int16_t>)
    return static_cast<TOut>(static_cast<int32_t>(x));
  else if constexpr (std::is_same_v<TOut, uint8_t>) return static_cast<uint8_t>(static_cast<int64_t>(x));
  else if constexpr (std::is_same_v<TOut, uint32_t>)
    return x < V(0x1p31) ? static_cast<uint32_t>(static_cast<int32_t>(x))
                         : static_cast<uint32_t>(static_cast<int32_t>(x - V(0x1p31))) ^ (uint32_t{1} << 31);
  else if constexpr (std::is_same_v<TOut, uint64_t>)
    return x >= V(0x1p63) ? static_cast<uint64_t>(static_cast<int64_t>(x - V(0x1p63))) ^ (uint64_t{1} << 63)
                          : static_cast<uint64_t>(static_cast<int64_t>(x));
  else return static_cast<C<TOut>>(x);
}

// Conversions that involve a storage-only dtype (uint32, uint64, float8) go through a pivot, so that the vectorised
// loops above stay instantiated for the 11 x 11 compute dtypes only (docs/dtypes.md, "Storage-only dtypes"): each
// element is widened to its source's pivot (double for a floating source, which holds every float of it exactly;
// uint64 for an unsigned one; int64 otherwise, bool included) and convert<TOut> takes it from there, which gives the
// bits of the direct conversion. 15 loaders and 15 x 3 storers, scalar loops over chunks; one thread (these
// conversions are rare: a checkpoint's float8 weights widened once).
//   in: any dtype, out: any dtype, either storage-only; out = convert<TOut>(pivot(in)), elementwise over strides
template <typename T>
using pivot_t = std::conditional_t<!std::is_arithmetic_v<T> || std::is_floating_point_v<T>, double,
                                   std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>, uint64_t,
                                                      int64_t>>;

template <typename TIn>
void load_pivot(pivot_t<TIn>* to, const char* from, int64_t stride_bytes, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    to[i] = static_cast<pivot_t<TIn>>(static_cast<C<TIn>>(*reinterpret_cast<const TIn*>(from + i * stride_bytes)));
}
template <typename TOut, typename P>
void store_pivot(char* to, int64_t stride_bytes, const P* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) *reinterpret_cast<TOut*>(to + i * stride_bytes) = static_cast<TOut>(convert<TOut>(from[i]));
}

// complex64 <-> complex128 (or a strided copy of one complex dtype): both parts, element by element. A real pivot
// would keep the real part only (what a complex-to-real conversion does).
//   in: complex [N...], out: complex [N...] (in broadcast to it); out = (R_out(in.re), R_out(in.im))
void copy_complex(const Tensor& out, const Tensor& in) {
  const Tensor operands[2] = {out, in};
  StridedIteration it(operands);
  visit_any_dtype(in.dtype(), [&]<typename TIn>() {
    visit_any_dtype(out.dtype(), [&]<typename TOut>() {
      if constexpr (kIsComplex<TIn> && kIsComplex<TOut>) {
        using R = decltype(TOut::re);
        for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            const TIn x = *reinterpret_cast<const TIn*>(p[1] + i * s[1]);
            *reinterpret_cast<TOut*>(p[0] + i * s[0]) = TOut(static_cast<R>(x.re), static_cast<R>(x.im));
          }
        });
      }
    });
  });
}

void copy_through_pivot(const Tensor& out, const Tensor& in) {
  if (is_complex(out.dtype()) && is_complex(in.dtype())) return copy_complex(out, in);
  const Tensor operands[2] = {out, in};
  StridedIteration it(operands);
  visit_any_dtype(in.dtype(), [&]<typename TIn>() {
    using P = pivot_t<TIn>;
    const auto store = visit_any_dtype(out.dtype(), [&]<typename TOut>() { return &store_pivot<TOut, P>; });
    for_each_element(it, [&](char** p, const int64_t* s, int64_t n) {
      constexpr int64_t kChunk = 256;
      P pivot[kChunk];
      for (int64_t b = 0; b < n; b += kChunk) {
        const int64_t m = std::min(kChunk, n - b);
        load_pivot<TIn>(pivot, p[1] + b * s[1], s[1], m);
        store(p[0] + b * s[0], s[0], pivot, m);
      }
    });
  });
}
}  // namespace

void copy_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const Tensor& in = task.inputs[0];
  // Same dtype and both contiguous with the same shape: a memcpy, split over the pool.
  if (out.dtype() == in.dtype() && out.is_contiguous() && in.is_contiguous() && out.numel() == in.numel()) {
    char* dst = static_cast<char*>(out.raw_data());
    const char* src = static_cast<const char*>(in.raw_data());
    const int64_t bytes = out.numel() * static_cast<int64_t>(out.itemsize());
    parallel_for(0, bytes, int64_t{1} << 18, [&](int64_t b, int64_t e) { std::memcpy(dst + b, src + b, static_cast<size_t>(e - b)); });
    return;
  }
  // Same dtype, and rows of at least 256 contiguous bytes on both sides once the dims are coalesced (a slice
  // of the last dim, v out of a QKV projection, a transpose of outer dims): one memcpy per row, rows split over
  // the pool: 0.42-0.60x the element loop's time on [2048, 384] float32 rows 1152 apart (bench/rowwise.py, loaded
  // machine; docs/recompute.md).
  if (out.dtype() == in.dtype()) {
    const Tensor operands[2] = {out, in};
    const StridedIteration it(operands);
    const int64_t row_bytes = it.shape.size() == 2 ? it.shape[1] * it.itemsize[0] : 0;
    if (row_bytes >= 256 && it.strides[0][1] == 1 && it.strides[1][1] == 1) {
      char* dst = it.base[0];
      const char* src = it.base[1];
      const int64_t dst_step = it.strides[0][0] * it.itemsize[0], src_step = it.strides[1][0] * it.itemsize[1];
      parallel_for(0, it.shape[0], std::max<int64_t>(1, (int64_t{1} << 17) / row_bytes), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) std::memcpy(dst + r * dst_step, src + r * src_step, static_cast<size_t>(row_bytes));
      });
      return;
    }
  }
  if (is_storage_only(out.dtype()) || is_storage_only(in.dtype())) [[unlikely]] return copy_through_pivot(out, in);
  visit_dtype(out.dtype(), [&]<typename TOut>() {
    visit_dtype(in.dtype(), [&]<typename TIn>() {
      auto cast = [](C<TIn> x) { return convert<TOut>(x); };
      unary_loop<decltype(cast), TOut, TIn>(task, cast);
    });
  });
}

void fill_kernel(Task& task) {
  const Tensor& out = task.outputs[0];
  const Scalar s = task.attrs.get<ScalarAttrs>().value;
  visit_any_dtype(out.dtype(), [&]<typename T>() {
    const T v = s.to<T>();
    const Tensor operands[1] = {out};
    StridedIteration it(operands);
    for_each_element(it, [&](char** p, const int64_t* st, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const int64_t step = st[0] / static_cast<int64_t>(sizeof(T));
      if (step == 1) std::fill(o, o + n, v);
      else for (int64_t i = 0; i < n; ++i) o[i * step] = v;
    });
  });
}


DG_REGISTER_KERNEL(add, Device::Type::CPU, add_kernel);
DG_REGISTER_KERNEL(mul, Device::Type::CPU, mul_kernel);
DG_REGISTER_KERNEL(div, Device::Type::CPU, div_kernel);
DG_REGISTER_KERNEL(add_scalar, Device::Type::CPU, add_scalar_kernel);
DG_REGISTER_KERNEL(mul_scalar, Device::Type::CPU, mul_scalar_kernel);
DG_REGISTER_KERNEL(div_scalar, Device::Type::CPU, div_scalar_kernel);
DG_REGISTER_KERNEL(rsub_scalar, Device::Type::CPU, rsub_scalar_kernel);
DG_REGISTER_KERNEL(rdiv_scalar, Device::Type::CPU, rdiv_scalar_kernel);
DG_REGISTER_KERNEL(neg, Device::Type::CPU, neg_kernel);
DG_REGISTER_KERNEL(copy, Device::Type::CPU, copy_kernel);
DG_REGISTER_KERNEL(fill, Device::Type::CPU, fill_kernel);

}  // namespace dg::cpu
