// In-place ops on views (torch's rebase_history, CopySlices, VariableHooks::grad_fn and check_inplace): an
// in-place op on a view rebases its base's history, and a view whose storage was written since its grad_fn
// was computed gets a grad_fn regenerated from its base. See docs/autograd.md, "In-place on views".
#include <string>
#include <vector>

#include "dygrad/autograd/node.h"
#include "dygrad/core/error.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/indexing.h"
#include "dygrad/ops/shape.h"

namespace dg {

ViewCreation current_view_creation() { return grad_enabled() ? ViewCreation::Default : ViewCreation::NoGrad; }

namespace {
using Grads = std::span<const Tensor>;
using GradInputs = std::span<Tensor>;

// Where a tensor lies in its storage, in elements: what a CopySlices or AsStrided node keeps of the base and
// of the view (torch's TensorGeometry). Strides are >= 0 (dygrad has no negative strides).
struct Geometry {
  Dims sizes, strides;
  int64_t offset = 0;
  explicit Geometry(const TensorImpl& t) : sizes(t.sizes), strides(t.strides), offset(t.offset) {}
  int64_t numel() const { return shape_numel(sizes); }
};

// The flat (row-major) index in the base of each element of the view, as an int64 vector of the view's
// element count: a window of the storage spanned by the base holds each base element's flat index, and is
// read back with the view's strides. No grad (index arithmetic), enqueued like any op, on the gradient's `device`.
Tensor view_indices_in_base(const Geometry& base, const Geometry& view, Device device) {
  NoGradGuard no_grad;
  int64_t extent = 1;
  for (size_t d = 0; d < base.sizes.size(); ++d) extent += (base.sizes[d] - 1) * base.strides[d];
  Tensor window = empty(Dims{extent}, {.dtype = DType::Int64, .device = device});
  Tensor as_base = as_strided(window, base.sizes, base.strides, 0);
  copy_(as_base, reshape(arange(Scalar(0), Scalar(base.numel()), Scalar(1), DType::Int64, device), base.sizes));
  return reshape(as_strided(window, view.sizes, view.strides, view.offset - base.offset), Dims{view.numel()});
}

Tensor flat(const Tensor& t) { return reshape(t, Dims{t.numel()}); }

// AsStridedBackward0: the gradient of a view as the base's, zeros outside the view's elements (overlapping
// views, such as an expand, add up). Differentiable (index_add), so create_graph goes through it.
Tensor scatter_into_base(const Tensor& g, const Geometry& base, const Geometry& view) {
  const TensorOptions options{.dtype = g.dtype(), .device = g.device()};
  if (view.numel() == 0 || base.numel() == 0) return zeros(base.sizes, options);
  const Tensor indices = view_indices_in_base(base, view, g.device());
  Tensor summed = index_add(zeros(Dims{base.numel()}, options), 0, indices, flat(g));
  return reshape(summed, base.sizes);
}

// The view's history regenerated from its base's current one (torch's AsStridedBackward0 node).
void regenerate_view_history(TensorImpl* impl) {
  Tensor view(Ref<TensorImpl>{impl});
  Tensor base(impl->view_base);
  const bool retained = impl->autograd && impl->autograd->retains_grad;
  Ref<Node> node = make_ref<Node>(std::string("as_strided"), nullptr, 1);
  node->closure = [base_geometry = Geometry(*base.impl()), view_geometry = Geometry(*impl)](Node& n, Grads g,
                                                                                          GradInputs gi) {
    if (n.needs_grad(0)) gi[0] = scatter_into_base(g[0], base_geometry, view_geometry);
  };
  Tensor inputs[1] = {base};
  record_node(node, inputs, {});
  set_history(view, node, 0);
  impl->view_version = impl->storage->version();
  if (retained) view.retain_grad();
}

// torch's handle_view_on_rebase message for a view that may not be modified in place (made in no_grad mode
// or by a multi-output op); `indirect`: its base or another view of it was modified.
std::string forbidden_view_message(const TensorImpl& view, bool indirect) {
  const Node* grad_fn = view.autograd ? view.autograd->grad_fn.get() : nullptr;
  const std::string modified = indirect ? "its base or another view of its base has been" : "is being";
  const std::string output = grad_fn ? "Output " + std::to_string(view.autograd->output_nr) + " of " +
                                           grad_fn->display_name()
                                     : std::string();
  std::string msg;
  if (view.view_creation == ViewCreation::NoGrad || !grad_fn)
    msg = (grad_fn ? output + " is a view of a view which was created in" : std::string("A view was created in")) +
          " no_grad mode and " + modified + " modified inplace with grad mode enabled.";
  else
    msg = output + " is a view and " + modified + " modified inplace.";
  if (view.view_creation == ViewCreation::MultiOutput)
    msg += " This view is the output of a function that returns multiple views. Such functions do not allow the "
           "output views to be modified inplace. You should replace the inplace operation by an out-of-place one.";
  else
    msg += " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code by "
           "moving both the view and the inplace either both inside the no_grad block (if you don't want the inplace "
           "to be tracked) or both outside (if you want the inplace to be tracked).";
  return msg;
}
}  // namespace

void refresh_view_history(TensorImpl* impl, bool raise_if_forbidden) {
  const TensorImpl& base = *impl->view_base;
  const bool has_history = impl->autograd && impl->autograd->grad_fn;
  const bool base_requires_grad = base.autograd && base.autograd->requires_grad;
  if ((!has_history && !base_requires_grad) || !is_differentiable(impl->dtype)) {
    impl->view_version = impl->storage->version();
    return;
  }
  if (impl->view_creation != ViewCreation::Default) {
    // Stays stale: every later use that needs its history raises, as torch's grad_fn accessor does.
    if (raise_if_forbidden) fail(ErrorKind::Runtime, "[autograd] ", forbidden_view_message(*impl, true));
    return;
  }
  regenerate_view_history(impl);
}

void check_inplace(const char* op, const Tensor& t, bool operands_require_grad) {
  if (!grad_enabled()) return;
  const bool self_requires_grad = t.requires_grad();
  const TensorImpl& impl = *t.impl();
  // A no-grad or multi-output view of a tensor that requires grad counts as requiring grad here (torch's
  // view requires grad when its base does).
  const bool forbidden_view_of_grad = impl.view_base && impl.view_creation != ViewCreation::Default &&
                                      impl.view_base->autograd && impl.view_base->autograd->requires_grad;
  if (!self_requires_grad && !operands_require_grad && !forbidden_view_of_grad) return;
  if (impl.view_base && is_differentiable(impl.dtype)) {
    if (impl.view_creation != ViewCreation::Default)
      fail(ErrorKind::Runtime, "[", op, "] ", forbidden_view_message(impl, false));
    const AutogradMeta* base = impl.view_base->autograd.get();
    DG_CHECK(!(self_requires_grad && base && base->requires_grad && !base->grad_fn), Runtime, "[", op, "] a view of "
             "a leaf Variable that requires grad is being used in an in-place operation.");
  }
  DG_CHECK(!(self_requires_grad && t.is_leaf()), Runtime, "[", op, "] a leaf Variable that requires grad is being "
           "used in an in-place operation");
}

void rebase_history(const Tensor& t, Ref<Node> node) {
  TensorImpl* impl = t.impl();
  if (!impl->view_base || !is_differentiable(impl->dtype)) {
    set_history(t, node, 0);
    return;
  }
  // CopySlices: the base's new history. Its input 0 is the base's old value; the others are the in-place
  // op's other inputs. Backward: the view's slice of the base's gradient goes through the op's formula,
  // whose gradient for the view's old value replaces that slice (torch's CopySlices::apply).
  Tensor base(impl->view_base);
  Ref<Node> copy_slices = make_ref<Node>(std::string("CopySlices"), nullptr, 1);
  copy_slices->named_as_is = true;
  copy_slices->forward_site = node->forward_site;
  copy_slices->next.push_back(gradient_edge(base));
  copy_slices->input_meta.push_back({Dims(base.shape()), base.dtype(), base.device()});
  for (size_t i = 1; i < node->next.size(); ++i) {
    copy_slices->next.push_back(node->next[i]);
    copy_slices->input_meta.push_back(node->input_meta[i]);
  }
  copy_slices->inner = std::move(node);
  copy_slices->closure = [base_geometry = Geometry(*base.impl()), view_geometry = Geometry(*impl)](
                             Node& n, Grads g, GradInputs gi) {
    Node& op = *n.inner;
    const bool empty_view = view_geometry.numel() == 0;
    const TensorOptions options{.dtype = g[0].dtype(), .device = g[0].device()};
    const Tensor indices = empty_view ? Tensor() : view_indices_in_base(base_geometry, view_geometry, g[0].device());
    Tensor slice = empty_view ? zeros(view_geometry.sizes, options)
                              : reshape(index_select(flat(g[0]), 0, indices), view_geometry.sizes);
    std::vector<Tensor> op_grads(op.next.size());
    Tensor op_outputs[1] = {slice};
    op.apply(op_outputs, op_grads);
    for (size_t i = 1; i < op_grads.size() && i < gi.size(); ++i) gi[i] = std::move(op_grads[i]);
    if (!n.needs_grad(0)) return;
    if (empty_view) {
      gi[0] = g[0];
      return;
    }
    // The view's old value got op_grads[0] (undefined: the op overwrote it, so zeros).
    Tensor replaced = op_grads[0].defined() ? to(op_grads[0], g[0].dtype()) : zeros(view_geometry.sizes, options);
    Tensor result = clone(flat(g[0]));
    TensorIndex at[1] = {TensorIndex::tensor_index(indices)};
    index_put_(result, at, flat(replaced), false);
    gi[0] = reshape(result, base_geometry.sizes);
  };
  set_history(base, copy_slices, 0);
  regenerate_view_history(impl);
}

}  // namespace dg
