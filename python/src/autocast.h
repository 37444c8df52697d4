// Autocast (torch.autocast on the CPU): a thread-local state the bindings consult at the op call. Each binding
// of an op in one of torch 2.13's CPU autocast lists casts its floating operands before calling the C++ op:
//   lower  (matmul, mm, bmm, linear, addmm, baddbmm, addbmm, einsum, scaled_dot_product_attention): float32 and
//          float16 operands to the autocast dtype (bfloat16 by default);
//   fp32   (cross_entropy, nll_loss, mse_loss, l1_loss, binary_cross_entropy_with_logits, ...): 16-bit operands
//          to float32;
//   promote (cat, stack): every floating operand to the widest floating dtype among them and the autocast dtype.
// float64 is never cast, as in torch. Every other op follows its inputs. Backward formulas call C++ ops directly,
// never a binding, so the backward pass is never autocast (torch: the same). docs/mixed-precision.md.
//
// The cast cache: a float32 leaf that requires grad and is not a view (a parameter) cast to the lower dtype is
// cast once per autocast region and reused (cache_enabled); the cache is cleared when the outermost region exits
// (dygrad._C._autocast_decrement_nesting returns 0) or by clear_autocast_cache(). Besides, the last cast of any
// other operand is kept (one entry), so an activation read by two lower-precision ops in a row is cast once.
#pragma once
#include <span>
#include <vector>

#include "dygrad/dygrad.h"

namespace dg::py::autocast {

struct State {
  bool enabled = false;
  bool cache_enabled = true;
  DType dtype = DType::BFloat16;
  int nesting = 0;
};
extern thread_local State state;

inline bool on() { return state.enabled; }
// The operand cast for a `lower` op (an undefined tensor stays undefined).
Tensor lower(const Tensor& t);
// The operand cast for an `fp32` op.
Tensor fp32(const Tensor& t);
// The operands of a `promote` op cast to their widest floating dtype (at least the autocast dtype).
std::vector<Tensor> promote(std::span<const Tensor> tensors);
void clear_cache();
size_t cache_size();

}  // namespace dg::py::autocast
