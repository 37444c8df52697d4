// Tensor's autograd accessors (declared in core/tensor.h; defined here, in the layer that owns AutogradMeta
// and Node). See docs/autograd.md.
#include <atomic>

#include "dygrad/autograd/engine.h"
#include "dygrad/autograd/node.h"
#include "dygrad/core/error.h"
#include "dygrad/core/tensor.h"

namespace dg {

// The meta dies with its TensorImpl (or is replaced): a retain_grad() slot pointing at the impl is cleared.
void AutogradMetaDeleter::operator()(AutogradMeta* meta) const {
  if (meta->retains_grad && meta->grad_fn) {
    auto& slots = meta->grad_fn->retained_outputs;
    if (meta->output_nr < slots.size()) slots[meta->output_nr] = nullptr;
  }
  delete meta;
}

// A view whose storage was written since its grad_fn was computed gets it regenerated from its base first
// (docs/autograd.md, "In-place on views"); only the accessors that hand the history out raise for a view that
// may not be rebased.
bool Tensor::requires_grad() const {
  if (view_history_stale(impl_.get())) [[unlikely]] {
    refresh_view_history(impl_.get(), false);
    // Still stale: a no-grad or multi-output view whose base was modified. It requires grad when its base
    // does (torch's view rule), so an op that records it reaches gradient_edge, which raises.
    if (view_history_stale(impl_.get()) && is_differentiable(dtype())) {
      const AutogradMeta* base = impl_->view_base->autograd.get();
      if (base && base->requires_grad) return true;
    }
  }
  return impl_->autograd && impl_->autograd->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool value) {
  DG_CHECK(!value || is_differentiable(dtype()), Runtime,
           "[requires_grad_] only Tensors of floating point and complex dtype can require gradients, got ",
           dtype_name(dtype()));
  DG_CHECK(is_leaf() || value, Runtime,
           "[requires_grad_] you can only change requires_grad flags of leaf variables");
  if (!impl_->autograd) {
    if (!value) return *this;
    impl_->autograd.reset(new AutogradMeta());
  }
  impl_->autograd->requires_grad = value;
  return *this;
}

bool Tensor::is_leaf() const {
  if (view_history_stale(impl_.get())) [[unlikely]]
    refresh_view_history(impl_.get(), true);
  return !impl_->autograd || !impl_->autograd->grad_fn;
}

Tensor Tensor::grad() const { return impl_->autograd ? impl_->autograd->grad : Tensor(); }

void Tensor::set_grad(const Tensor& g) {
  if (!impl_->autograd) impl_->autograd.reset(new AutogradMeta());
  if (g.defined()) {
    DG_CHECK(std::equal(g.shape().begin(), g.shape().end(), shape().begin(), shape().end()), Runtime,
             "[grad] assigned grad has shape ", g.shape(), " but the tensor has shape ", shape());
  }
  impl_->autograd->grad = g;
  impl_->autograd->grad_object.reset();
}

Ref<Node> Tensor::grad_fn() const {
  if (view_history_stale(impl_.get())) [[unlikely]]
    refresh_view_history(impl_.get(), true);
  return impl_->autograd ? impl_->autograd->grad_fn : Ref<Node>();
}

void Tensor::retain_grad() {
  DG_CHECK(requires_grad(), Runtime, "[retain_grad] can't retain_grad on Tensor that has requires_grad=False");
  if (is_leaf()) return;
  if (impl_->autograd->retains_grad) return;
  impl_->autograd->retains_grad = true;
  Node& node = *impl_->autograd->grad_fn;
  if (node.retained_outputs.size() < node.num_outputs) node.retained_outputs.resize(node.num_outputs);
  node.retained_outputs[impl_->autograd->output_nr] = impl_.get();  // weak
}

void Tensor::register_hook(TensorHook hook) {
  DG_CHECK(requires_grad(), Runtime,
           "[register_hook] cannot register a hook on a tensor that doesn't require gradient");
  if (is_leaf()) {
    impl_->autograd->leaf_hooks.push_back(std::move(hook));
    return;
  }
  Node& node = *impl_->autograd->grad_fn;
  if (node.output_hooks.size() < node.num_outputs) node.output_hooks.resize(node.num_outputs);
  node.output_hooks[impl_->autograd->output_nr].push_back(std::move(hook));
}

uint64_t Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) {
  DG_CHECK(is_leaf(), Runtime, "[register_post_accumulate_grad_hook] post accumulate grad hooks cannot be registered "
           "on non-leaf tensors");
  DG_CHECK(requires_grad(), Runtime, "[register_post_accumulate_grad_hook] cannot register a hook on a tensor that "
           "doesn't require gradient");
  static std::atomic<uint64_t> next_id{0};
  const uint64_t id = ++next_id;
  impl_->autograd->post_accumulate_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t id) {
  if (!impl_->autograd) return;
  std::erase_if(impl_->autograd->post_accumulate_hooks, [id](const auto& h) { return h.first == id; });
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  Tensor roots[1] = {*this};
  Tensor grads[1] = {gradient};
  dg::backward(roots, grads, retain_graph, create_graph);
}

}  // namespace dg
