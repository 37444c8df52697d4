// Elementwise math beyond arithmetic: unary functions and activations, pow, maximum/minimum,
// comparisons and logical ops, where, masked_fill and clamp. PyTorch semantics: integer inputs to
// floating functions give float32, mixed operands promote (torch.result_type), comparisons give bool,
// nan propagates. In-place variants end in '_' and return their target.
#pragma once
#include <optional>
#include <string_view>

#include "dygrad/core/tensor.h"

namespace dg {

// Unary functions (integers promote to float32; abs and relu keep the dtype).
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor expm1(const Tensor& a);  // exp(a) - 1, accurate near 0
Tensor log1p(const Tensor& a);  // log(1 + a), accurate near 0
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);  // 1 / sqrt(a)
Tensor abs(const Tensor& a);
// torch.floor / ceil / trunc (integer dtypes kept, bool refused), sign (any dtype), reciprocal (integers become
// float32), isnan / isinf / isfinite (bool results).
Tensor floor(const Tensor& a);
// torch.round: half to even; with decimals d, round(x * 10^d) / 10^d (d < 0: round(x / 10^-d) * 10^-d),
// computed in float32 for 16-bit floats and rounded once, as torch's kernel. Integers are unchanged (decimals
// must then be 0: torch has no integer kernel for it); bool is refused.
Tensor round(const Tensor& a, int64_t decimals = 0);
Tensor ceil(const Tensor& a);
Tensor trunc(const Tensor& a);
Tensor sign(const Tensor& a);
Tensor reciprocal(const Tensor& a);
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);
Tensor isfinite(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor silu(const Tensor& a);  // a * sigmoid(a)
// torch.nn.functional.gelu: approximate "none" (a * Phi(a), the erf form) or "tanh".
Tensor gelu(const Tensor& a, std::string_view approximate = "none");
Tensor relu(const Tensor& a);

// torch.pow: tensor ^ tensor (broadcast), tensor ^ scalar, scalar ^ tensor. Integer tensors to negative
// integer scalar powers are an error, as in torch.
Tensor pow(const Tensor& base, const Tensor& exponent);
Tensor pow(const Tensor& base, Scalar exponent);
Tensor pow(Scalar base, const Tensor& exponent);

// Elementwise max / min with broadcasting and promotion; nan in either operand gives nan.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor logaddexp(const Tensor& a, const Tensor& b);  // log(exp(a) + exp(b)), floating dtypes
// ops/binary_math.cpp. atan2(y, x): the angle of the point (x, y); integers become float32.
Tensor atan2(const Tensor& y, const Tensor& x);
Tensor& atan2_(Tensor& y, const Tensor& x);
// fmod: C's remainder, the sign of a; remainder: Python's `%`, the sign of b. Integer or floating, not bool; an
// integer division by zero raises (in the kernel: RuntimeError "ZeroDivisionError", as torch).
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, Scalar b);
Tensor& fmod_(Tensor& a, const Tensor& b);
Tensor& fmod_(Tensor& a, Scalar b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, Scalar b);
Tensor remainder(Scalar a, const Tensor& b);
Tensor& remainder_(Tensor& a, const Tensor& b);
Tensor& remainder_(Tensor& a, Scalar b);
Tensor minimum(const Tensor& a, const Tensor& b);
// torch.lerp: self + weight * (end - self), weight a tensor (broadcast) or a number; floating dtypes.
Tensor lerp(const Tensor& self, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& self, const Tensor& end, Scalar weight);
Tensor& lerp_(Tensor& self, const Tensor& end, const Tensor& weight);
Tensor& lerp_(Tensor& self, const Tensor& end, Scalar weight);

// Comparisons: operands promote to their common dtype, the result is bool.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);
// Logical ops on any dtype (nonzero is true); the result is bool.
// torch.isclose: a == b, or |a - b| <= atol + |rtol * b| (finite), or both nan with equal_nan; broadcast, a bool
// result. allclose: isclose everywhere, read on the host (a sync).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-05, double atol = 1e-08, bool equal_nan = false);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-05, double atol = 1e-08, bool equal_nan = false);
// torch.equal: the same shape and every element equal (compared after type promotion; nan equals nothing), read on
// the host (a sync).
bool equal(const Tensor& a, const Tensor& b);

Tensor logical_not(const Tensor& a);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

// Bitwise ops on integral and bool tensors, broadcast, torch's promotion (a floating result raises
// NotImplemented, and the shifts refuse bool). Shifting by a count below 0 or at least the width gives 0 (left)
// or the sign (right), as torch.
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_left_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_right_shift(const Tensor& a, const Tensor& b);
Tensor bitwise_and(const Tensor& a, Scalar b);
Tensor bitwise_or(const Tensor& a, Scalar b);
Tensor bitwise_xor(const Tensor& a, Scalar b);
Tensor bitwise_left_shift(const Tensor& a, Scalar b);
Tensor bitwise_right_shift(const Tensor& a, Scalar b);
Tensor& bitwise_and_(Tensor& a, const Tensor& b);
Tensor& bitwise_or_(Tensor& a, const Tensor& b);
Tensor& bitwise_xor_(Tensor& a, const Tensor& b);
Tensor& bitwise_left_shift_(Tensor& a, const Tensor& b);
Tensor& bitwise_right_shift_(Tensor& a, const Tensor& b);
Tensor& bitwise_and_(Tensor& a, Scalar b);
Tensor& bitwise_or_(Tensor& a, Scalar b);
Tensor& bitwise_xor_(Tensor& a, Scalar b);
Tensor& bitwise_left_shift_(Tensor& a, Scalar b);
Tensor& bitwise_right_shift_(Tensor& a, Scalar b);
Tensor bitwise_not(const Tensor& a);
Tensor& bitwise_not_(Tensor& a);

// cond ? a : b, all three broadcast; a and b promote. Gradients flow to a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
// a with `value` (cast to a's dtype) where mask is true. The out-of-place form broadcasts a and mask;
// the in-place form needs mask to broadcast to a's shape.
Tensor masked_fill(const Tensor& a, const Tensor& mask, Scalar value);
Tensor& masked_fill_(Tensor& a, const Tensor& mask, Scalar value);

// min(max(a, min), max); either bound may be absent (not both). Scalar bounds promote like torch.clamp;
// tensor bounds broadcast, and an undefined Tensor() is an absent bound. The gradient passes where
// min <= a <= max.
Tensor clamp(const Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp(const Tensor& a, const Tensor& min, const Tensor& max);
Tensor& clamp_(Tensor& a, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor& clamp_(Tensor& a, const Tensor& min, const Tensor& max);

// In place (a must be floating for exp_).
Tensor& exp_(Tensor& a);
Tensor& relu_(Tensor& a);
Tensor& floor_(Tensor& a);
Tensor& round_(Tensor& a, int64_t decimals = 0);
Tensor& ceil_(Tensor& a);
Tensor& trunc_(Tensor& a);
Tensor& sign_(Tensor& a);
Tensor& reciprocal_(Tensor& a);

namespace detail {
// In-place writes need every element of `t` at its own address: raises for expanded (stride 0) tensors,
// as torch does ("more than one element of the written-to tensor refers to a single memory location").
void check_no_internal_overlap(const char* op, const Tensor& t);
}  // namespace detail

}  // namespace dg
