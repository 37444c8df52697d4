// Autograd entry points: grad mode (no_grad/enable_grad are Python context managers over these),
// dygrad.autograd.backward and dygrad.autograd.grad, the engine Node of a Python autograd.Function,
// saved-tensor hooks and anomaly mode. See docs/autograd.md.
#include <algorithm>
#include <memory>
#include <vector>

#include "common.h"
#include "dygrad/autograd/recompute_sink.h"
#include "dygrad/ops/dispatch.h"

namespace dg::py {

namespace {
// A Python callable held by C++ (a gradient hook): called with the GIL, released where the GIL is held
// (the graph may be freed on the stream worker; see release_python_object).
struct PythonCallable {
  PyObject* function;
  explicit PythonCallable(PyObject* f) : function(f) { Py_INCREF(f); }
  ~PythonCallable() { release_python_object(function); }
  PythonCallable(const PythonCallable&) = delete;
  PythonCallable& operator=(const PythonCallable&) = delete;
};

// Tensor.register_hook(hook): hook(grad) -> Tensor or None, run when the gradient of the tensor is computed.
void register_python_hook(Tensor& t, nb::handle function) {
  DG_CHECK(PyCallable_Check(function.ptr()), Type, "[register_hook] expected a callable, got ", type_name(function.ptr()));
  auto callable = std::make_shared<PythonCallable>(function.ptr());
  t.register_hook([callable](const Tensor& grad) -> Tensor {
    nb::gil_scoped_acquire gil;
    nb::object argument = wrap_object(grad);
    nb::object result = nb::steal(PyObject_CallOneArg(callable->function, argument.ptr()));
    if (!result.is_valid()) throw nb::python_error();
    if (result.is_none()) return Tensor();
    DG_CHECK(is_tensor(result.ptr()), Type, "[register_hook] the hook must return a Tensor or None, not ",
             type_name(result.ptr()));
    // torch's check of a hook's returned gradient (torch/csrc/autograd/python_hook.cpp, check_single_result).
    const Tensor& replaced = unwrap(result.ptr());
    const bool same_size = std::ranges::equal(replaced.shape(), grad.shape());
    if (!same_size || replaced.dtype() != grad.dtype()) {
      nb::object name = nb::getattr(nb::handle(callable->function), "__name__", nb::none());
      const std::string hook = name.is_none() ? std::string(nb::str(nb::handle(callable->function)).c_str())
                                              : std::string(nb::str(name).c_str());
      DG_CHECK(same_size, Runtime, "[backward] hook '", hook, "' has changed the "
               "size of value: it returned shape ", replaced.shape(), " for a gradient of shape ", grad.shape());
      fail(ErrorKind::Runtime, "[backward] hook '", hook, "' has changed the type of value (was ",
           nb::str(argument.attr("type")()).c_str(), " got ", nb::str(result.attr("type")()).c_str(), ")");
    }
    return replaced;
  });
}

std::vector<Tensor> tensor_list(const char* op, const char* argument, nb::handle seq, bool allow_none);

// --- autograd.Function ---------------------------------------------------------------------------------------
// The saved tensors of a Function's node, readable only while its backward runs (ctx.saved_tensors): the
// node outlives neither the call nor, after backward without retain_graph, its saved tensors.
struct SavedTensorsAccess {
  Node* node = nullptr;
  size_t count = 0;  // what forward saved (the node's list is emptied when the graph is freed)
  const std::vector<int32_t>* output_of = nullptr;  // per saved tensor: which output of the node it is, or -1
};

// The Node of a Python autograd.Function (dygrad/autograd/function.py): it runs in the C++ engine like any
// other node; its backward calls ctx._run_backward(saved, *grads) with the GIL held and takes one gradient
// (or None) per tensor input back. A Python exception raised there propagates out of backward() as itself.
void function_backward(const std::shared_ptr<PythonCallable>& ctx, const std::vector<int32_t>& output_of, Node& node,
                       std::span<const Tensor> grads, std::span<Tensor> grad_inputs) {
  nb::gil_scoped_acquire gil;
  nb::object access = nb::cast(SavedTensorsAccess{&node, output_of.size(), &output_of});
  struct Invalidate {
    nb::handle access;
    ~Invalidate() { nb::inst_ptr<SavedTensorsAccess>(access)->node = nullptr; }
  } invalidate{access};
  nb::list arguments;
  arguments.append(access);
  for (const Tensor& g : grads) arguments.append(wrap_object(g));  // None for an output that got no gradient
  nb::object result = nb::borrow(ctx->function).attr("_run_backward")(*nb::tuple(arguments));
  const Py_ssize_t n = PyTuple_Check(result.ptr()) ? PyTuple_GET_SIZE(result.ptr()) : -1;
  DG_CHECK(n == static_cast<Py_ssize_t>(grad_inputs.size()), Runtime, "[", node.name(),
           "] internal: expected one gradient per tensor input");
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    PyObject* g = PyTuple_GET_ITEM(result.ptr(), static_cast<Py_ssize_t>(i));
    if (g == Py_None) continue;
    DG_CHECK(is_tensor(g), Type, "[", node.name(), "] backward must return Tensors or None, got ", type_name(g),
             " for input ", i);
    if (node.needs_grad(i)) grad_inputs[i] = unwrap(g);
  }
}

// _function_record(ctx, name, inputs, outputs, saved, dirty): the node of one Function.apply call. inputs: the
// tensor arguments; outputs: one entry per output (None: no gradient flows from it); saved: what
// ctx.save_for_backward got (None allowed); dirty: the inputs marked dirty (their history moves onto the node).
void function_record(nb::handle ctx, const std::string& name, nb::handle inputs, nb::handle outputs, nb::handle saved,
                     nb::handle dirty) {
  std::vector<Tensor> ins = tensor_list(name.c_str(), "inputs", inputs, false);
  std::vector<Tensor> outs = tensor_list(name.c_str(), "outputs", outputs, true);
  std::vector<Tensor> to_save = tensor_list(name.c_str(), "saved", saved, true);
  for (const Tensor& t : tensor_list(name.c_str(), "dirty", dirty, false)) {
    check_inplace(name.c_str(), t);
    // The node may have several outputs and the view may be any input: no CopySlices for it (docs/autograd.md).
    DG_CHECK(!(grad_enabled() && t.impl()->view_base && t.requires_grad()), NotImplemented, "[", name, "] an "
             "autograd.Function that modifies a view of a tensor that requires grad in place (mark_dirty) is not "
             "supported; clone the input first");
  }
  PythonCallSite site;  // the user's apply() line, for anomaly mode
  auto callable = std::make_shared<PythonCallable>(ctx.ptr());
  Ref<Node> node = make_ref<Node>(name, nullptr, outs.size());
  node->named_as_is = true;
  // A saved output is kept detached (sharing its storage and version counter): the node it belongs to
  // holding it with its grad_fn would be a cycle. ctx.saved_tensors gives it back attached to the node
  // (Node::saved_output) while a create_graph backward runs, so the backward is differentiable through it.
  std::vector<int32_t> output_of(to_save.size(), -1);
  for (size_t i = 0; i < to_save.size(); ++i)
    for (size_t k = 0; k < outs.size() && output_of[i] < 0; ++k)
      if (to_save[i].defined() && outs[k].defined() && outs[k].impl() == to_save[i].impl()) output_of[i] = int32_t(k);
  node->closure = [callable, output_of](Node& n, std::span<const Tensor> g, std::span<Tensor> gi) {
    function_backward(callable, output_of, n, g, gi);
  };
  record_node(node, ins, outs);
  for (size_t i = 0; i < to_save.size(); ++i) node->save(output_of[i] >= 0 ? detach(to_save[i]) : to_save[i]);
}

// --- saved_tensors_hooks ----------------------------------------------------------------------------------------
// What a Python pack hook returned, unpacked by its unpack hook when the backward reads it.
struct PythonPackedTensor final : PackedTensor {
  PyObject* packed;
  std::shared_ptr<PythonCallable> unpack_hook;
  PythonPackedTensor(PyObject* p, std::shared_ptr<PythonCallable> unpack) : packed(p), unpack_hook(std::move(unpack)) {}
  ~PythonPackedTensor() override { release_python_object(packed); }
  Tensor unpack() override {
    nb::gil_scoped_acquire gil;
    nb::object result = nb::steal(PyObject_CallOneArg(unpack_hook->function, packed));
    if (!result.is_valid()) throw nb::python_error();
    DG_CHECK(is_tensor(result.ptr()), Type, "[saved_tensors_hooks] the unpack hook must return a Tensor, got ",
             type_name(result.ptr()));
    return unwrap(result.ptr());
  }
};

void push_python_saved_tensor_hooks(nb::handle pack, nb::handle unpack) {
  DG_CHECK(PyCallable_Check(pack.ptr()) && PyCallable_Check(unpack.ptr()), Type,
           "[saved_tensors_hooks] pack_hook and unpack_hook must be callables");
  auto pack_hook = std::make_shared<PythonCallable>(pack.ptr());
  auto unpack_hook = std::make_shared<PythonCallable>(unpack.ptr());
  push_saved_tensor_hook([pack_hook, unpack_hook](const Tensor& t) -> std::shared_ptr<PackedTensor> {
    nb::gil_scoped_acquire gil;
    nb::object argument = wrap_object(t);
    PyObject* packed = PyObject_CallOneArg(pack_hook->function, argument.ptr());
    if (!packed) throw nb::python_error();
    return std::make_shared<PythonPackedTensor>(packed, unpack_hook);
  });
}

// --- op observer (selective recompute, python/dygrad/utils/checkpoint.py) ----------------------------------------
// observer(op_name, inputs, outputs) -> None, or the tensors the outputs become: the Task is then not run and each
// output adopts the given tensor's storage (a result cached in the forward); an empty list skips the Task and
// leaves the outputs unwritten (a recomputation that stops before anything reads them). The observer is the policy
// of this thread's RecomputeSink (autograd/recompute_sink.h), which shows it only ops writing fresh outputs.
nb::list tensors_to_list(std::span<const Tensor> ts) {
  nb::list out;
  for (const Tensor& t : ts) out.append(t.defined() ? wrap_object(t) : nb::none());
  return out;
}

// This thread's sink: in the thread's op-sink chain while an observer is set (taken out at thread exit too).
struct ThreadRecomputeSink {
  std::unique_ptr<RecomputeSink> sink;
  void set(std::unique_ptr<RecomputeSink> next) {
    if (sink) op_sinks::remove(*sink);
    sink = std::move(next);
    if (sink) op_sinks::push(*sink);
  }
  ~ThreadRecomputeSink() { set(nullptr); }
};
thread_local ThreadRecomputeSink tls_recompute_sink;

void set_python_op_observer(nb::handle fn) {
  tls_recompute_sink.set(nullptr);
  if (fn.is_none()) return;
  DG_CHECK(PyCallable_Check(fn.ptr()), Type, "[_set_op_observer] expected a callable or None, got ",
           type_name(fn.ptr()));
  auto callable = std::make_shared<PythonCallable>(fn.ptr());
  auto policy = [callable](const OpCall& call, std::vector<Tensor>& cached) {
    nb::gil_scoped_acquire gil;
    nb::object name = nb::str(call.op.name);
    nb::object ins = tensors_to_list(call.inputs), outs = tensors_to_list(call.outputs);
    nb::object result = nb::steal(PyObject_CallFunctionObjArgs(callable->function, name.ptr(), ins.ptr(), outs.ptr(),
                                                               nullptr));
    if (!result.is_valid()) throw nb::python_error();
    if (result.is_none()) return RecomputeSink::Decision::Run;
    cached = tensor_list(call.op.name, "cached outputs", result, false);
    return cached.empty() ? RecomputeSink::Decision::Skip : RecomputeSink::Decision::Adopt;
  };
  tls_recompute_sink.set(std::make_unique<RecomputeSink>(std::move(policy)));
}

std::vector<Tensor> tensor_list(const char* op, const char* argument, nb::handle seq, bool allow_none) {
  std::vector<Tensor> out;
  if (seq.is_none()) return out;
  if (is_tensor(seq.ptr())) {
    out.push_back(unwrap(seq.ptr()));
    return out;
  }
  for (nb::handle item : seq) {
    if (allow_none && item.is_none()) {
      out.emplace_back();
      continue;
    }
    const Tensor* t = to_tensor(op, argument, item.ptr());
    if (!t) throw nb::python_error();
    out.push_back(*t);
  }
  return out;
}
}  // namespace

