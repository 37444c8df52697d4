// CPU nll_loss kernels, forward and backward. Rows (one index of the non-class dims) are spread over the pool;
// the reductions over rows are eight-lane sums over fixed runs of rows merged in order, so results do not depend
// on the thread count.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/scratch.h"

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

// Rows per partial sum: fixed, so the partials of the loss and the weight merge in the same order on any pool;
// small enough that a few thousand rows spread evenly over the threads.
constexpr int64_t kRowsPerPartial = 4096;

// The operands of one nll_loss call as plain pointers and numbers (the row loop reads nothing through the Task).
template <typename T>
struct NllRows {
  const T* x;
  const int64_t* target;
  const T* weight;  // nullptr: every class weighs 1
  T* loss;          // nullptr: reduced (only the sums are wanted)
  int64_t num_classes, class_stride, ignore;
  const ReduceLayout* layout;  // nullptr: [N, C] contiguous, row o starts at o * C
};

// Rows [b, b + n): writes each row's loss when asked and returns the eight-lane sums (in double) of the rows'
// weights and losses (40000 float32 rows summed in float32 drift by ~3e-5 relative). A row's weight and loss are
// 0 where its target is ignore_index; targets were checked before. Branch-free, and one instance per form (a
// layout, weights, losses per row), so the compiler vectorises the contiguous forms (gathers).
template <typename T, bool kLayout, bool kWeighted, bool kPerRow>
void nll_row_sums(const NllRows<T>& r, int64_t b, int64_t n, double& sum_weight, double& sum_loss) {
  using C = compute_t<T>;
  const T* __restrict x = r.x;
  const int64_t* __restrict target = r.target + b;
  const T* __restrict weight = r.weight;
  T* __restrict loss = kPerRow ? r.loss + b : nullptr;  // no offset on a null pointer when reduced
  const int64_t num_classes = r.num_classes, class_stride = r.class_stride, ignore = r.ignore;
  double lw[8] = {}, lv[8] = {};
  auto add = [&](int64_t i, int lane) {
    const int64_t t = target[i];
    const bool keep = t != ignore;
    const int64_t k = keep ? t : 0;
    int64_t start;
    if constexpr (kLayout) start = r.layout->output_offset(b + i);
    else start = (b + i) * num_classes;
    C wk = C(1);
    if constexpr (kWeighted) wk = static_cast<C>(weight[k]);
    const C v = keep ? -wk * static_cast<C>(x[start + k * class_stride]) : C(0);
    if constexpr (kPerRow) loss[i] = static_cast<T>(v);
    lw[lane] += keep ? double(wk) : 0.0;
    lv[lane] += double(v);
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) add(i + k, k);
  for (; i < n; ++i) add(i, 0);
  sum_weight = eight_lane_merge(lw);
  sum_loss = eight_lane_merge(lv);
}

// nll_row_sums for the form of r.
template <typename T>
void nll_row_sums_of(const NllRows<T>& r, int64_t b, int64_t n, double& sum_weight, double& sum_loss) {
  auto run = [&]<bool kLayout, bool kWeighted, bool kPerRow>() {
    nll_row_sums<T, kLayout, kWeighted, kPerRow>(r, b, n, sum_weight, sum_loss);
  };
  auto with_rows = [&]<bool kLayout, bool kWeighted>() {
    r.loss ? run.template operator()<kLayout, kWeighted, true>() : run.template operator()<kLayout, kWeighted, false>();
  };
  auto with_weight = [&]<bool kLayout>() {
    r.weight ? with_rows.template operator()<kLayout, true>() : with_rows.template operator()<kLayout, false>();
  };
  r.layout ? with_weight.template operator()<true>() : with_weight.template operator()<false>();
}

void nll_loss_kernel(Task& task) {
  const Tensor& input = task.inputs[0];
  const int64_t* target = task.inputs[1].data<int64_t>();
  const NllLossAttrs& attrs = task.attrs.get<NllLossAttrs>();
  ReduceLayout L(input, kClassDim);
  const int64_t rows = L.num_outputs, num_classes = L.num_reduced, ignore = attrs.ignore_index;
  // Targets first (one branch-free pass): the row loop then reads without a check that raises.
  uint64_t bad = 0;
  for (int64_t o = 0; o < rows; ++o)
    bad |= static_cast<uint64_t>((static_cast<uint64_t>(target[o]) >= static_cast<uint64_t>(num_classes)) &
                                 (target[o] != ignore));
  if (bad)
    for (int64_t o = 0; o < rows; ++o)
      if (target[o] != ignore) check_target(target[o], num_classes);
  visit_floating(input.dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    const bool per_row = attrs.reduction == LossReduction::None;
    T* loss = task.outputs[0].data<T>();
    // [N, C] contiguous (the usual logits): row o starts at o * C, without the general layout's index arithmetic
    // (ReduceLayout::output_offset took a third of nll_loss's time over [40000, 8]).
    const bool contiguous_rows = input.dim() == 2 && input.is_contiguous();
    const NllRows<T> r{input.data<T>(), target, attrs.weighted ? task.inputs[2].data<T>() : nullptr,
                       per_row ? loss : nullptr, num_classes, L.red_strides.empty() ? 1 : L.red_strides[0],
                       ignore, contiguous_rows ? nullptr : &L};
    const int64_t parts = std::max<int64_t>(1, (rows + kRowsPerPartial - 1) / kRowsPerPartial);
    double* partial = task_scratch(task).take<double>(2 * parts);
    parallel_chunks(parts, [&](int64_t p) {
      const int64_t b = p * kRowsPerPartial;
      nll_row_sums_of(r, b, std::min(rows, b + kRowsPerPartial) - b, partial[2 * p],
                   partial[2 * p + 1]);
    });
    double total_weight = partial[0], total = partial[1];  // the partials in order
    for (int64_t p = 1; p < parts; ++p) {
      total_weight += partial[2 * p];
      total += partial[2 * p + 1];
    }
    *task.outputs[1].data<C>() = static_cast<C>(total_weight);
    // the mean of no counted row is 0 / 0 = NaN, as torch
    if (!per_row) loss[0] = static_cast<T>(attrs.reduction == LossReduction::Sum ? total : total / total_weight);
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
