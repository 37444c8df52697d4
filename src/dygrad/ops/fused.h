// Fused LLM ops: each is one CPU kernel forward and one backward, instead of the chain of small ops a
// model would otherwise issue. Results match the composed formulas (tests/cpp/test_fused.cpp) and do not
// depend on the thread count.
#pragma once
#include <utility>
#include <optional>
#include <span>

#include "dygrad/core/tensor.h"

namespace dg {

// RMSNorm over the last dim: x * rsqrt(mean(x^2, -1) + eps) * weight. x [..., C]; weight [C] or undefined
// (no scale). Floating dtypes (16-bit floats compute in float32). Saves x and one rstd per row.
Tensor rms_norm(const Tensor& x, const Tensor& weight = Tensor(), double eps = 1e-5);

// Rotary position embedding. Layout contract: x is 4-D, [B, H, T, D] (RopeLayout::BHTD, the default, as
// after the head permute) or [B, T, H, D] (RopeLayout::BTHD, straight from the QKV projection), any
// strides; cos and sin are [T, D/2] (position t, pair p: the angle's cosine and sine), D even. The output
// has x's shape, contiguous. Modes: Interleaved rotates pairs (2p, 2p+1), as shared/bench/torch_ref.py;
// RotateHalf rotates pairs (p, p + D/2), the HF LLaMA layout. cos and sin are constants (no gradient).
enum class RopeMode : uint8_t { Interleaved, RotateHalf };
enum class RopeLayout : uint8_t { BHTD, BTHD };
Tensor rotary_position_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                 RopeMode mode = RopeMode::Interleaved, RopeLayout layout = RopeLayout::BHTD);

// SwiGLU: silu(gate) * up for two tensors of one shape (any strides), or for one tensor [..., 2F] whose
// last dim holds gate then up (the output is [..., F]).
Tensor swiglu(const Tensor& gate, const Tensor& up);
Tensor swiglu(const Tensor& x);

// torch.nn.functional.scaled_dot_product_attention: softmax(query key^T * scale + mask) value.
// query [..., T, D], key [..., S, D], value [..., S, Dv] with the same leading dims, any strides.
// attn_mask: undefined, bool (true = attend) or additive in the query's dtype, broadcastable to
// [..., T, S]; it gets no gradient. is_causal: query i attends keys j <= i (top-left aligned, as torch);
// not combined with attn_mask. scale: 1/sqrt(D) by default. Flash-style: output and log-sum-exp saved only.
// Floating dtypes (16-bit floats compute in float32). A row that attends to no key gives zeros (torch's
// math path gives NaN). dropout_p > 0 takes torch's math path instead (composed ops: softmax, a dropout
// mask, matmul; a fully masked row gives NaN there). enable_gqa: key/value heads (dim -3) are repeated to
// the query's, each G = H / Hkv times in a row. 4-D outputs are stored [B, T, H, Dv] and
// returned as the [B, H, T, Dv] view, so out.transpose(1, 2).reshape(B, T, H * Dv) is free (as in torch).
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, bool enable_gqa = false);

// The scratch the CPU kernels of scaled_dot_product_attention (forward) and its backward declare for `batch`
// batch-heads of q [T, D], k [S, D], v [S, Dv] (rotary: rotary_attention's): what the JIT's attention pattern
// declares for the op it puts in a graph.
size_t attention_scratch_of(int64_t batch, int64_t T, int64_t S, int64_t D, int64_t Dv, DType dtype, bool forward,
                            bool rotary);

// The attention of a LLaMA block from its fused QKV projection, in one op: qkv [B, T, 3 H D] (any strides) holds
// q, k and v (its thirds; head h at columns h D..); q and k are rotated as rotary_position_embedding(., cos, sin,
// mode) does with [B, H, T, D] views ([T, D/2] tables), then scaled_dot_product_attention(q, k, v, is_causal,
// scale). Returns [B, T, H D] (out.transpose(1, 2).reshape(B, T, H D) of sdpa), contiguous. Equal to those three
// ops up to rounding (the rotation is applied as q and k are packed, never stored); saves only qkv, out and the
// log-sum-exp, and its backward writes the gradient of qkv whole: no rotated q/k, no copy of v, no join of the
// three gradients.
Tensor rotary_attention(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t heads,
                        RopeMode mode = RopeMode::Interleaved, bool is_causal = false,
                        std::optional<double> scale = std::nullopt);