void init_autograd(nb::module_& m) {
  nb::setattr(nb::handle(reinterpret_cast<PyObject*>(tensor_type)), "register_hook",
              nb::cpp_function([](Tensor& t, nb::handle hook) { register_python_hook(t, hook); }, nb::is_method(),
                               nb::name("register_hook"), nb::arg("hook")));
  // Tensor.register_post_accumulate_grad_hook (python/dygrad/_tensor.py wraps it in a RemovableHandle):
  // hook(tensor) after backward has accumulated into tensor.grad.
  m.def("_register_post_accumulate_grad_hook", [](Tensor& t, nb::handle hook) {
    DG_CHECK(PyCallable_Check(hook.ptr()), Type, "[register_post_accumulate_grad_hook] expected a callable, got ",
             type_name(hook.ptr()));
    auto callable = std::make_shared<PythonCallable>(hook.ptr());
    return t.register_post_accumulate_grad_hook([callable](const Tensor& leaf) {
      nb::gil_scoped_acquire gil;
      nb::object argument = wrap_object(leaf);
      nb::object result = nb::steal(PyObject_CallOneArg(callable->function, argument.ptr()));
      if (!result.is_valid()) throw nb::python_error();
      DG_CHECK(result.is_none(), Runtime, "[register_post_accumulate_grad_hook] the hook must return None, not ",
               type_name(result.ptr()));
    });
  }, nb::arg("tensor"), nb::arg("hook"));
  m.def("_remove_post_accumulate_grad_hook", [](Tensor& t, uint64_t id) { t.remove_post_accumulate_grad_hook(id); });
  m.def("is_grad_enabled", [] { return grad_enabled(); });
  nb::class_<SavedTensorsAccess>(m, "_SavedTensorsAccess")
      .def("unpack", [](const SavedTensorsAccess& s) {
        DG_CHECK(s.node, Runtime, "[saved_tensors] saved tensors can be read only while the backward runs");
        nb::list out;
        for (size_t i = 0; i < s.count; ++i) {  // raises once freed
          const int32_t output_nr = (*s.output_of)[i];
          out.append(wrap_object(output_nr >= 0 ? s.node->saved_output(i, uint32_t(output_nr)) : s.node->saved(i)));
        }
        return nb::tuple(out);
      });
  m.def("_function_record", &function_record, nb::arg("ctx"), nb::arg("name"), nb::arg("inputs"),
        nb::arg("outputs"), nb::arg("saved"), nb::arg("dirty"));
  m.def("_push_saved_tensors_hooks", &push_python_saved_tensor_hooks, nb::arg("pack_hook"), nb::arg("unpack_hook"));
  m.def("_pop_saved_tensors_hooks", [] { pop_saved_tensor_hook(); });
  m.def("_set_op_observer", &set_python_op_observer, nb::arg("observer").none());
  m.def("_set_anomaly_enabled", [](bool on, bool check_nan) { set_anomaly_mode(on, check_nan); }, nb::arg("mode"),
        nb::arg("check_nan") = true);
  m.def("is_anomaly_enabled", [] { return anomaly_enabled(); });
  m.def("is_anomaly_check_nan_enabled", [] { return anomaly_check_nan(); });
  m.def("_set_grad_enabled", [](bool on) { set_grad_enabled(on); }, nb::arg("mode"));
  m.def("_backward", [](nb::handle tensors, nb::handle grad_tensors, bool retain_graph, bool create_graph) {
    std::vector<Tensor> roots = tensor_list("backward", "tensors", tensors, false);
    std::vector<Tensor> grads = tensor_list("backward", "grad_tensors", grad_tensors, true);
    if (grads.empty()) grads.resize(roots.size());
    DG_CHECK(grads.size() == roots.size(), Runtime, "[backward] got ", roots.size(), " tensors and ", grads.size(),
             " gradients");
    PythonCallSite site;
    backward(roots, grads, retain_graph, create_graph);
  }, nb::arg("tensors"), nb::arg("grad_tensors").none(), nb::arg("retain_graph"), nb::arg("create_graph"));
  m.def("_grad", [](nb::handle outputs, nb::handle inputs, nb::handle grad_outputs, bool retain_graph,
                    bool create_graph, bool allow_unused) {
    std::vector<Tensor> outs = tensor_list("grad", "outputs", outputs, false);
    std::vector<Tensor> ins = tensor_list("grad", "inputs", inputs, false);
    std::vector<Tensor> grads = tensor_list("grad", "grad_outputs", grad_outputs, true);
    if (grads.empty()) grads.resize(outs.size());
    DG_CHECK(grads.size() == outs.size(), Runtime, "[grad] got ", outs.size(), " outputs and ", grads.size(),
             " grad_outputs");
    PythonCallSite site;
    std::vector<Tensor> result = grad(outs, ins, grads, retain_graph, create_graph, allow_unused);
    nb::list out;
    for (Tensor& t : result) out.append(wrap_object(std::move(t)));
    return nb::tuple(out);
  }, nb::arg("outputs"), nb::arg("inputs"), nb::arg("grad_outputs").none(), nb::arg("retain_graph"),
     nb::arg("create_graph"), nb::arg("allow_unused"));
}

}  // namespace dg::py
