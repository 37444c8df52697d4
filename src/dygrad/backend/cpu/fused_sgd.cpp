// SGD over many tensors in one Task (multi-tensor apply, as fused_adamw.cpp): every tensor is cut into fixed pieces
// and the pieces of all tensors are spread over the pool. The update is torch.optim.SGD's single-tensor path,
// operation for operation, each op's result rounded to the param's dtype as torch's chain stores it:
//   g = maximize ? -grad : grad;  g = g + wd p (wd != 0: grad.add(p, alpha=wd));
//   momentum: buf = initialized ? buf * momentum + (1 - dampening) g : g  (mul_, add_(g, alpha); clone);
//             g = nesterov ? g + momentum buf : buf;
//   p = p + (-lr) g  (add_(g, alpha=-lr)).
// Scalars are cast as torch casts an op's Scalar argument (an add's alpha to the param's dtype, a mul's factor to the
// compute type); 1 - dampening and -lr are computed in double first, as Python computes them.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"
#include "dygrad/math/arithmetic.h"

// The kernel and its operands (P tensors of any shape, N_i elements each):
// outputs: param_0 .. param_{P-1} and, with momentum (SgdAttrs::momentum), buf_0 .. buf_{P-1} then initialized_0 ..
// initialized_{P-1} (0-d bool: false until the buffer's first step, which stores g and sets it true); params and
// buffers contiguous, updated in place. inputs: the same tensors (alias_each_output), then grad_0 .. grad_{P-1}
// (contiguous, the params' dtype), then lr (a 0-d floating tensor) and {momentum, dampening, weight_decay} (a
// float64 [3] tensor), read when the Task runs.

namespace dg::cpu {

namespace {
constexpr int64_t kPiece = kSgdPiece;  // elements per unit of work (runtime/scratch.h)

struct Piece {
  int64_t tensor, begin, end;
};

struct Scalars {
  double momentum, one_minus_dampening, weight_decay, neg_lr;
};

// Elements [begin, end) of one tensor: param p, gradient g and (Momentum) buffer buf, all T.
template <typename T, bool Momentum>
void update(const Scalars& k, const SgdAttrs& attrs, [[maybe_unused]] bool initialized, const T* g, T* p,
            [[maybe_unused]] T* buf, int64_t begin, int64_t end) {
  using C = compute_t<T>;
  // torch's add kernel casts its alpha to the tensor's dtype (a 16-bit alpha for bfloat16 and float16), its mul a
  // Scalar factor to the compute type (float for 16-bit types); for float32 and float64 both are the same cast.
  auto alpha = [](double a) { return static_cast<C>(static_cast<T>(a)); };
  const C wd = alpha(k.weight_decay), momentum_alpha = alpha(k.momentum), momentum = static_cast<C>(k.momentum);
  const C one_minus_dampening = alpha(k.one_minus_dampening), neg_lr = alpha(k.neg_lr);
  const bool decay = k.weight_decay != 0.0;
  // Each torch op stores its result in T before the next reads it: round the same way (a no-op for float32 and
  // float64).
  auto stored = [](C x) { return static_cast<C>(static_cast<T>(x)); };
  for (int64_t i = begin; i < end; ++i) {
    const C p0 = static_cast<C>(p[i]);
    C d = attrs.maximize ? -static_cast<C>(g[i]) : static_cast<C>(g[i]);
    if (decay) d = stored(math::add_scaled(d, p0, wd));  // grad.add(p, alpha=wd)
    if constexpr (Momentum) {
      const C b = initialized ? stored(math::add_scaled(stored(static_cast<C>(buf[i]) * momentum), d,
                                                        one_minus_dampening))  // buf.mul_(m).add_(g, alpha=1-d)
                              : d;  // buf = g.clone()
      buf[i] = static_cast<T>(b);
      d = attrs.nesterov ? stored(math::add_scaled(d, b, momentum_alpha)) : b;  // g.add(buf, alpha=m), or buf
    }
    p[i] = static_cast<T>(math::add_scaled(p0, d, neg_lr));  // p.add_(g, alpha=-lr)
  }
}
}  // namespace

void sgd_kernel(Task& task) {
  const int64_t count = static_cast<int64_t>(task.inputs.size() - task.outputs.size() - 2);
  const size_t first_grad = task.outputs.size();
  const SgdAttrs& attrs = task.attrs.get<SgdAttrs>();
  const Tensor& lr_tensor = task.inputs[task.inputs.size() - 2];
  // As torch's Scalar alpha from a Tensor lr (`alpha=-lr`, an item() of the 0-d tensor): the lr's value exactly in
  // double, negated; then cast to the compute type with the other scalars. A float32 lr is thus rounded to float32
  // once, where a float lr is the double the user gave.
  const double lr = visit_floating(lr_tensor.dtype(), [&]<typename T>() {
    return static_cast<double>(static_cast<compute_t<T>>(*lr_tensor.data<T>()));
  });
  const double* hyper = task.inputs.back().data<double>();
  const Scalars scalars{hyper[0], 1.0 - hyper[1], hyper[2], -lr};
  int64_t num_pieces = 0;
  for (int64_t t = 0; t < count; ++t) num_pieces += (task.outputs[static_cast<size_t>(t)].numel() + kPiece - 1) / kPiece;
  Piece* pieces = task_scratch(task).take<Piece>(num_pieces);  // what sgd_step's scratch declares
  int64_t made = 0;
  for (int64_t t = 0; t < count; ++t)
    for (int64_t b = 0, n = task.outputs[static_cast<size_t>(t)].numel(); b < n; b += kPiece)
      pieces[made++] = {t, b, std::min(n, b + kPiece)};
  const size_t buffers = static_cast<size_t>(count), flags = 2 * static_cast<size_t>(count);
  parallel_for(0, num_pieces, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const Piece& piece = pieces[k];
      const size_t t = static_cast<size_t>(piece.tensor);
      const Tensor& param = task.outputs[t];
      const Tensor& grad = task.inputs[first_grad + t];
      visit_floating(param.dtype(), [&]<typename T>() {
        if (attrs.momentum) {
          const bool initialized = *task.outputs[flags + t].data<bool>();  // set below, once every piece has run
          update<T, true>(scalars, attrs, initialized, grad.data<T>(), param.data<T>(),
                          task.outputs[buffers + t].data<T>(), piece.begin, piece.end);
        } else {
          update<T, false>(scalars, attrs, false, grad.data<T>(), param.data<T>(), nullptr, piece.begin, piece.end);
        }
      });
    }
  });
  if (attrs.momentum)
    for (size_t t = 0; t < static_cast<size_t>(count); ++t) *task.outputs[flags + t].data<bool>() = true;
}

DG_REGISTER_KERNEL(sgd_step, Device::Type::CPU, sgd_kernel);

}  // namespace dg::cpu
