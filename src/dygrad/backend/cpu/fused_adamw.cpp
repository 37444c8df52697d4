// AdamW over many tensors in one Task (multi-tensor apply): every tensor is cut into fixed pieces and the
// pieces of all tensors are spread over the pool. The update is torch.optim.AdamW's (single-tensor path),
// and torch.optim.Adam's, operation for operation, with the scalars computed in double as Python does:
//   t += 1 (each param's own 0-d float32 count, as torch's state["step"]);
//   AdamW: p *= 1 - lr wd;  Adam: g = g + wd p;
//   m = lerp(m, g, 1 - b1);  v = v b2 + (1 - b2) g g;
//   denom = sqrt(v) / sqrt(1 - b2^t) + eps;  p += -(lr / (1 - b1^t)) * m / denom.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <bit>
#include <cmath>
#include <vector>

#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"
#include "dygrad/math/arithmetic.h"

// The kernels of this file and their operands:
// outputs (param_0 .. param_{P-1}, exp_avg_0 .., exp_avg_sq_0 .., step_0 .. step_{P-1}), all contiguous, updated
// in place (step_i: a 0-d float32 count, incremented before the update), and inputs (the same 4P tensors, then
// grad_0 .. grad_{P-1}, then lr, a 0-d floating tensor, and {beta1, beta2, eps, weight_decay}, a float64 [4]
// tensor, read when the Task runs): an in-place op lists what it updates as inputs too (alias_each_output).
// AdamWAttrs: whether the decay is decoupled (AdamW) or an L2 term added to the gradient (Adam).
// Master weights (ops/fused.h): the params and states are float32 masters, the grads float32 or 16-bit, and 4P
// more outputs (and inputs) follow the steps: the bfloat16 / float16 model params, written with the updated
// master rounded once.

