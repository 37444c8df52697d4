// Elementwise ops: arithmetic with broadcasting and PyTorch's type promotion, casts and copies.
// Python scalars are attributes (never tensors). In-place variants end in '_' and return their target.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

// Arithmetic. Mixed dtypes are promoted (torch.result_type); integer division gives float32.
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha * b
Tensor add(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a - alpha * b
Tensor sub(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor rsub(const Tensor& a, Scalar b);                          // b - a
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor rdiv(const Tensor& a, Scalar b);                          // b / a
Tensor neg(const Tensor& a);

// In place: the result is computed in a's dtype (the promoted type must cast to it, as in torch).
Tensor& add_(Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& add_(Tensor& a, Scalar b, Scalar alpha = 1);
Tensor& sub_(Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& sub_(Tensor& a, Scalar b, Scalar alpha = 1);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, Scalar b);
Tensor& div_(Tensor& a, const Tensor& b);
Tensor& div_(Tensor& a, Scalar b);

// out= forms: out must have the broadcast shape and a dtype the result casts to; no autograd (as torch).
Tensor& add_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& sub_out(Tensor& out, const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor& mul_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& div_out(Tensor& out, const Tensor& a, const Tensor& b);
Tensor& add_out(Tensor& out, const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor& sub_out(Tensor& out, const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor& mul_out(Tensor& out, const Tensor& a, Scalar b);
Tensor& div_out(Tensor& out, const Tensor& a, Scalar b);

// Casts and copies.
Tensor to(const Tensor& a, DType dtype, bool copy = false);  // no copy when the dtype already matches
Tensor clone(const Tensor& a);                               // a contiguous copy
Tensor contiguous(const Tensor& a);                          // a itself when already contiguous
Tensor& copy_(Tensor& dst, const Tensor& src);               // src broadcast to dst, cast to dst's dtype
Tensor& fill_(Tensor& dst, Scalar value);

// torch.result_type for the operands of a binary op.
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, Scalar b);
// Reduces a broadcast gradient back to `shape` (sums the broadcast dims).
Tensor sum_to(const Tensor& g, IntSpan shape);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
inline Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(Scalar a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(Scalar a, const Tensor& b) { return rdiv(b, a); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace dg
