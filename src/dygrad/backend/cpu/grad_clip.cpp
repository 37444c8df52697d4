// clip_grad_norm_'s kernels over many tensors in one Task (multi-tensor apply, as adamw_step): each tensor is
// cut into pieces of kGradNormPiece elements from its shape only, the pieces of all tensors are spread over the
// pool, and partial results are combined in piece order: the same bits for any thread count.
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

#include <cmath>
#include <vector>

#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

// grad_norm_kernel: inputs (t_0 .. t_{N-1}: contiguous, floating, any dtypes), output norm[] (their promoted
// dtype). GradNormAttrs p: inf: max |x|; -inf: min |x|; 0: count of x != 0; else (sum |x|^p)^(1/p), summed in
// double per piece (p = 2 and 1 without pow).
// clip_grads_with_norm_kernel: outputs (g_0 .. g_{N-1}: contiguous), inputs (g_0 .. g_{N-1}, norm[])
// (alias_each_output): g *= c, c = max_norm / (norm + 1e-6) in norm's dtype, then c = 1 when c > 1 (torch's clamp(max=1): a NaN norm
// gives NaN gradients, as torch).

namespace dg::cpu {

namespace {
struct Piece {
  int64_t tensor, begin, end;
};

// The tensors cut into pieces of kGradNormPiece elements, in the Task's scratch; `count` is their number.
Piece* cut(ScratchArena& scratch, std::span<const Tensor> tensors, int64_t& count) {
  count = 0;
  for (const Tensor& t : tensors) count += (t.numel() + kGradNormPiece - 1) / kGradNormPiece;
  Piece* pieces = scratch.take<Piece>(count);
  int64_t made = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    for (int64_t b = 0, n = tensors[i].numel(); b < n; b += kGradNormPiece)
      pieces[made++] = {static_cast<int64_t>(i), b, std::min(n, b + kGradNormPiece)};
  return pieces;
}

enum class NormKind { Max, Min, Count, Two, One, Power };

// sum of f(|x[i]|) over [begin, end) in eight fixed lanes (vectorisable; the same order for any thread count).
template <typename T, typename F>
double lane_sum(const T* x, int64_t begin, int64_t end, F f) {
  double lanes[8] = {};
  int64_t i = begin;
  for (; i + 8 <= end; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += f(std::fabs(static_cast<double>(x[i + l])));
  double tail = 0.0;
  for (; i < end; ++i) tail += f(std::fabs(static_cast<double>(x[i])));
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

// max (IsMax) or min of |x[i]|; NaN when any is NaN.
template <bool IsMax, typename T>
double extremum(const T* x, int64_t begin, int64_t end) {
  double acc = IsMax ? 0.0 : INFINITY;
  bool nan = false;
  for (int64_t i = begin; i < end; ++i) {
    const double v = std::fabs(static_cast<double>(x[i]));
    nan |= v != v;
    acc = IsMax ? (v > acc ? v : acc) : (v < acc ? v : acc);
  }
  return nan ? NAN : acc;
}
}  // namespace

void grad_norm_kernel(Task& task) {
  const double p = task.attrs.get<GradNormAttrs>().norm_type;
  const NormKind kind = p == INFINITY ? NormKind::Max : p == -INFINITY ? NormKind::Min : p == 0 ? NormKind::Count
                        : p == 2 ? NormKind::Two : p == 1 ? NormKind::One : NormKind::Power;
  const std::span<const Tensor> inputs(task.inputs.data(), task.inputs.size());
  ScratchArena& scratch = task_scratch(task);
  int64_t num_pieces;
  const Piece* pieces = cut(scratch, inputs, num_pieces);
  double* partial = scratch.take<double>(num_pieces);
  parallel_for(0, num_pieces, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const Piece& piece = pieces[k];
      visit_floating(inputs[static_cast<size_t>(piece.tensor)].dtype(), [&]<typename T>() {
        const T* x = inputs[static_cast<size_t>(piece.tensor)].data<T>();
        double acc = 0.0;
        switch (kind) {
          case NormKind::Max: acc = extremum<true>(x, piece.begin, piece.end); break;
          case NormKind::Min: acc = extremum<false>(x, piece.begin, piece.end); break;
          case NormKind::Count: acc = lane_sum(x, piece.begin, piece.end, [](double v) { return v != 0.0 ? 1.0 : 0.0; }); break;
          case NormKind::Two: acc = lane_sum(x, piece.begin, piece.end, [](double v) { return v * v; }); break;
          case NormKind::One: acc = lane_sum(x, piece.begin, piece.end, [](double v) { return v; }); break;
          case NormKind::Power: acc = lane_sum(x, piece.begin, piece.end, [p](double v) { return std::pow(v, p); }); break;
        }
        partial[k] = acc;
      });
    }
  });
  double total = kind == NormKind::Min ? INFINITY : 0.0;
  if (kind == NormKind::Count) {  // torch's norm of the per-tensor norms: the count of tensors with a nonzero
    const int64_t tensors = static_cast<int64_t>(inputs.size());
    double* counts = scratch.take<double>(tensors);
    std::fill(counts, counts + tensors, 0.0);
    for (int64_t k = 0; k < num_pieces; ++k) counts[pieces[k].tensor] += partial[k];
    for (int64_t i = 0; i < tensors; ++i) total += counts[i] != 0.0;
  }
  for (int64_t k = 0; k < num_pieces; ++k) {
    const double v = partial[k];
    if (kind == NormKind::Count) break;
    if (kind == NormKind::Max) total = (v > total || v != v) ? v : total;
    else if (kind == NormKind::Min) total = (v < total || v != v) ? v : total;
    else total += v;
    if (v != v) total = v;
  }
  if (kind == NormKind::Two) total = std::sqrt(total);
  else if (kind == NormKind::Power) total = std::pow(total, 1.0 / p);
  if (kind == NormKind::Min && num_pieces == 0) total = 0.0;
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() { *task.outputs[0].data<T>() = static_cast<T>(total); });
}

void clip_grads_with_norm_kernel(Task& task) {
  const size_t count = task.outputs.size();
  const Tensor& norm = task.inputs[count];
  const double max_norm = task.attrs.get<ClipGradNormAttrs>().max_norm;
  double factor = 1.0;
  visit_floating(norm.dtype(), [&]<typename T>() {  // in the norm's dtype, as torch's tensor arithmetic
    using C = compute_t<T>;
    const C shifted = static_cast<C>(static_cast<T>(static_cast<C>(*norm.data<T>()) + static_cast<C>(1e-6)));
    const C c = static_cast<C>(static_cast<T>(static_cast<C>(max_norm) / shifted));
    factor = static_cast<double>(c > C(1) ? C(1) : c);
  });
  const std::span<const Tensor> outputs(task.outputs.data(), count);
  int64_t num_pieces;
  const Piece* pieces = cut(task_scratch(task), outputs, num_pieces);
  parallel_for(0, num_pieces, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      const Piece& piece = pieces[k];
      visit_floating(outputs[static_cast<size_t>(piece.tensor)].dtype(), [&]<typename T>() {
        using C = compute_t<T>;
        const C c = static_cast<C>(factor);
        T* g = outputs[static_cast<size_t>(piece.tensor)].data<T>();
        for (int64_t i = piece.begin; i < piece.end; ++i) g[i] = static_cast<T>(static_cast<C>(g[i]) * c);
      });
    }
  });
}

DG_REGISTER_KERNEL(grad_norm, Device::Type::CPU, grad_norm_kernel);
DG_REGISTER_KERNEL(clip_grads_with_norm, Device::Type::CPU, clip_grads_with_norm_kernel);

}  // namespace dg::cpu
