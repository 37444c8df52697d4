// Autograd entry points: grad mode (no_grad/enable_grad are Python context managers over these),
// dygrad.autograd.backward and dygrad.autograd.grad.
#include <memory>
#include <vector>

#include "common.h"

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
    return unwrap(result.ptr());
  });
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
