// Autograd graph: one Node per differentiable op call, holding what its backward needs (saved tensors
// with their versions, attributes, input metadata) and an Edge to the producer of each input. The engine
// (engine.h) walks it once and frees it unless retain_graph. See docs/autograd.md.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_def.h"

namespace dg {

class Node;

// Where an input's gradient goes: the node that produced it (and which of its outputs), or a leaf
// tensor whose .grad accumulates it.
struct Edge {
  Ref<Node> node;
  uint32_t output_nr = 0;
  Ref<TensorImpl> leaf;
  bool valid() const { return static_cast<bool>(node) || static_cast<bool>(leaf); }
};

// A saved tensor handed to a pack hook (torch.autograd.graph.saved_tensors_hooks): the node keeps what the
// hook returned and unpacks it when the backward reads it.
class PackedTensor {
 public:
  virtual ~PackedTensor() = default;
  virtual Tensor unpack() = 0;
};
using PackHook = std::function<std::shared_ptr<PackedTensor>(const Tensor&)>;
// The innermost installed hook applies (thread-local, as torch's). Ops run inside a pack or unpack hook
// save their tensors as they are (no recursion into the hook), unless the hook installed hooks of its own:
// those apply (a "hook floor": only the hooks active when the pack or unpack started are suppressed).
void push_saved_tensor_hook(PackHook hook);
void pop_saved_tensor_hook();

// Rematerialized saves: a node that saves (directly, no pack hook) an unmodified, whole output of an op whose table
// entry has `rematerialize` (rms_norm) keeps that output's producer node instead of the tensor, and its backward
// reads the output recomputed from the producer's own saved tensors. The producer keeps them anyway for its
// backward, which runs after this node's, so the output's memory is freed as soon as the program drops it: a
// norm followed by a linear layer holds its input once, not its input and its output (docs/autograd.md,
// "Rematerialized saves"). Not when the output was modified in place before the save (version 0 only).
struct SavedTensor {
  Tensor tensor;
  uint32_t version = 0;
  std::shared_ptr<PackedTensor> packed;  // set instead of `tensor` when a pack hook took it
  Ref<Node> producer;                    // set instead of `tensor`: output `output_nr` of this node, recomputed
  uint32_t output_nr = 0;
};

struct InputMeta {
  Dims shape;
  DType dtype = DType::Float32;
  Device device = Device::cpu();
};

class Node : public RefCounted {
 public:
  // For an op in the table; `name` defaults to the op's name.
  explicit Node(const OpDef* op, size_t num_outputs = 1);
  // For backward formulas that are not a single OpDef (custom functions, composite ops).
  Node(std::string name, BackwardFn backward, size_t num_outputs = 1);
  // Frees the chain of nodes only this one keeps alive iteratively, not by recursion: a graph 1M ops deep
  // would overflow the stack (docs/autograd.md, "Freeing the graph").
  ~Node() override;

  const char* name() const { return name_.empty() ? op_->name : name_.c_str(); }
  // torch's node name: "add_scalar" -> "AddScalarBackward0"; a Python autograd.Function's node keeps its
  // own name ("MyFunctionBackward").
  std::string display_name() const;
  bool named_as_is = false;
  // The forward call that recorded this node, kept while anomaly mode is on (for its NaN errors).
  CallSite forward_site;
  const OpDef* op() const { return op_; }

  // Graph structure.
  std::vector<Edge> next;             // one per input
  std::vector<InputMeta> input_meta;  // shape and dtype of each input, for reducing broadcast grads
  size_t num_outputs;
  bool needs_grad(size_t input) const { return input < next.size() && next[input].valid(); }

  // Backward state.
  Attrs attrs;
  void save(const Tensor& t);                 // saved in order; read back with saved(i)
  size_t num_saved() const { return saved_.size(); }
  Tensor saved(size_t i) const;               // checks the version: raises if modified in place since
  // Whether slot i holds its tensor itself (not a pack hook's record, not a rematerialized output): the slot is
  // then one more owner of what saved(i) returns (autograd/saved_buffers.h).
  bool holds_saved(size_t i) const { return i < saved_.size() && saved_[i].tensor.defined(); }
  // saved(i) when it is this node's output `output_nr`, saved detached (with its own grad_fn it would be a
  // reference cycle): while backward records a graph (create_graph) it comes back with this node as its
  // history, as torch's SavedVariable of an output, so a formula that reads it is differentiable again
  // (docs/autograd.md, "Double backward").
  Tensor saved_output(size_t i, uint32_t output_nr = 0);
  void release_saved();                       // after backward without retain_graph
  bool released() const { return released_; }

