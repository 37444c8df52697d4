// clip_grad_norm_'s two multi-tensor ops: grad_norm (the total norm of many tensors, one Task) and
// clip_grads_with_norm (every gradient scaled by min(1, max_norm / (norm + 1e-6)), in place, one Task, the
// factor read from the norm tensor on the stream: the host never waits). Not differentiable (torch runs
// them under no_grad). Kernels: backend/cpu/grad_clip.cpp.
#include "dygrad/ops/nn.h"

#include <cmath>

#include "dygrad/autograd/node.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/runtime/scratch.h"

namespace dg {

namespace {
size_t pieces_of(std::span<const Tensor> tensors) {
  size_t pieces = 0;
  for (const Tensor& t : tensors) pieces += static_cast<size_t>((t.numel() + kGradNormPiece - 1) / kGradNormPiece);
  return pieces;
}
// Scratch of the CPU kernels: the list of pieces ({tensor, begin, end}) and, for grad_norm, one double per piece
// and one per tensor (the zero norm's count).
size_t grad_norm_scratch(const Task& t) {
  const auto pieces = static_cast<int64_t>(pieces_of(t.inputs));
  return scratch_bytes(pieces, 3 * sizeof(int64_t)) + scratch_bytes<double>(pieces) +
         scratch_bytes<double>(static_cast<int64_t>(t.inputs.size()));
}
size_t clip_scratch(const Task& t) { return scratch_bytes(static_cast<int64_t>(pieces_of(t.outputs)), 3 * sizeof(int64_t)); }
OpCost grad_norm_cost(const Task& t) {
  double elements = 0, bytes = 0;
  for (const Tensor& g : t.inputs) elements += double(g.numel()), bytes += double(g.numel()) * double(g.itemsize());
  return {2 * elements, bytes};
}
OpCost clip_cost(const Task& t) {
  double elements = 0, bytes = 0;
  for (const Tensor& g : t.outputs) elements += double(g.numel()), bytes += 2 * double(g.numel()) * double(g.itemsize());
  return {elements, bytes};
}
}  // namespace

const OpDef op_grad_norm("grad_norm", attrs_type<GradNormAttrs>(), {.fusion = FusionClass::Reduction, .cost = grad_norm_cost, .scratch = grad_norm_scratch});
const OpDef op_clip_grads_with_norm("clip_grads_with_norm", attrs_type<ClipGradNormAttrs>(), {.cost = clip_cost, .scratch = clip_scratch, .alias_of = alias_each_output});

Tensor grad_norm(std::span<const Tensor> tensors, double norm_type) {
  const char* name = "grad_norm";
  DG_CHECK(norm_type == norm_type && (norm_type >= 0 || norm_type == -INFINITY), Value, "[", name, "] norm_type must be inf, -inf or >= 0, got ", norm_type);
  if (tensors.empty()) return zeros(IntSpan());
  SmallVector<Tensor, 8> inputs;
  DType dtype = tensors[0].dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(name, tensors[i], "tensors");
    check_same_device(name, tensors[0], tensors[i]);
    check_floating(name, tensors[i]);
    dtype = promote_types(dtype, tensors[i].dtype());
    inputs.push_back(contiguous(detach(tensors[i])));
  }
  Tensor out = Tensor::empty(IntSpan(), dtype, tensors[0].device());
  const Tensor outputs[1] = {out};
  enqueue(op_grad_norm, std::span<const Tensor>(inputs.data(), inputs.size()), outputs, GradNormAttrs{norm_type});
  return out;
}

void clip_grads_with_norm_(std::span<Tensor> grads, double max_norm, const Tensor& total_norm) {
  const char* name = "clip_grads_with_norm_";
  check_defined(name, total_norm, "total_norm");
  DG_CHECK(total_norm.numel() == 1 && is_floating(total_norm.dtype()), Value, "[", name,
           "] total_norm must be a one-element floating tensor, got shape ", total_norm.shape(), " of ",
           dtype_name(total_norm.dtype()));
  if (grads.empty()) return;
  NoGradGuard no_grad;
  SmallVector<Tensor, 8> fused;
  SmallVector<Tensor*, 2> others;
  for (Tensor& g : grads) {
    check_defined(name, g, "grads");
    check_same_device(name, g, total_norm);
    check_floating(name, g);
    if (g.is_contiguous()) fused.push_back(g);
    else others.push_back(&g);
  }
  if (!others.empty()) {  // torch's formula, composed: clamp(max_norm / (total_norm + 1e-6), max=1)
    Tensor factor = clamp(rdiv(add(total_norm, Scalar(1e-6)), Scalar(max_norm)), std::nullopt, Scalar(1.0));
    for (Tensor* g : others) mul_(*g, factor);
  }
  if (fused.empty()) return;
  SmallVector<Tensor, 8> inputs(fused);
  inputs.push_back(contiguous(reshape(detach(total_norm), IntSpan())));
  for (Tensor& t : fused) t.storage().bump_version();
  enqueue(op_clip_grads_with_norm, std::span<const Tensor>(inputs.data(), inputs.size()),
          std::span<const Tensor>(fused.data(), fused.size()), ClipGradNormAttrs{max_norm});
}

}  // namespace dg
