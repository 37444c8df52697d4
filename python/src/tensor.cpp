// The Tensor class: metadata properties, autograd accessors, host access (item, tolist; numpy() lives in
// interop.cpp) and Python protocol methods. Ops are added as FASTCALL methods by the ops_*.cpp files.
#include <cmath>
#include <cctype>
#include <string>

#include <algorithm>
#include <stdexcept>

#include "common.h"
#include "dygrad/ops/complex.h"
#include "dygrad/ops/device.h"
#include "dygrad/core/storage_hooks.h"

namespace dg::py {

const PyType_Slot* number_slots();  // ops_arithmetic.cpp: operators + - * / and their in-place forms
const PyType_Slot* mapping_slots();  // indexing.cpp: x[...] and x[...] = v
const PyType_Slot* math_operator_slots();  // ops_math.cpp: ** and the comparisons (tp_richcompare)
const PyType_Slot* linalg_operator_slots();  // ops_linalg.cpp: @ and @=

namespace {
PyObject* g_size_type = nullptr;  // dygrad.Size, set from Python (dygrad/__init__.py); a tuple until then
PyObject* g_cpu_device = nullptr;  // dygrad.device("cpu"), set from Python; the string "cpu" until then
PyObject* g_meta_device = nullptr;  // dygrad.device("meta"), a meta tensor's (meta::is_meta_storage)
PyObject* g_device_class = nullptr;  // dygrad.device, for the other devices' objects

nb::object device_object(const Tensor& t) {
  if (g_meta_device && meta::is_meta_storage(&t.storage())) [[unlikely]] return nb::borrow(g_meta_device);
  if (g_cpu_device && t.device().type == Device::Type::CPU) return nb::borrow(g_cpu_device);
  if (g_device_class) return nb::borrow(g_device_class)(nb::str(t.device().str().c_str()));
  return nb::str(t.device().str().c_str());
}

// Tensor.new_empty/new_zeros/new_ones(*size, *, dtype=None, device=None, requires_grad=False) and
// new_full(size, fill_value, ...): a new tensor with self's dtype and device unless dtype= / device= say otherwise
// (never its shape).
enum class NewFill { Empty, Zeros, Ones, Full };
template <NewFill kind>
PyObject* new_factory(const char* op, PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  PyObject* fill_value = nullptr;
  if (!parse_factory_options(op, args + nargs, kwnames, o, false, {"fill_value"}, &fill_value)) return nullptr;
  if (kind != NewFill::Full && fill_value) return type_error(op, "got an unexpected keyword argument 'fill_value'");
  Dims shape;
  Scalar value = kind == NewFill::Ones ? Scalar(1) : Scalar(0);
  if constexpr (kind == NewFill::Full) {
    if (nargs > 2) return type_error(op, "takes 2 positional arguments but %zd were given", nargs);
    if (nargs >= 1) o.size = args[0];
    if (nargs == 2) fill_value = args[1];
    if (!o.size) return type_error(op, "missing required argument 'size'");
    if (!fill_value) return type_error(op, "missing required argument 'fill_value'");
    if (!PyTuple_Check(o.size) && !PyList_Check(o.size))  // dygrad.Size is a tuple
      return type_error(op, "argument 'size' must be a tuple of ints, not %s", type_name(o.size));
    if (!to_int_list(op, "size", o.size, shape) || !to_scalar_argument(op, "fill_value", fill_value, 0, value))
      return nullptr;
  } else if (!factory_shape(op, args, nargs, o, shape)) {
    return nullptr;
  }
  TensorOptions options;
  const Device self_device = unwrap(self).device();
  if (!resolve_factory_options(op, o, unwrap(self).dtype(), options, &self_device)) return nullptr;
  return guarded([&] {
    if constexpr (kind == NewFill::Empty) return wrap(empty(shape, options));
    else return wrap(full(shape, value, options));
  });
}
PyObject* new_empty_entry(PyObject* s, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return new_factory<NewFill::Empty>("new_empty", s, a, n, k);
}
PyObject* new_zeros_entry(PyObject* s, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return new_factory<NewFill::Zeros>("new_zeros", s, a, n, k);
}
PyObject* new_ones_entry(PyObject* s, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return new_factory<NewFill::Ones>("new_ones", s, a, n, k);
}
PyObject* new_full_entry(PyObject* s, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return new_factory<NewFill::Full>("new_full", s, a, n, k);
}

// Tensor.type_as(other): self cast to other's dtype (self itself when they match, as torch).
PyObject* type_as_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("type_as", {"self", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("type_as", "self", a[0]);
  const Tensor* other = input ? to_tensor("type_as", "other", a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] {
    Tensor out = to(*input, other->dtype());
    return out.impl() == input->impl() ? Py_NewRef(a[0]) : wrap(std::move(out));
  });
}

// Tensor.view_as(other) / expand_as(other): view / expand to other's shape.
template <bool IsView>
PyObject* shape_as_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsView ? "view_as" : "expand_as";
  static const Signature sig(name, {"self", "other"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "self", a[0]);
  const Tensor* other = input ? to_tensor(name, "other", a[1]) : nullptr;
  if (!other) return nullptr;
  return guarded([&] { return wrap(IsView ? view(*input, other->shape()) : expand(*input, other->shape())); });
}

// Tensor.cpu(memory_format=...): self when on the cpu, else a copy to it (ops/device.h). Tensor.pin_memory(device=None):
// self when pinned, else a copy in pinned memory (ops/device.h; docs/devices.md "Pinned host memory").
PyObject* cpu_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("cpu", {"self", "memory_format"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("cpu", "self", a[0]);
  if (!input) return nullptr;
  if (input->device().is_cpu()) return Py_NewRef(a[0]);
  return guarded([&] { return wrap(to_device(*input, Device::cpu())); });
}
PyObject* pin_memory_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("pin_memory", {"self", "device"}, 1, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("pin_memory", "self", a[0]);
  if (!input) return nullptr;
  if (input->device().is_cpu() && input->storage().is_pinned()) return Py_NewRef(a[0]);  // torch: self
  return guarded([&] { return wrap(pin_memory(*input)); });
}

nb::object shape_object(IntSpan shape) {
  nb::object tuple = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(shape.size())));
  for (size_t i = 0; i < shape.size(); ++i)
    PyTuple_SET_ITEM(tuple.ptr(), static_cast<Py_ssize_t>(i), PyLong_FromLongLong(shape[i]));
  if (!g_size_type) return tuple;
  return nb::steal(PyObject_CallOneArg(g_size_type, tuple.ptr()));
}

std::string node_display_name(const Node& node) { return node.display_name(); }

struct GradFn {
  Ref<Node> node;
};

nb::object grad_fn_object(const Ref<Node>& node) {
  if (!node) return nb::none();
  return nb::cast(GradFn{node});
}

nb::object scalar_object(const Scalar& s) {
  if (s.is_bool()) return nb::bool_(s.v.b);
  if (s.is_uint()) return nb::steal(PyLong_FromUnsignedLongLong(s.v.u));  // [2**63, 2**64)
  if (s.is_integral()) return nb::int_(s.v.i);
  return nb::float_(s.v.f);
}

int64_t only_element_check(const Tensor& t, const char* what) {
  DG_CHECK(t.numel() == 1, Runtime, "[", what, "] a Tensor with ", t.numel(), " elements cannot be converted to Scalar");
  return 0;
}

std::string tensor_repr(const Tensor& t) {
  PythonHostRead read(t, "print");
  std::string s = t.str();
  // The C++ printer names dtypes as torch does; Python shows them as dygrad's objects print.
  const std::string from = "dtype=torch.", to = "dtype=dygrad.";
  if (size_t at = s.find(from); at != std::string::npos) s.replace(at, from.size(), to);
  // (The device suffix, grad_fn's torch-style name and the line breaks are the C++ printer's: ops/print.cpp.)
  return s;
}
}  // namespace

