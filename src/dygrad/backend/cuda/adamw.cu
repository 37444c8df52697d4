// CUDA kernels: AdamW / Adam over many tensors (adamw.h), compiled for sm_90; not yet run on a GPU.
//
// Notation: P tensors per launch, t a tensor, i an element; the update is backend/cpu/fused_adamw.cpp's, operation
// for operation (each torch op's result rounded to the storage type before the next reads it), the scalars in
// double as Python computes them:
//   step_t += 1;  AdamW: p *= 1 - lr wd;  Adam: g = g + wd p;
//   m = lerp(m, g, 1 - b1);  v = v b2 + (1 - b2) g g;
//   denom = sqrt(v) / sqrt(1 - b2^step) + eps;  p += -(lr / (1 - b1^step)) * m / denom.
// Two launches: one thread per tensor bumps its step count, then blocks of (tensor, piece) update elements (thread 0
// of each block computes its tensor's scalars from the device's lr, hyper-parameters and count). The hyper-parameters
// are read when the step runs, so a schedule's new lr needs no new launch arguments (a CUDA graph's replay). The
// double pow on the GPU may differ from glibc's in the last bit of a double, which float32 rounding almost always
// hides. Every kernel first checks the stream's error word (fault.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "dygrad/backend/cuda/adamw.h"
#include "dygrad/backend/cuda/device_types.cuh"
#include "dygrad/math/arithmetic.h"

namespace dg::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kPiece = 1 << 16;  // elements per block

// steps: float [P]; step[t] += 1
__global__ void bump_steps(FaultContext fault, AdamTensors tensors) {
  if (stream_faulted(fault)) return;
  if (static_cast<int>(threadIdx.x) < tensors.count) *tensors.step[threadIdx.x] += 1.0f;
}

struct Scalars {
  double decay, l2, weight, beta2, one_minus_beta2, eps, bias2, neg_step;
};

// grid (pieces, P): block (x, t) updates elements [x kPiece, (x + 1) kPiece) of tensor t, grid-striding over pieces
template <typename S>
__global__ void adamw_update(FaultContext fault, AdamTensors tensors, const void* lr_ptr, bool lr_is_float32,
                             const double* hyper, bool decoupled) {
  if (stream_faulted(fault)) return;
  using C = compute_t<S>;
  const int t = blockIdx.y;
  __shared__ Scalars k;
  if (threadIdx.x == 0) {
    const double lr = lr_is_float32 ? static_cast<double>(*static_cast<const float*>(lr_ptr))
                                    : *static_cast<const double*>(lr_ptr);
    const double beta1 = hyper[0], beta2 = hyper[1], eps = hyper[2], weight_decay = hyper[3];
    auto in_lr_dtype = [lr_is_float32](double x) { return lr_is_float32 ? static_cast<double>(static_cast<float>(x)) : x; };
    const double step = static_cast<double>(*tensors.step[t]);
    k.decay = decoupled ? in_lr_dtype(1.0 - in_lr_dtype(lr * in_lr_dtype(weight_decay))) : 1.0;
    k.l2 = decoupled ? 0.0 : weight_decay;
    k.weight = 1.0 - beta1;
    k.beta2 = beta2;
    k.one_minus_beta2 = 1.0 - beta2;
    k.eps = eps;
    k.bias2 = sqrt(1.0 - pow(beta2, step));
    k.neg_step = -in_lr_dtype(lr / in_lr_dtype(1.0 - pow(beta1, step)));
  }
  __syncthreads();
  const C c_decay = static_cast<C>(k.decay), weight = static_cast<C>(k.weight), c_beta2 = static_cast<C>(k.beta2);
  const C one_minus_beta2 = static_cast<C>(k.one_minus_beta2), c_eps = static_cast<C>(k.eps);
  const C c_bias2 = static_cast<C>(k.bias2), neg_step = static_cast<C>(k.neg_step), c_l2 = static_cast<C>(k.l2);
  // Each torch op stores its result in S before the next reads it: round the same way (a no-op for float32/64).
  auto stored = [](C x) -> C {
    const S rounded = to_storage<S>(x);
    return load(&rounded);
  };
  S* p = static_cast<S*>(tensors.param[t]);
  S* m = static_cast<S*>(tensors.exp_avg[t]);
  S* v = static_cast<S*>(tensors.exp_avg_sq[t]);
  const S* g = static_cast<const S*>(tensors.grad[t]);
  const int64_t n = tensors.numel[t];
  for (int64_t piece = blockIdx.x; piece * kPiece < n; piece += gridDim.x) {
    const int64_t end = (piece + 1) * kPiece < n ? (piece + 1) * kPiece : n;
    for (int64_t i = piece * kPiece + threadIdx.x; i < end; i += kThreads) {
      const C p0 = load(p + i), g0 = load(g + i);
      const C gi = k.l2 != 0.0 ? stored(g0 + c_l2 * p0) : g0;
      const C pi = k.decay != 1.0 ? stored(p0 * c_decay) : p0;
      const C mi = stored(math::lerp(load(m + i), gi, weight));
      const C vi = stored(stored(load(v + i) * c_beta2) + one_minus_beta2 * gi * gi);
      const C denom = stored(stored(stored(sqrt(vi)) / c_bias2) + c_eps);
      p[i] = to_storage<S>(pi + neg_step * mi / denom);
      m[i] = to_storage<S>(mi);
      v[i] = to_storage<S>(vi);
    }
  }
}

}  // namespace

void launch_adamw(ElemType type, const AdamTensors& tensors, const void* lr, bool lr_is_float32, const double* hyper,
                  bool decoupled, const LaunchArgs& args) {
  if (tensors.count == 0) return;
  bump_steps<<<1, kAdamTensorsPerLaunch, 0, args.stream>>>(args.fault, tensors);
  int64_t largest = 1;
  for (int t = 0; t < tensors.count; ++t) largest = tensors.numel[t] > largest ? tensors.numel[t] : largest;
  const int64_t pieces = (largest + kPiece - 1) / kPiece;
  const dim3 grid(static_cast<unsigned>(pieces < 1024 ? pieces : 1024), static_cast<unsigned>(tensors.count));
  auto run = [&]<typename S>() {
    adamw_update<S><<<grid, kThreads, 0, args.stream>>>(args.fault, tensors, lr, lr_is_float32, hyper, decoupled);
  };
  visit_floating(type, run);
}

}  // namespace dg::cuda
