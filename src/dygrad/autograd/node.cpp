// Node bookkeeping, grad mode and the helpers ops use to record history.
#include "dygrad/autograd/node.h"
#include "dygrad/autograd/saved_buffers.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "dygrad/core/error.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/module_scope.h"

namespace dg {

namespace {
thread_local bool tls_grad_enabled = true;
thread_local std::vector<PackHook> tls_pack_hooks;
// Hooks below the floor do not apply: a pack or unpack hook runs with the floor at the hooks installed when it
// started, so the ops it runs save their tensors as they are, while hooks it installs itself (a checkpoint
// recomputing inside an unpack hook, as torch's) apply to the saves made under them (docs/recompute.md).
thread_local size_t tls_hook_floor = 0;
std::atomic<bool> g_anomaly_enabled{false};
std::atomic<bool> g_anomaly_check_nan{true};
}  // namespace
bool grad_enabled() { return tls_grad_enabled; }

namespace {
thread_local bool tls_saved_released_after_backward = false;
}
bool saved_released_after_backward() { return tls_saved_released_after_backward; }
void set_saved_released_after_backward(bool on) { tls_saved_released_after_backward = on; }

Tensor reuse_saved_buffer(const Tensor& t, bool directly) {
  if (!tls_saved_released_after_backward || !t.defined()) return Tensor();
  // Queued Tasks' references do not count (core/ref.h): every one of them runs before the Task that will write.
  const TensorImpl& impl = *t.impl();
  if (impl.use_count() - impl.task_use_count() != (directly ? 2 : 1) || t.is_view() || !t.is_contiguous())
    return Tensor();
  const Storage& storage = t.storage();
  if (storage.use_count() - storage.task_use_count() != 1 || storage.shared_with_host()) return Tensor();
  return detach(t);
}
void set_grad_enabled(bool on) { tls_grad_enabled = on; }

void push_saved_tensor_hook(PackHook hook) { tls_pack_hooks.push_back(std::move(hook)); }
void pop_saved_tensor_hook() {
  DG_CHECK(tls_pack_hooks.size() > tls_hook_floor, Runtime, "[saved_tensors_hooks] no hooks to pop");
  tls_pack_hooks.pop_back();
}

void set_anomaly_mode(bool enabled, bool check_nan) {
  g_anomaly_enabled = enabled;
  g_anomaly_check_nan = check_nan;
}
bool anomaly_enabled() { return g_anomaly_enabled.load(std::memory_order_relaxed); }
bool anomaly_check_nan() { return g_anomaly_check_nan.load(std::memory_order_relaxed); }

std::string Node::display_name() const {
  if (named_as_is) return name();
  std::string out;
  bool upper = true;
  for (const char* c = name(); *c; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(*c))) : *c;
    upper = false;
  }
  return out + "Backward0";
}

Node::Node(const OpDef* op, size_t num_outputs_) : num_outputs(num_outputs_), op_(op), backward_(op->backward) {}
Node::Node(std::string name, BackwardFn backward, size_t num_outputs_)
    : num_outputs(num_outputs_), name_(std::move(name)), backward_(backward) {}

namespace {
// What a dying node would release: the producers of its inputs (edges) and its saved tensors (whose
// grad_fn may be another node). Moved out unconditionally; whether each is the last reference is decided
// when it is dropped, so a node held both by an edge and by a saved tensor's grad_fn is also freed here.
struct Teardown {
  std::vector<Ref<Node>> nodes;
  std::vector<Tensor> tensors;
  void absorb(std::vector<Edge>& next, std::vector<SavedTensor>& saved) {
    for (Edge& e : next)
      if (e.node) nodes.push_back(std::move(e.node));
    for (SavedTensor& t : saved) {
      if (t.tensor.defined()) tensors.push_back(std::move(t.tensor));
      if (t.producer) nodes.push_back(std::move(t.producer));
    }
  }
};
}  // namespace

Node::~Node() {
  // Iterative: each dropped reference is the last one only after its own children were moved out, so no
  // destructor recurses more than one level (docs/autograd.md, "Freeing the graph"). A count of 1 means
  // nobody else can reach the object, so no other thread races for it.
  Teardown work;
  work.absorb(next, saved_);
  while (!work.nodes.empty() || !work.tensors.empty()) {
    if (!work.tensors.empty()) {
      Tensor t = std::move(work.tensors.back());
      work.tensors.pop_back();
      TensorImpl* impl = t.impl();
      if (impl->use_count() == 1 && impl->autograd && impl->autograd->grad_fn) {
        forget_retained(impl, *impl->autograd);  // its node may outlive it
        work.nodes.push_back(std::move(impl->autograd->grad_fn));
      }
      continue;  // t is dropped here, holding no node any more
    }
    Ref<Node> n = std::move(work.nodes.back());
    work.nodes.pop_back();
    if (n->use_count() == 1) work.absorb(n->next, n->saved_);
  }
}

namespace {
// DYGRAD_REMATERIALIZE=0 (read once) keeps every saved tensor as it is (side-by-side measurements).
bool rematerialize_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DYGRAD_REMATERIALIZE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// The node that can recompute t (autograd/node.h, "Rematerialized saves"), or null: t is a whole output of a node
// whose op rematerializes, never modified in place (a fresh output is at version 0), not a view, not shared with
// NumPy (the host could change it without a version), and that node still holds its saved tensors.
Ref<Node> rematerializable_producer(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd || !rematerialize_enabled()) return {};
  const AutogradMeta& meta = *t.impl()->autograd;
  const Node* producer = meta.grad_fn.get();
  if (!producer || !producer->op() || !producer->op()->rematerialize || producer->released()) return {};
  if (t.version() != 0 || t.is_view() || t.storage().shared_with_host()) return {};
  return meta.grad_fn;
}
}  // namespace