nb::object item_object(const Tensor& t) {
  profiler::HostOpScope scope("item");
  only_element_check(t, "item");
  PythonHostRead read(t, "item");
  if (is_complex(t.dtype())) {  // both parts, as a Python complex
    const Tensor pair = to(view_as_real(detach(t)), DType::Float64);
    const std::vector<double> parts = pair.to_vector<double>();
    return nb::steal(PyComplex_FromDoubles(parts[0], parts[1]));
  }
  return scalar_object(t.item_scalar());  // a uint64 above 2**63 - 1 is a UInt
}

void init_tensor(nb::module_& m) {
  // The type's slots come from each operator family and are fixed when the type is created.
  static PyType_Slot slots[64];
  {
    size_t n = 0;
    for (const PyType_Slot* family : {number_slots(), mapping_slots(), math_operator_slots(), linalg_operator_slots()})
      for (const PyType_Slot* s = family; s->slot; ++s) {
        if (n + 1 >= std::size(slots)) throw std::logic_error("dygrad: too many Tensor type slots");
        slots[n++] = *s;
      }
    slots[n] = {0, nullptr};
  }
  nb::class_<Tensor> cls(m, "Tensor", nb::type_slots(slots));
  tensor_type = reinterpret_cast<PyTypeObject*>(cls.ptr());

  nb::class_<GradFn>(m, "Node")
      .def("name", [](const GradFn& f) { return node_display_name(*f.node); })
      .def_prop_ro("next_functions", [](const GradFn& f) {
        nb::list out;
        for (const Edge& e : f.node->next) {
          if (e.node) out.append(nb::make_tuple(grad_fn_object(e.node), e.output_nr));
          else if (e.leaf) out.append(nb::make_tuple(nb::str("AccumulateGrad"), 0));
          else out.append(nb::make_tuple(nb::none(), 0));
        }
        return nb::tuple(out);
      })
      .def("__repr__", [](const GradFn& f) { return "<" + node_display_name(*f.node) + " object>"; })
      // A backward without retain_graph ran through it (dygrad.jit: a graph already consumed needs no backward).
      .def_prop_ro("_released", [](const GradFn& f) { return f.node->released(); });

  m.def("_set_size_type", [](nb::handle type) {
    Py_XINCREF(type.ptr());
    g_size_type = type.ptr();
  });
  m.def("_set_cpu_device", [](nb::handle device) {
    Py_XINCREF(device.ptr());
    g_cpu_device = device.ptr();
  });
  m.def("_set_device_class", [](nb::handle cls) {
    Py_XINCREF(cls.ptr());
    g_device_class = cls.ptr();
  });
  m.def("_set_meta_device", [](nb::handle device) {
    Py_XINCREF(device.ptr());
    g_meta_device = device.ptr();
  });
  static const OpEntry entries[] = {
      {"new_empty", new_empty_entry, "new_empty(*size, *, dtype=None, device=None, requires_grad=False) -> Tensor", false, true},
      {"new_zeros", new_zeros_entry, "new_zeros(*size, *, dtype=None, device=None, requires_grad=False) -> Tensor", false, true},
      {"new_ones", new_ones_entry, "new_ones(*size, *, dtype=None, device=None, requires_grad=False) -> Tensor", false, true},
      {"new_full", new_full_entry, "new_full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor",
       false, true},
      {"type_as", type_as_entry, "type_as(other) -> Tensor: self cast to other's dtype", false, true},
      {"view_as", shape_as_entry<true>, "view_as(other) -> Tensor: view(other.shape)", false, true},
      {"expand_as", shape_as_entry<false>, "expand_as(other) -> Tensor: expand(other.shape)", false, true},
      {"cpu", cpu_entry, "cpu(memory_format=torch.preserve_format) -> Tensor: self (dygrad's tensors are on the cpu)",
       false, true},
      {"pin_memory", pin_memory_entry, "pin_memory(device=None) -> Tensor: self if pinned, else a copy in page-locked memory",
       false, true},
  };
  register_ops(m, entries);

  cls.def_prop_ro("shape", [](const Tensor& t) { return shape_object(t.shape()); })
      .def_prop_ro("dtype", [](const Tensor& t) { return nb::borrow(dtype_object(t.dtype())); })
      .def_prop_ro("ndim", [](const Tensor& t) { return t.dim(); })
      .def_prop_ro("_version", [](const Tensor& t) { return t.version(); })  // bumped by every in-place write
      .def_prop_ro("device", [](const Tensor& t) { return device_object(t); })
      .def_prop_ro("is_cuda", [](const Tensor&) { return false; })
      .def_prop_ro("is_meta", [](const Tensor& t) { return meta::is_meta_storage(&t.storage()); })
      .def_prop_ro("is_cpu", [](const Tensor& t) { return t.device().type == Device::Type::CPU; })
      .def("get_device", [](const Tensor& t) -> int64_t {
        return t.device().type == Device::Type::CPU ? -1 : t.device().index;
      })
      .def("is_pinned", [](const Tensor& t, nb::handle) { return t.device().is_cpu() && t.storage().is_pinned(); },
           nb::arg("device") = nb::none())
      .def_prop_rw("requires_grad", [](const Tensor& t) { return t.requires_grad(); },
                   [](Tensor& t, bool value) { t.set_requires_grad(value); })
      .def_prop_rw("grad", [](const Tensor& t) -> nb::object {
                     // The same Python object while the gradient is the same tensor (`x.grad is x.grad`).
                     Tensor g = t.grad();
                     if (!g.defined()) return nb::none();
                     AutogradMeta& meta = *t.impl()->autograd;
                     if (meta.grad_object) {
                       auto* cached = static_cast<PyObject*>(meta.grad_object.get());
                       if (unwrap(cached).same(g)) return nb::borrow(cached);
                     }
                     nb::object o = wrap_object(g);
                     Py_INCREF(o.ptr());
                     meta.grad_object = std::shared_ptr<void>(o.ptr(), [](void* p) {
                       release_python_object(static_cast<PyObject*>(p));
                     });
                     return o;
                   },
                   [](Tensor& t, nb::handle g) {
                     if (g.is_none()) return t.set_grad(Tensor());
                     const Tensor* gt = to_tensor("grad", "grad", g.ptr());
                     if (!gt) throw nb::python_error();
                     t.set_grad(*gt);
                     if (!is_tensor(g.ptr()) || !unwrap(g.ptr()).same(*gt)) return;
                     Py_INCREF(g.ptr());  // `x.grad = g; x.grad is g`, as in torch
                     t.impl()->autograd->grad_object = std::shared_ptr<void>(g.ptr(), [](void* p) {
                       release_python_object(static_cast<PyObject*>(p));
                     });
                   }, nb::arg("grad").none())
      .def_prop_ro("grad_fn", [](const Tensor& t) { return grad_fn_object(t.grad_fn()); })
      .def_prop_ro("is_leaf", [](const Tensor& t) { return t.is_leaf(); })
      .def_prop_rw("data", [](const Tensor& t) { return detach(t); },
                   [](Tensor& t, const Tensor& value) {
                     // torch's `x.data = y`: x now shows y's storage and metadata, keeping its autograd identity.
                     // Queued Tasks read x's metadata on the stream worker: let them finish first.
                     {
                       nb::gil_scoped_release release;
                       Stream::synchronize_all();
                     }
                     TensorImpl& dst = *t.impl();
                     const TensorImpl& src = *value.impl();
                     dst.storage = src.storage;
                     dst.sizes = src.sizes;
                     dst.strides = src.strides;
                     dst.offset = src.offset;
                     dst.numel = src.numel;
                     dst.dtype = src.dtype;
                     dst.view_base.reset();  // no longer a view of the tensor it was made from
                   })
      .def_prop_ro("T", [](const Tensor& t) {
        Dims perm;
        for (int64_t d = t.dim() - 1; d >= 0; --d) perm.push_back(d);
        return permute(t, perm);
      })
      .def("numel", [](const Tensor& t) { return t.numel(); })
      .def("nelement", [](const Tensor& t) { return t.numel(); })
      .def("dim", [](const Tensor& t) { return t.dim(); })
      .def("ndimension", [](const Tensor& t) { return t.dim(); })
      .def("size", [](const Tensor& t, nb::handle dim) -> nb::object {
             if (dim.is_none()) return shape_object(t.shape());
             int64_t d = 0;
             if (!to_int_argument("size", "dim", dim.ptr(), d)) throw nb::python_error();
             return nb::int_(t.size(d));
           }, nb::arg("dim") = nb::none())
      .def("stride", [](const Tensor& t, nb::handle dim) -> nb::object {
             if (dim.is_none()) {
               nb::list out;
               for (int64_t s : t.strides()) out.append(s);
               return nb::tuple(out);
             }
             int64_t d = 0;
             if (!to_int_argument("stride", "dim", dim.ptr(), d)) throw nb::python_error();
             return nb::int_(t.stride(d));
           }, nb::arg("dim") = nb::none())
      .def("is_contiguous", [](const Tensor& t) { return t.is_contiguous(); })
      .def("is_floating_point", [](const Tensor& t) { return is_floating(t.dtype()); })
      .def("element_size", [](const Tensor& t) { return t.itemsize(); })
      .def("storage_offset", [](const Tensor& t) { return t.storage_offset(); })
      .def("_storage_bytes", [](const Tensor& t) { return storage_bytes(t); })  // see dygrad/storage.py
      // The address only: no wait for queued Tasks that may still use reused memory (Storage::address).
      .def("data_ptr", [](const Tensor& t) {
        return reinterpret_cast<uintptr_t>(t.storage().address()) + static_cast<uintptr_t>(t.storage_offset()) * t.itemsize();
      })
      .def("requires_grad_", [](nb::handle self, bool value) {
             unwrap(self.ptr()).set_requires_grad(value);
             return nb::borrow(self);
           }, nb::arg("requires_grad") = true)
      .def("retain_grad", [](Tensor& t) { t.retain_grad(); })
      .def("backward", [](const Tensor& t, nb::handle gradient, nb::handle retain_graph, bool create_graph) {
             Tensor g;
             if (!gradient.is_none()) {
               const Tensor* gt = to_tensor("backward", "gradient", gradient.ptr());
               if (!gt) throw nb::python_error();
               g = *gt;
             }
             bool retain = false;
             if (!to_bool_argument("backward", "retain_graph", retain_graph.ptr(), create_graph, retain))
               throw nb::python_error();
             PythonCallSite site;
             t.backward(g, retain, create_graph);
           }, nb::arg("gradient") = nb::none(), nb::arg("retain_graph") = nb::none(), nb::arg("create_graph") = false)
      .def("item", [](const Tensor& t) { return item_object(t); })
      .def("__repr__", [](const Tensor& t) {
        profiler::HostOpScope scope("__repr__");
        return tensor_repr(t);
      })
      .def("__str__", [](const Tensor& t) {
        profiler::HostOpScope scope("__str__");
        return tensor_repr(t);
      })
      .def("__len__", [](const Tensor& t) {
        DG_CHECK(t.dim() > 0, Type, "[len] len() of a 0-d tensor");
        return t.shape()[0];
      })
      .def("__bool__", [](const Tensor& t) {
        profiler::HostOpScope scope("__bool__");
        DG_CHECK(t.numel() == 1, Runtime, "[bool] Boolean value of Tensor with ",
                 t.numel() == 0 ? "no values" : "more than one value", " is ambiguous");
        PythonHostRead read(t, "__bool__");
        const Scalar s = t.item_scalar();
        if (s.is_uint()) check_scalar_fits("bool", s, DType::Int64);  // torch reads an integer as int64 here
        return s.to_double() != 0.0;
      })
      .def("__float__", [](const Tensor& t) {
        profiler::HostOpScope scope("__float__");
        only_element_check(t, "float");
        PythonHostRead read(t, "__float__");
        return t.item_scalar().to_double();
      })
      .def("__int__", [](const Tensor& t) {
        profiler::HostOpScope scope("__int__");
        only_element_check(t, "int");
        PythonHostRead read(t, "__int__");
        // As Python's int(float): exact for any finite value (3e38 is a big int), ValueError for NaN,
        // OverflowError for inf. Never a C++ float-to-int64 conversion, which is undefined out of range.
        const Scalar s = t.item_scalar();
        if (s.is_uint()) check_scalar_fits("int", s, DType::Int64);  // torch's int() of a uint64 above 2**63 - 1
        if (!s.is_floating()) return nb::steal(PyLong_FromLongLong(s.to_int()));
        PyObject* v = PyLong_FromDouble(std::trunc(s.v.f));
        if (!v) throw nb::python_error();
        return nb::steal(v);
      })
      .def("__index__", [](const Tensor& t) {
        profiler::HostOpScope scope("__index__");
        DG_CHECK(t.numel() == 1 && is_integral(t.dtype(), false), Type,
                 "[index] only integer tensors of a single element can be converted to an index");
        PythonHostRead read(t, "__index__");
        const Scalar s = t.item_scalar();
        if (s.is_uint()) check_scalar_fits("index", s, DType::Int64);
        return s.to_int();
      })
      .def_static("_make_subclass", [](nb::handle cls_handle, const Tensor& data, bool requires_grad) {
             // nn.Parameter: an instance of a Python subclass sharing data's storage, a fresh leaf.
             DG_CHECK(PyType_Check(cls_handle.ptr()) &&
                          PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls_handle.ptr()), tensor_type),
                      Type, "[_make_subclass] cls must be a subclass of Tensor");
             nb::object o = nb::inst_alloc(cls_handle);
             new (nb::inst_ptr<Tensor>(o)) Tensor(detach(data));
             nb::inst_mark_ready(o);
             if (requires_grad) unwrap(o.ptr()).set_requires_grad(true);
             return o;
           }, nb::arg("cls"), nb::arg("data"), nb::arg("requires_grad") = false);
  cls.attr("__array_priority__") = 1000;  // NumPy defers `ndarray op tensor` to the Tensor's operators
  cls.attr("__hash__") = nb::borrow(reinterpret_cast<PyObject*>(&PyBaseObject_Type)).attr("__hash__");
}

}  // namespace dg::py