  // Hooks on this node's outputs' gradients (tensor.register_hook on a non-leaf), and retain_grad targets.
  std::vector<std::vector<TensorHook>> output_hooks;
  // retain_grad() targets, by output: weak (the tensor holds this node as its grad_fn, so a strong reference
  // would be a cycle). The tensor clears its slot when it dies or gets a new history (forget_retained).
  std::vector<TensorImpl*> retained_outputs;

  void apply(std::span<const Tensor> grad_outputs, std::span<Tensor> grad_inputs);
  // A Python/C++ custom backward stored as a closure (Node(name, nullptr)), used when BackwardFn is null.
  std::function<void(Node&, std::span<const Tensor>, std::span<Tensor>)> closure;
  // CopySlices: the in-place op's node it runs on the view's slice of the gradient; its saved tensors are
  // released with this node's (docs/autograd.md, "In-place on views").
  Ref<Node> inner;

 private:
  const OpDef* op_ = nullptr;
  std::string name_;
  BackwardFn backward_ = nullptr;
  std::vector<SavedTensor> saved_;
  bool released_ = false;
};

// Clears `impl`'s slot in its grad_fn's retain_grad() targets (it dies or its history is rebased).
void forget_retained(TensorImpl* impl, AutogradMeta& meta);

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  Ref<Node> grad_fn;   // null for leaves
  uint32_t output_nr = 0;
  bool retains_grad = false;
  std::vector<TensorHook> leaf_hooks;
  std::vector<std::pair<uint64_t, PostAccumulateHook>> post_accumulate_hooks;  // id, hook
  // The Python object `.grad` last returned, so that `x.grad is x.grad` while `grad` is the same tensor (set
  // by the binding, released through its deleter; dropped whenever `grad` is replaced).
  std::shared_ptr<void> grad_object;
};

// Grad mode: a thread-local switch (no_grad in Python).
bool grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard() : saved_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(saved_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool saved_;
};
class EnableGradGuard {
 public:
  explicit EnableGradGuard(bool on = true) : saved_(grad_enabled()) { set_grad_enabled(on); }
  ~EnableGradGuard() { set_grad_enabled(saved_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool saved_;
};

// Anomaly detection (torch.autograd.set_detect_anomaly): while on, nodes keep their forward call site and
// the engine checks every gradient a backward formula returns for NaN (a sync per gradient), raising an
// error that names the node and that call site. Process-wide, as torch's.
void set_anomaly_mode(bool enabled, bool check_nan = true);
bool anomaly_enabled();
bool anomaly_check_nan();

// --- recording, for op implementations -----------------------------------------------------------------
// True when grad mode is on and any input requires grad: the op must record a Node.
bool needs_grad_any(std::span<const Tensor> inputs);
inline bool needs_grad_any(std::initializer_list<Tensor> inputs) {
  return needs_grad_any(std::span<const Tensor>(inputs.begin(), inputs.size()));
}
// Creates the node for `op` with edges to `inputs` and makes it the grad_fn of `outputs`.
Ref<Node> record_node(const OpDef* op, std::span<const Tensor> inputs, std::span<const Tensor> outputs);
Ref<Node> record_node(Ref<Node> node, std::span<const Tensor> inputs, std::span<const Tensor> outputs);
// The edge that a gradient for `t` should follow.
Edge gradient_edge(const Tensor& t);
// Makes `node` (its output `output_nr`) the grad_fn of `t`.
void set_history(const Tensor& t, const Ref<Node>& node, uint32_t output_nr);
// --- in-place ops and views (autograd/views.cpp) ----------------------------------------------------------
// In-place ops: the tensor now holds the result of `node`, whose input 0 is the tensor's old value. On a
// view, the base's history is rebased onto a CopySlices node running `node` on the view's slice, and the
// view's grad_fn is regenerated from the base (docs/autograd.md, "In-place on views").
void rebase_history(const Tensor& t, Ref<Node> node);
// Raises if an in-place op on `t` would break autograd, under grad mode when `t` or another operand
// (`operands_require_grad`) requires grad: a leaf that requires grad, a view of one, a view made in no_grad
// mode or by a multi-output op (split, chunk, unbind).
void check_inplace(const char* op, const Tensor& t, bool operands_require_grad = false);
// A view whose storage was written since its grad_fn was computed gets it regenerated from its base (torch's
// AsStridedBackward0); `raise_if_forbidden` raises torch's error for a no-grad or multi-output view.
void refresh_view_history(TensorImpl* view, bool raise_if_forbidden);
inline bool view_history_stale(const TensorImpl* impl) {
  return impl->view_base && impl->view_version != impl->storage->version();
}

}  // namespace dg
