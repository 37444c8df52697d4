// CPU nll_loss kernels, forward and backward. Rows (one index of the non-class dims) are spread over the pool;
// the reductions over rows are eight-lane sums in a fixed order, so results do not depend on the thread count.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <vector>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/backend/cpu/reduce.h"
#include "dygrad/core/error.h"

// The kernels of this file and their operands (class dim 1, R = N * d... rows of C classes), NllLossAttrs
// (ignore_index, reduction, weighted):
// nll_loss_kernel: inputs (input[N, C, d...] log-probabilities, any layout; target[R] int64 contiguous; weight[C]
//   contiguous in the input's dtype when weighted); outputs (loss: [] or [N, d...] in the input's dtype,
//   total_weight[] in the compute type: the summed weight[target] of the rows not ignored).
//   row loss = -weight[t] * input[row, t], t = target[row]; 0 (and weight 0) where t == ignore_index.
// nll_loss_backward_kernel: inputs (target[R], weight[C] when weighted, total_weight[], g: [] or [R] contiguous),
//   output grad_input[N, C, d...] (contiguous): 0 except grad[row, t] = -weight[t] * g / total_weight (the mean),
//   -weight[t] * g (sum) or -weight[t] * g[row] (none); ignored rows stay 0.

namespace dg::cpu {

namespace {
const Dims kClassDim = {1};

// Raises (inside the kernel: the stream defers it to the next sync point) for a target outside [0, C).
inline void check_target(int64_t t, int64_t num_classes) {
  DG_CHECK(t >= 0 && t < num_classes, Index, "[nll_loss] Target ", t, " is out of bounds (", num_classes,
           " classes: expected a class index in [0, ", num_classes - 1, "] or ignore_index).");
}
}  // namespace

void nll_loss_kernel(Task& task) {
  const Tensor& input = task.inputs[0];
  const int64_t* target = task.inputs[1].data<int64_t>();
  const NllLossAttrs& attrs = task.attrs.get<NllLossAttrs>();
  ReduceLayout L(input, kClassDim);
  const int64_t rows = L.num_outputs, num_classes = L.num_reduced;
  visit_floating(input.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* x = input.data<T>();
    const T* weight = attrs.weighted ? task.inputs[2].data<T>() : nullptr;
    const int64_t stride = L.red_strides.empty() ? 1 : L.red_strides[0];
    // [N, C] contiguous (the usual logits): row o starts at o * C, without the general layout's index arithmetic
    // (ReduceLayout::output_offset took a third of nll_loss's time over [40000, 8]).
    const bool contiguous_rows = input.dim() == 2 && input.is_contiguous();
    auto row_start = [&](int64_t o) { return contiguous_rows ? o * num_classes : L.output_offset(o); };
    std::vector<C> row_loss(static_cast<size_t>(rows)), row_weight(static_cast<size_t>(rows));
    parallel_for(0, rows, kReduceGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        const int64_t t = target[o];
        if (t == attrs.ignore_index) {
          row_loss[static_cast<size_t>(o)] = C(0);
          row_weight[static_cast<size_t>(o)] = C(0);
          continue;
        }
        check_target(t, num_classes);
        const C w = weight ? static_cast<C>(weight[t]) : C(1);
        row_weight[static_cast<size_t>(o)] = w;
        row_loss[static_cast<size_t>(o)] = -w * static_cast<C>(x[row_start(o) + t * stride]);
      }
    });
    // sums over rows in double (40000 float32 rows summed in float32 drift by ~3e-5 relative)
    const double total_weight = eight_lane_sum<double>(rows, [&](int64_t o) { return double(row_weight[static_cast<size_t>(o)]); });
    *task.outputs[1].data<C>() = static_cast<C>(total_weight);
    T* loss = task.outputs[0].data<T>();
    if (attrs.reduction == LossReduction::None) {
      for (int64_t o = 0; o < rows; ++o) loss[o] = static_cast<T>(row_loss[static_cast<size_t>(o)]);
      return;
    }
    const double total = eight_lane_sum<double>(rows, [&](int64_t o) { return double(row_loss[static_cast<size_t>(o)]); });
    // the mean of no counted row is 0 / 0 = NaN, as torch
    loss[0] = static_cast<T>(attrs.reduction == LossReduction::Sum ? total : total / total_weight);
  });
}

void nll_loss_backward_kernel(Task& task) {
  const NllLossAttrs& attrs = task.attrs.get<NllLossAttrs>();
  const size_t n = task.inputs.size();
  const int64_t* target = task.inputs[0].data<int64_t>();
  const Tensor& grad = task.outputs[0];
  ReduceLayout Lg(grad, kClassDim);
  const int64_t rows = Lg.num_outputs, num_classes = Lg.num_reduced;
  visit_floating(grad.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const T* weight = attrs.weighted ? task.inputs[1].data<T>() : nullptr;
    const C total_weight = *task.inputs[n - 2].data<C>();
    const T* g = task.inputs[n - 1].data<T>();
    T* out = grad.data<T>();
    const int64_t sg = Lg.red_strides.empty() ? 1 : Lg.red_strides[0];
    const C divisor = attrs.reduction == LossReduction::Mean ? total_weight : C(1);
    parallel_for(0, rows, std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(num_classes, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        T* dst = out + Lg.output_offset(o);
        for (int64_t c = 0; c < num_classes; ++c) dst[c * sg] = T(0.0f);
        const int64_t t = target[o];
        if (t == attrs.ignore_index) continue;
        check_target(t, num_classes);
        const C w = weight ? static_cast<C>(weight[t]) : C(1);
        const C scale = static_cast<C>(g[attrs.reduction == LossReduction::None ? o : 0]);
        dst[t * sg] = static_cast<T>(-w * scale / divisor);
      }
    });
  });
}

DG_REGISTER_KERNEL(nll_loss, Device::Type::CPU, nll_loss_kernel);
DG_REGISTER_KERNEL(nll_loss_backward, Device::Type::CPU, nll_loss_backward_kernel);

}  // namespace dg::cpu
