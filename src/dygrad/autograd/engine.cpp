// The backward engine (see engine.h and docs/autograd.md). Single pass: count each node's dependants
// below the roots, then run nodes whose gradients are complete, summing gradients that meet.
#include "dygrad/runtime/op_sink.h"
#include "dygrad/autograd/engine.h"

#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "dygrad/autograd/node.h"
#include "dygrad/autograd/saved_buffers.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/allocator.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/module_scope.h"

namespace dg {

namespace {
struct GraphRun {
  bool retain_graph = false;
  bool create_graph = false;
  bool accumulate = true;  // false for autograd.grad: gradients are captured, .grad untouched
  // Captures for autograd.grad: leaves by impl, non-leaves by (node, output_nr).
  std::unordered_map<TensorImpl*, size_t> leaf_capture;
  std::unordered_map<const Node*, std::vector<std::pair<uint32_t, size_t>>> node_capture;
  std::vector<Tensor> captured;
  std::unordered_set<const Node*> needed;  // when capturing: only nodes that lead to an input
  // A gradient buffer taken as a leaf's .grad may still be read by formulas that run later in this pass
  // (a pass-through gradient such as add's feeds several edges): such leaves accumulate out of place for
  // the rest of the pass. Hooks could keep a gradient too, so with hooks in the graph nothing is taken.
  bool graph_has_hooks = false;
  std::unordered_set<TensorImpl*> taken;
};

Tensor sum_grads(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

// A hook may replace a gradient, not change its shape (torch: "hook ... has changed the size of value").
const Tensor& checked_hook_result(const Tensor& replaced, const Tensor& original) {
  DG_CHECK(same_shape(replaced.shape(), original.shape()), Runtime, "[backward] a hook has changed the size of "
           "the gradient: it returned shape ", replaced.shape(), " for a gradient of shape ", original.shape());
  return replaced;
}

void accumulate_leaf(GraphRun& run, const Ref<TensorImpl>& leaf_impl, Tensor g) {
  Tensor leaf(leaf_impl);
  AutogradMeta& meta = *leaf_impl->autograd;
  for (TensorHook& hook : meta.leaf_hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = checked_hook_result(replaced, g);
  }
  if (!run.accumulate) {
    auto it = run.leaf_capture.find(leaf_impl.get());
    if (it != run.leaf_capture.end()) run.captured[it->second] = sum_grads(run.captured[it->second], g);
    return;
  }
  if (g.dtype() != leaf.dtype()) g = to(g, leaf.dtype());
  if (!meta.grad.defined()) {
    // Take the gradient's buffer as .grad when no other tensor views its memory (no copy: this is every
    // parameter's gradient, every step); otherwise copy it. The Task that produced it may still hold the
    // gradient's TensorImpl, so its reference count cannot decide this (docs/autograd.md, "Gradient buffers").
    const bool take = !run.create_graph && !run.graph_has_hooks && g.is_contiguous() && !g.is_view() &&
                      g.storage().use_count() == 1 && !g.storage().shared_with_host();
    Tensor stored = run.create_graph ? g : (take ? detach(g) : [&] {
      MemoryCategoryScope scope(MemoryCategory::Gradient);
      return clone(detach(g));
    }());
    if (take) run.taken.insert(leaf_impl.get());
    if (!run.create_graph) stored.storage().set_category(MemoryCategory::Gradient);
    meta.grad = stored;
  } else if (run.create_graph || meta.grad.requires_grad() || run.taken.count(leaf_impl.get())) {
    meta.grad = add(meta.grad, g);
    meta.grad_object.reset();  // a new tensor: `.grad` returns a new Python object
    if (!run.create_graph) meta.grad.storage().set_category(MemoryCategory::Gradient);  // a new buffer
  } else {
    NoGradGuard no_grad;
    add_(meta.grad, g);
  }
  // Post-accumulate hooks (data parallel launches its buckets from them): by index, since a hook may add one.
  for (size_t i = 0; i < meta.post_accumulate_hooks.size(); ++i) {
    PostAccumulateHook hook = meta.post_accumulate_hooks[i].second;
    hook(leaf);
  }
}

// Anomaly mode: a gradient holding NaN raises, naming the node and the forward call that recorded it
// (torch: "Function 'DivBackward0' returned nan values in its 0th output.").
void check_anomaly(const Node& node, std::span<const Tensor> grad_inputs) {
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    const Tensor& g = grad_inputs[i];
    if (!g.defined() || !is_floating(g.dtype()) || g.numel() == 0) continue;
    NoGradGuard no_grad;
    HostReadScope read("detect_anomaly");
    if (sum(ne(g, g)).item_scalar().to_int() == 0) continue;
    const CallSite& site = node.forward_site;
    fail(ErrorKind::Runtime, "[backward] Function '", node.display_name(), "' returned nan values in its ", i,
         "th output. ", site.file ? "The forward call that created it: " : "Its forward call site is unknown (it "
         "ran before anomaly mode was enabled)", site.file ? site.file : "", site.file ? ":" : "",
         site.file ? std::to_string(site.line) : std::string(), site.file ? ", in " : "",
         site.file && site.function ? site.function : "");
  }
}

// Marks the nodes from which a captured input is reachable (autograd.grad computes nothing else).
// Iterative post-order walk: a graph a million nodes deep must not overflow the stack.
void mark_needed(const Node* root, GraphRun& run, std::unordered_map<const Node*, bool>& memo) {
  if (memo.count(root)) return;
  std::vector<std::pair<const Node*, size_t>> stack{{root, 0}};  // node, next edge to visit
  memo[root] = false;
  while (!stack.empty()) {
    auto& [node, edge] = stack.back();
    if (edge < node->next.size()) {
      const Node* child = node->next[edge++].node.get();
      if (child && memo.emplace(child, false).second) stack.push_back({child, 0});
      continue;
    }
    bool needed = run.node_capture.count(node) > 0;
    for (const Edge& e : node->next) {
      if (e.leaf && run.leaf_capture.count(e.leaf.get())) needed = true;
      if (e.node && memo[e.node.get()]) needed = true;
    }
    memo[node] = needed;
    if (needed) run.needed.insert(node);
    stack.pop_back();
  }
}

// The pass's schedule: how many gradient contributions each node still waits for, the contributions gathered
// for each node's outputs, and the nodes whose contributions are all in (run first in, first out).
// A leaf gathers its contributions like a node (torch's AccumulateGrad): its hooks see, and its .grad gets, the
// sum of every use's gradient once, when the last use's is in; post-accumulate hooks (data parallel's buckets)
// fire once per pass with the whole gradient.
struct Schedule {
  std::unordered_map<const Node*, int> deps;
  std::unordered_map<const Node*, std::vector<Tensor>> buffers;
  std::unordered_map<const TensorImpl*, int> leaf_deps;
  std::unordered_map<const TensorImpl*, Tensor> leaf_buffers;
  std::deque<Ref<Node>> ready;
};

bool leaf_has_hooks(const Edge& e) { return e.leaf && e.leaf->autograd && !e.leaf->autograd->leaf_hooks.empty(); }

// 1. Dependencies: how many gradient contributions each node and each leaf waits for. Notes on the way whether
// any hook or retain_grad() target is in the graph (then no gradient buffer is taken as a leaf's .grad).
void count_dependencies(GraphRun& run, std::span<const Edge> root_edges, Schedule& schedule) {
  std::unordered_map<const Node*, int>& deps = schedule.deps;
  std::vector<Node*> stack;
  std::unordered_set<const Node*> seen;
  for (const Edge& e : root_edges) {
    if (leaf_has_hooks(e)) run.graph_has_hooks = true;
    if (e.leaf) ++schedule.leaf_deps[e.leaf.get()];
    if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const auto& hooks : n->output_hooks)
      if (!hooks.empty()) run.graph_has_hooks = true;
    if (!n->retained_outputs.empty()) run.graph_has_hooks = true;
    for (const Edge& e : n->next) {
      if (leaf_has_hooks(e)) run.graph_has_hooks = true;
      if (e.leaf) ++schedule.leaf_deps[e.leaf.get()];
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
}

// One contribution to a leaf's gradient: summed into its buffer; the last one accumulates the sum.
void pass_leaf_grad(GraphRun& run, Schedule& schedule, const Ref<TensorImpl>& leaf, const Tensor& g) {
  Tensor& buffer = schedule.leaf_buffers[leaf.get()];
  if (g.defined()) buffer = sum_grads(buffer, g);
  if (--schedule.leaf_deps[leaf.get()] > 0) return;
  Tensor total = std::move(buffer);
  schedule.leaf_buffers.erase(leaf.get());
  if (total.defined()) accumulate_leaf(run, leaf, std::move(total));
}

// 2. Seed the roots: a leaf root contributes its gradient, a node root gets its gradient in its buffer; root
// nodes that wait for nothing more are ready, in the order of the roots, each once.
void seed_roots(GraphRun& run, std::span<const Edge> root_edges, std::span<const Tensor> root_grads,
                Schedule& schedule) {
  for (size_t i = 0; i < root_edges.size(); ++i) {
    const Edge& e = root_edges[i];
    if (e.leaf) {
      pass_leaf_grad(run, schedule, e.leaf, root_grads[i]);
      continue;
    }
    auto& buf = schedule.buffers[e.node.get()];
    buf.resize(e.node->num_outputs);
    buf[e.output_nr] = sum_grads(buf[e.output_nr], root_grads[i]);
  }
  std::deque<Ref<Node>>& ready = schedule.ready;
  for (const Edge& e : root_edges)
    if (e.node && schedule.deps[e.node.get()] == 0 && std::find(ready.begin(), ready.end(), e.node) == ready.end())
      ready.push_back(e.node);
}

// The gradients of a node's outputs, taken out of the schedule (an output that got none: undefined), after
// the hooks registered on each output (register_hook on a non-leaf; a hook may return a replacement).
std::vector<Tensor> take_output_grads(Schedule& schedule, Node& node) {
  std::vector<Tensor> grads = std::move(schedule.buffers[&node]);
  schedule.buffers.erase(&node);
  grads.resize(node.num_outputs);
  for (size_t k = 0; k < node.output_hooks.size() && k < grads.size(); ++k)
    for (TensorHook& hook : node.output_hooks[k])
      if (grads[k].defined()) {
        Tensor replaced = hook(grads[k]);
        if (replaced.defined()) grads[k] = checked_hook_result(replaced, grads[k]);
      }
  return grads;
}

// Hands a node's output gradients to the retain_grad() targets (backward) and to the captures (autograd.grad).
void record_output_grads(GraphRun& run, const Node& node, const std::vector<Tensor>& grads) {
  for (size_t k = 0; k < node.retained_outputs.size() && k < grads.size(); ++k)
    if (node.retained_outputs[k] && grads[k].defined() && run.accumulate) {
      AutogradMeta& meta = *node.retained_outputs[k]->autograd;
      meta.grad = meta.grad.defined() ? add(meta.grad, grads[k])
                                      : (run.create_graph ? grads[k] : detach(grads[k]));
      meta.grad_object.reset();
    }
  if (auto cap = run.node_capture.find(&node); cap != run.node_capture.end())
    for (auto [output_nr, slot] : cap->second) run.captured[slot] = sum_grads(run.captured[slot], grads[output_nr]);
}

// The formula may write a gradient into a saved tensor's memory when the node's saves die after it
// (autograd/saved_buffers.h); restored after, for a backward nested in a formula.
struct SavedReleaseScope {
  bool saved = saved_released_after_backward();
  explicit SavedReleaseScope(bool on) { set_saved_released_after_backward(on); }
  ~SavedReleaseScope() { set_saved_released_after_backward(saved); }
};

// The node's input gradients, one per edge (undefined where it gives none): its formula runs unless no output
// got a gradient or autograd.grad needs nothing from it; anomaly mode checks what it returned.
std::vector<Tensor> apply_formula(const GraphRun& run, Node& node, const std::vector<Tensor>& grads) {
  bool skip = !run.accumulate && !run.needed.count(&node);
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  std::vector<Tensor> grad_inputs(node.next.size());
  // Backward formulas of multi-output ops treat an undefined output gradient as zeros.
  if (!skip && any) {
    SavedReleaseScope release_scope(!run.retain_graph);
    node.apply(grads, grad_inputs);
    if (anomaly_enabled() && anomaly_check_nan()) check_anomaly(node, grad_inputs);
  }
  return grad_inputs;
}

// Passes the node's gradient for input i along its edge, after checking its shape against the input's and
// casting it to a floating input's dtype: into a leaf's .grad, or into the next node's buffer (that node is
// ready when this was its last awaited contribution).
void pass_input_grad(GraphRun& run, Schedule& schedule, const Node& node, size_t i, Tensor& g) {
  const Edge& e = node.next[i];
  if (!e.valid()) return;
  if (g.defined() && i < node.input_meta.size()) {
    const InputMeta& meta = node.input_meta[i];
    DG_CHECK(same_shape(g.shape(), meta.shape), Runtime, "[", node.name(), "] backward returned a gradient of shape ",
             g.shape(), " for an input of shape ", IntSpan(meta.shape));
    DG_CHECK(g.device() == meta.device, Runtime, "[", node.name(), "] invalid gradient at index ", i,
             " - expected device ", meta.device.str(), " but got ", g.device().str());
    if (g.dtype() != meta.dtype && is_differentiable(meta.dtype)) g = to(g, meta.dtype);
  }
  if (e.leaf) {
    pass_leaf_grad(run, schedule, e.leaf, g);
    return;
  }
  auto& buf = schedule.buffers[e.node.get()];
  buf.resize(e.node->num_outputs);
  if (g.defined()) buf[e.output_nr] = sum_grads(buf[e.output_nr], g);
  if (--schedule.deps[e.node.get()] == 0) schedule.ready.push_back(e.node);
}

// 3. Runs one node whose contributions are all in: its output hooks, retain_grad() targets and captures, its
// formula, the release of its saved tensors (unless retain_graph), then its input gradients along its edges.
void run_node(GraphRun& run, Schedule& schedule, const Ref<Node>& node) {
  // While a profiler records, the node's Tasks (and the leaf accumulations it feeds) belong to the module
  // its forward op ran in (runtime/module_scope.h).
  module_scope::NodeScope scope(node.get());
  std::vector<Tensor> grads = take_output_grads(schedule, *node);
  record_output_grads(run, *node, grads);
  std::vector<Tensor> grad_inputs = apply_formula(run, *node, grads);
  // retain_grad() targets are weak (Node::retained_outputs): they stay, so a second backward through a
  // node that saved nothing accumulates into them again, as in torch.
  if (!run.retain_graph) {
    node->release_saved();
    if (node->inner) node->inner->release_saved();  // CopySlices: the in-place op's node it ran
  }
  for (size_t i = 0; i < node->next.size(); ++i) pass_input_grad(run, schedule, *node, i, grad_inputs[i]);
}

void execute(GraphRun& run, std::span<const Edge> root_edges, std::span<const Tensor> root_grads) {
  EnableGradGuard grad_mode(run.create_graph);
  Schedule schedule;
  count_dependencies(run, root_edges, schedule);
  if (!run.accumulate) {
    std::unordered_map<const Node*, bool> memo;
    for (const Edge& e : root_edges)
      if (e.node) mark_needed(e.node.get(), run, memo);
  }
  seed_roots(run, root_edges, root_grads, schedule);
  // Nodes run in dependency order, each once.
  while (!schedule.ready.empty()) {
    Ref<Node> node = schedule.ready.front();
    schedule.ready.pop_front();
    run_node(run, schedule, node);
  }
}

Tensor root_grad(const Tensor& root, const Tensor& given, size_t index, bool create_graph) {
  if (given.defined()) {
    DG_CHECK(same_shape(given.shape(), root.shape()), Runtime, "[backward] Mismatch in shape: grad_output[", index,
             "] has a shape of ", given.shape(), " and output[", index, "] has a shape of ", root.shape());
    // A private copy: the engine may take it as a leaf's .grad. With create_graph the copy is recorded (a
    // double backward differentiates through grad_outputs: gradgradcheck, gradient penalties).
    if (create_graph) {
      EnableGradGuard grad_mode;
      return clone(given);
    }
    return clone(detach(given));
  }
  DG_CHECK(root.numel() == 1, Runtime, "[backward] grad can be implicitly created only for scalar outputs, got shape ",
           root.shape());
  return ones_like(root);
}
}  // namespace

void backward(std::span<const Tensor> roots, std::span<const Tensor> grad_roots, bool retain_graph, bool create_graph) {
  GraphRun run;
  run.retain_graph = retain_graph || create_graph;
  run.create_graph = create_graph;
  std::vector<Edge> edges;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    DG_CHECK(roots[i].defined() && roots[i].requires_grad(), Runtime, "[backward] element ", i,
             " of tensors does not require grad and does not have a grad_fn");
    edges.push_back(gradient_edge(roots[i]));
    grads.push_back(root_grad(roots[i], i < grad_roots.size() ? grad_roots[i] : Tensor(), i, create_graph));
  }
  execute(run, edges, grads);
}

std::vector<Tensor> grad(std::span<const Tensor> outputs, std::span<const Tensor> inputs,
                         std::span<const Tensor> grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  GraphRun run;
  run.retain_graph = retain_graph || create_graph;
  run.create_graph = create_graph;
  run.accumulate = false;
  run.captured.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    DG_CHECK(inputs[i].defined() && inputs[i].requires_grad(), Runtime, "[grad] One of the differentiated Tensors "
             "does not require grad");
    if (inputs[i].is_leaf()) run.leaf_capture[inputs[i].impl()] = i;
    else run.node_capture[inputs[i].grad_fn().get()].push_back({inputs[i].impl()->autograd->output_nr, i});
  }
  std::vector<Edge> edges;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    DG_CHECK(outputs[i].defined() && outputs[i].requires_grad(), Runtime, "[grad] element ", i,
             " of tensors does not require grad and does not have a grad_fn");
    edges.push_back(gradient_edge(outputs[i]));
    grads.push_back(root_grad(outputs[i], i < grad_outputs.size() ? grad_outputs[i] : Tensor(), i, create_graph));
  }
  execute(run, edges, grads);
  for (size_t i = 0; i < inputs.size(); ++i) {
    DG_CHECK(run.captured[i].defined() || allow_unused, Runtime, "[grad] One of the differentiated Tensors appears "
             "to not have been used in the graph. Set allow_unused=True if this is the desired behavior.");
    if (run.captured[i].defined() && !create_graph) run.captured[i] = detach(run.captured[i]);
  }
  return run.captured;
}

}  // namespace dg