void Node::save(const Tensor& t) {
  if (tls_pack_hooks.size() > tls_hook_floor && t.defined()) {
    // The hook may run dygrad ops (a copy to offload); their own saves keep their tensors.
    struct Reentry {
      size_t saved = tls_hook_floor;
      Reentry() { tls_hook_floor = tls_pack_hooks.size(); }
      ~Reentry() { tls_hook_floor = saved; }
    } reentry;
    std::shared_ptr<PackedTensor> packed = tls_pack_hooks.back()(t);
    saved_.push_back({Tensor(), 0u, std::move(packed)});
    return;
  }
  if (Ref<Node> producer = rematerializable_producer(t)) {
    saved_.push_back({Tensor(), 0u, nullptr, std::move(producer), t.impl()->autograd->output_nr});
    return;
  }
  saved_.push_back({t, t.defined() ? t.version() : 0u, nullptr});
}

Tensor Node::saved(size_t i) const {
  DG_CHECK(!released_, Runtime, "[", name(), "] Trying to backward through the graph a second time (or directly "
           "access saved tensors after they have already been freed). Specify retain_graph=True if you need to "
           "backward through the graph a second time");
  const SavedTensor& s = saved_.at(i);
  if (s.packed) {
    // What the unpack hook returns is used as is: the pack hook may have copied the tensor, so its version
    // is not checked (docs/autograd.md, "Known gaps").
    struct Reentry {
      size_t saved = tls_hook_floor;
      Reentry() { tls_hook_floor = tls_pack_hooks.size(); }
      ~Reentry() { tls_hook_floor = saved; }
    } reentry;
    return s.packed->unpack();
  }
  if (s.producer) {
    DG_CHECK(!s.producer->released(), Runtime, "[", name(), "] the saved output of ", s.producer->name(),
             " is recomputed from that node's saved tensors, which were freed by an earlier backward through it; "
             "specify retain_graph=True on that backward (docs/autograd.md, \"Rematerialized saves\")");
    return s.producer->op()->rematerialize(*s.producer, s.output_nr);
  }
  if (s.tensor.defined() && s.tensor.version() != s.version)
    fail(ErrorKind::Runtime, "[", name(), "] one of the variables needed for gradient computation has been "
         "modified by an inplace operation: a tensor of shape ", s.tensor.shape(), " is at version ",
         s.tensor.version(), "; expected version ", s.version, " instead");
  return s.tensor;
}

Tensor Node::saved_output(size_t i, uint32_t output_nr) {
  Tensor y = saved(i);
  bool any_input = false;
  for (size_t k = 0; k < next.size(); ++k) any_input = any_input || needs_grad(k);
  if (!grad_enabled() || !any_input || !y.defined()) return y;
  Tensor attached = detach(y);
  set_history(attached, Ref<Node>(this), output_nr);
  return attached;
}

void Node::release_saved() {
  saved_.clear();
  saved_.shrink_to_fit();
  released_ = true;
}

void Node::apply(std::span<const Tensor> grad_outputs, std::span<Tensor> grad_inputs) {
  // A released node can still run if its formula needs no saved tensor (as in torch); saved() raises otherwise.
  if (backward_) backward_(*this, grad_outputs, grad_inputs);
  else if (closure) closure(*this, grad_outputs, grad_inputs);
  else fail(ErrorKind::Runtime, "[", name(), "] is not differentiable");
}

bool needs_grad_any(std::span<const Tensor> inputs) {
  if (!tls_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  Edge e;
  if (!t.defined() || !t.requires_grad()) return e;
  if (view_history_stale(t.impl())) refresh_view_history(t.impl(), true);  // a forbidden view raises
  AutogradMeta& meta = *t.impl()->autograd;
  if (meta.grad_fn) {
    e.node = meta.grad_fn;
    e.output_nr = meta.output_nr;
  } else {
    e.leaf = t.impl_ref();
  }
  return e;
}

void forget_retained(TensorImpl* impl, AutogradMeta& meta) {
  if (!meta.retains_grad || !meta.grad_fn) return;
  auto& slots = meta.grad_fn->retained_outputs;
  if (meta.output_nr < slots.size() && slots[meta.output_nr] == impl) slots[meta.output_nr] = nullptr;
  meta.retains_grad = false;
}

void set_history(const Tensor& t, const Ref<Node>& node, uint32_t output_nr) {
  TensorImpl* impl = t.impl();
  if (!impl->autograd) impl->autograd.reset(new AutogradMeta());
  forget_retained(impl, *impl->autograd);
  impl->autograd->requires_grad = is_differentiable(t.dtype());
  impl->autograd->grad_fn = impl->autograd->requires_grad ? node : Ref<Node>();
  impl->autograd->output_nr = output_nr;
  impl->autograd->retains_grad = false;
}

Ref<Node> record_node(Ref<Node> node, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  node->next.reserve(inputs.size());
  node->input_meta.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    node->next.push_back(gradient_edge(in));
    node->input_meta.push_back({in.defined() ? Dims(in.shape()) : Dims(), in.defined() ? in.dtype() : DType::Float32,
                                in.defined() ? in.device() : Device::cpu()});
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined()) set_history(outputs[i], node, static_cast<uint32_t>(i));
  if (anomaly_enabled()) node->forward_site = current_call_site();
  module_scope::tag_node(node.get());  // the module scope, while a profiler records (runtime/module_scope.h)
  return node;
}

Ref<Node> record_node(const OpDef* op, std::span<const Tensor> inputs, std::span<const Tensor> outputs) {
  DG_CHECK(op->backward != nullptr, Runtime, "[", op->name, "] is not differentiable");
  return record_node(make_ref<Node>(op, outputs.size()), inputs, outputs);
}

}  // namespace dg