// One AdamW (or Adam) step over lists of tensors, in place, as torch.optim.AdamW / Adam (amsgrad=False,
// maximize=False, single-tensor path):
//   AdamW: p *= 1 - lr wd;           Adam: g = g + wd p;
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
// `state_steps` holds one 0-d float32 tensor per param (torch's state["step"]); the Task adds 1 to each
// before the update, so a step count never leaves the stream and a state dict is torch's. Params must be
// leaves; each param, grad, exp_avg and exp_avg_sq share shape and dtype, params and states are contiguous.
// One Task for all.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool decoupled_weight_decay = true;  // false: Adam's L2 penalty added to the gradient
};
// model_params (optional): master weights. params and states are float32 masters, each grad float32 or its model
// param's dtype; after the update the kernel writes each master, rounded once, into its bfloat16 / float16 model
// param (docs/mixed-precision.md).
void adamw_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> exp_avgs,
                std::span<Tensor> exp_avg_sqs, std::span<Tensor> state_steps, const AdamWOptions& options = {},
                std::span<Tensor> model_params = {});
// The same with the hyper-parameters as tensors the Task reads when it runs (an optimizer's per-group values,
// rewritten on the stream when a scheduler assigns them): `lr` 0-d floating, `hyper` float64 [4] = {beta1, beta2,
// eps, weight_decay}, both on the params' device. Nothing about their values is checked here (the optimizer checks
// them when they are set, as torch's constructors do).
void adamw_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> exp_avgs,
                std::span<Tensor> exp_avg_sqs, std::span<Tensor> state_steps, const Tensor& lr, const Tensor& hyper,
                bool decoupled_weight_decay, std::span<Tensor> model_params = {});
// AdamWOptions as the two tensors (lr float64), on the params' `device`.
std::pair<Tensor, Tensor> adamw_hyper_tensors(const AdamWOptions& options, Device device = Device::cpu());

// One SGD step over lists of tensors, in place, as torch.optim.SGD (single-tensor path, each op rounded to the
// param's dtype as torch's in-place chain):
//   g = maximize ? -grad : grad;  g = g + wd p (wd != 0);
//   momentum: buf = buf * momentum + (1 - dampening) g, or buf = g while its `momentum_initialized` is false
//   (torch's first step, `buf = g.clone()`; the Task then sets it true); g = nesterov ? g + momentum buf : buf;
//   p = p - lr g.
// Without momentum, `momentum_buffers` and `momentum_initialized` are empty. Each param, grad and buffer share shape
// and dtype; params and buffers are contiguous leaves; `momentum_initialized` holds one 0-d bool tensor per buffer.
// One Task for all.
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
};
void sgd_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> momentum_buffers,
              std::span<Tensor> momentum_initialized, const SgdOptions& options = {});
// The same with the hyper-parameters as tensors the Task reads when it runs (an optimizer's per-group values,
// rewritten on the stream when a scheduler assigns them): `lr` 0-d floating, `hyper` float64 [3] = {momentum,
// dampening, weight_decay}, both on the params' device. Their values are not checked here (the optimizer checks them
// when they are set, as torch's constructor does); the formula (momentum or not, nesterov, maximize) is fixed per Task.
void sgd_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> momentum_buffers,
              std::span<Tensor> momentum_initialized, const Tensor& lr, const Tensor& hyper, bool nesterov,
              bool maximize);
// SgdOptions as the two tensors (lr float64), on the params' `device`.
std::pair<Tensor, Tensor> sgd_hyper_tensors(const SgdOptions& options, Device device = Device::cpu());

}  // namespace dg