namespace dg::cpu {

namespace {
constexpr int64_t kPiece = kAdamWPiece;  // elements per unit of work (runtime/scratch.h)

struct Piece {
  int64_t tensor, begin, end;
};

struct Scalars {
  double decay, l2, weight, beta2, one_minus_beta2, eps, bias2, neg_step;
};

// Elements [begin, end) of one tensor: master p, states m, v in T, gradient g in G, and (L not void) the copy of the
// updated p rounded once into low.
template <typename T, typename G, typename L>
void update(const Scalars& k, const G* g, T* p, T* m, T* v, [[maybe_unused]] L* low, int64_t begin, int64_t end) {
  using C = compute_t<T>;
  const C c_decay = static_cast<C>(k.decay), weight = static_cast<C>(k.weight), c_beta2 = static_cast<C>(k.beta2);
  const C one_minus_beta2 = static_cast<C>(k.one_minus_beta2), c_eps = static_cast<C>(k.eps);
  const C c_bias2 = static_cast<C>(k.bias2), neg_step = static_cast<C>(k.neg_step), c_l2 = static_cast<C>(k.l2);
  // Each torch op stores its result in T before the next reads it: round the same way (a no-op for float32 and
  // float64).
  auto stored = [](C x) { return static_cast<C>(static_cast<T>(x)); };
  for (int64_t i = begin; i < end; ++i) {
    const C p0 = static_cast<C>(p[i]);
    const C g0 = static_cast<C>(g[i]);
    const C gi = k.l2 != 0.0 ? stored(g0 + c_l2 * p0) : g0;  // grad.add(p, alpha=wd)
    const C pi = k.decay != 1.0 ? stored(p0 * c_decay) : p0;  // p.mul_(1 - lr wd)
    const C m0 = static_cast<C>(m[i]);
    const C mi = stored(math::lerp(m0, gi, weight));  // lerp_ (math/arithmetic.h: torch's two formulas)
    const C vi = stored(stored(static_cast<C>(v[i]) * c_beta2) + one_minus_beta2 * gi * gi);  // mul_, addcmul_
    const C denom = stored(stored(stored(std::sqrt(vi)) / c_bias2) + c_eps);  // sqrt, div_, add_
    const T pn = static_cast<T>(pi + neg_step * mi / denom);
    p[i] = pn;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    if constexpr (!std::is_void_v<L>) low[i] = L(static_cast<float>(pn));
  }
}
}  // namespace

void adamw_kernel(Task& task) {
  // P tensors: the inputs are the outputs, P gradients, lr and the other hyper-parameters; outputs are 4P, or 5P
  // with master weights' copies.
  const int64_t count = static_cast<int64_t>(task.inputs.size() - task.outputs.size() - 2);
  const size_t first_grad = task.outputs.size();
  const bool copies = task.outputs.size() == 5 * static_cast<size_t>(count);
  const AdamWAttrs& attrs = task.attrs.get<AdamWAttrs>();
  const Tensor& lr_tensor = task.inputs[task.inputs.size() - 2];
  const double lr = visit_floating(lr_tensor.dtype(), [&]<typename T>() {  // as torch's lr.item(): exact in double
    return static_cast<double>(static_cast<compute_t<T>>(*lr_tensor.data<T>()));
  });
  const double* hyper = task.inputs.back().data<double>();
  const double beta1 = hyper[0], beta2 = hyper[1], eps = hyper[2], weight_decay = hyper[3];
  // torch computes with a Tensor lr as 0-d tensor ops in its dtype: `1 - lr * wd` and `lr / bias_correction1` round
  // to float32 for a float32 lr (each step exact in double, then rounded once: the float32 result).
  const bool lr32 = lr_tensor.dtype() == DType::Float32;
  auto in_lr_dtype = [lr32](double x) { return lr32 ? static_cast<double>(static_cast<float>(x)) : x; };
  const double decay = attrs.decoupled ? in_lr_dtype(1.0 - in_lr_dtype(lr * in_lr_dtype(weight_decay))) : 1.0;
  const double l2 = attrs.decoupled ? 0.0 : weight_decay;
  // Per tensor: bump its step count (torch's step_t += 1), then its bias corrections from the new count.
  ScratchArena& scratch = task_scratch(task);
  double* step_sizes = scratch.take<double>(count);
  double* bias2_sqrts = scratch.take<double>(count);
  for (int64_t t = 0; t < count; ++t) {
    float* step_count = task.outputs[static_cast<size_t>(3 * count + t)].data<float>();
    *step_count += 1.0f;
    const double step = static_cast<double>(*step_count);
    step_sizes[t] = in_lr_dtype(lr / in_lr_dtype(1.0 - std::pow(beta1, step)));
    bias2_sqrts[t] = std::sqrt(1.0 - std::pow(beta2, step));
  }
  int64_t num_pieces = 0;
  for (int64_t t = 0; t < count; ++t) num_pieces += (task.outputs[static_cast<size_t>(t)].numel() + kPiece - 1) / kPiece;
  Piece* pieces = scratch.take<Piece>(num_pieces);
  int64_t made = 0;
  for (int64_t t = 0; t < count; ++t)
    for (int64_t b = 0, n = task.outputs[static_cast<size_t>(t)].numel(); b < n; b += kPiece)
      pieces[made++] = {t, b, std::min(n, b + kPiece)};
  parallel_for(0, num_pieces, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const Piece& piece = pieces[k];
      const size_t t = static_cast<size_t>(piece.tensor);
      const Scalars sc{decay, l2, 1.0 - beta1, beta2, 1.0 - beta2, eps, bias2_sqrts[t], -step_sizes[t]};
      const Tensor& grad = task.inputs[first_grad + t];
      const Tensor& param = task.outputs[t];
      const Tensor& m = task.outputs[static_cast<size_t>(count) + t];
      const Tensor& v = task.outputs[2 * static_cast<size_t>(count) + t];
      if (!copies && grad.dtype() == param.dtype()) {
        visit_floating(param.dtype(), [&]<typename T>() {
          update<T, T, void>(sc, grad.data<T>(), param.data<T>(), m.data<T>(), v.data<T>(), nullptr, piece.begin,
                             piece.end);
        });
        continue;
      }
      // Master weights (ops/fused.cpp checked): float32 master and states, a float32 or 16-bit gradient, a 16-bit copy.
      const Tensor* low = copies ? &task.outputs[4 * static_cast<size_t>(count) + t] : nullptr;
      float* p = param.data<float>();
      float* mm = m.data<float>();
      float* vv = v.data<float>();
      auto with_grad = [&]<typename L>(L* out) {
        switch (grad.dtype()) {
          case DType::BFloat16: update<float, BFloat16, L>(sc, grad.data<BFloat16>(), p, mm, vv, out, piece.begin, piece.end); break;
          case DType::Float16: update<float, Half, L>(sc, grad.data<Half>(), p, mm, vv, out, piece.begin, piece.end); break;
          default: update<float, float, L>(sc, grad.data<float>(), p, mm, vv, out, piece.begin, piece.end); break;
        }
      };
      if (!low) with_grad(static_cast<void*>(nullptr));  // no copies: a 16-bit grad of a float32 param
      else if (low->dtype() == DType::BFloat16) with_grad(low->data<BFloat16>());
      else with_grad(low->data<Half>());
    }
  });
}


DG_REGISTER_KERNEL(adamw_step, Device::Type::CPU, adamw_kernel);

}  // namespace dg::cpu
