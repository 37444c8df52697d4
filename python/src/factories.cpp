// Factory entry points: empty/zeros/ones(*size), full(size, fill_value) and the *_like forms, with
// dtype=, device= and requires_grad= as torch takes them (the *_like forms default to their input's device).
#include <string_view>

#include "common.h"
#include "dygrad/ops/complex.h"

namespace dg::py {

namespace {
enum class Fill { Empty, Zeros, Ones };

template <Fill kind>
PyObject* sized_factory(const char* op, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  if (!parse_factory_options(op, args + nargs, kwnames, o)) return nullptr;
  Dims shape;
  if (!factory_shape(op, args, nargs, o, shape)) return nullptr;
  TensorOptions options;
  if (!resolve_factory_options(op, o, DType::Float32, options)) return nullptr;
  return guarded([&] {
    if constexpr (kind == Fill::Empty) return wrap(empty(shape, options));
    else if constexpr (kind == Fill::Zeros) return wrap(zeros(shape, options));
    else return wrap(ones(shape, options));
  });
}
PyObject* empty_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) { return sized_factory<Fill::Empty>("empty", a, n, k); }
PyObject* zeros_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) { return sized_factory<Fill::Zeros>("zeros", a, n, k); }
PyObject* ones_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) { return sized_factory<Fill::Ones>("ones", a, n, k); }

// full(size, fill_value, *, dtype=None): the dtype follows fill_value (float32, int64 or bool) as in torch.
PyObject* full_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  PyObject* fill_value = nullptr;
  if (!parse_factory_options("full", args + nargs, kwnames, o, false, {"fill_value"}, &fill_value)) return nullptr;
  if (nargs > 2) return type_error("full", "takes 2 positional arguments but %zd were given", nargs);
  if (nargs >= 1) o.size = args[0];
  if (nargs == 2) fill_value = args[1];
  if (!o.size) return type_error("full", "missing required argument 'size'");
  if (!fill_value) return type_error("full", "missing required argument 'fill_value'");
  Dims shape;
  Scalar value;
  if (PyComplex_Check(fill_value)) {  // a complex fill: complex64 by default; the imaginary part through imag's view
    TensorOptions options;
    if (!to_int_list("full", "size", o.size, shape) ||
        !resolve_factory_options("full", o, DType::Complex64, options))
      return nullptr;
    const double re = PyComplex_RealAsDouble(fill_value), im = PyComplex_ImagAsDouble(fill_value);
    return guarded([&] {
      TensorOptions plain = options;
      plain.requires_grad = false;
      Tensor t = full(shape, Scalar(re), plain);
      if (is_complex(t.dtype())) {
        Tensor imaginary = imag(t);
        fill_(imaginary, Scalar(im));
      }
      if (options.requires_grad) t.set_requires_grad(true);
      return wrap(std::move(t));
    });
  }
  if (!to_int_list("full", "size", o.size, shape) || !to_scalar_argument("full", "fill_value", fill_value, 0, value))
    return nullptr;
  TensorOptions options;
  // An int's default dtype is int64, [2**63, 2**64) too: torch's full refuses it there ("value cannot be converted to
  // type int64_t without overflow") and takes it into uint64 or a floating dtype.
  const DType inferred = value.is_uint() ? DType::Int64 : value.default_dtype();
  if (!resolve_factory_options("full", o, inferred, options)) return nullptr;
  return guarded([&] { return wrap(full(shape, value, options)); });
}

// *_like(input, [fill_value,] *, dtype=None, requires_grad=False): input's shape, and its dtype by default.
template <Fill kind, bool with_value>
PyObject* like_factory(const char* op, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  PyObject* fill_value = nullptr;
  if (!parse_factory_options(op, args + nargs, kwnames, o, false, {"fill_value"}, &fill_value)) return nullptr;
  if (!with_value && fill_value) return type_error(op, "got an unexpected keyword argument 'fill_value'");
  const Py_ssize_t expected = with_value ? 2 : 1;
  if (nargs == expected - 1 && with_value && fill_value) {
  } else if (nargs != expected) {
    return type_error(op, "takes %zd positional argument%s but %zd were given", expected, expected == 1 ? "" : "s", nargs);
  }
  const Tensor* input = to_tensor(op, "input", nargs > 0 ? args[0] : nullptr);
  if (!input) return nullptr;
  Scalar value = kind == Fill::Ones ? Scalar(1) : Scalar(0);
  if (with_value && !to_scalar_argument(op, "fill_value", nargs > 1 ? args[1] : fill_value, 0, value)) return nullptr;
  TensorOptions options;
  const Device input_device = input->device();
  if (!resolve_factory_options(op, o, input->dtype(), options, &input_device)) return nullptr;
  return guarded([&] {
    if (kind == Fill::Empty && !with_value) return wrap(empty(input->shape(), options));
    return wrap(full(input->shape(), value, options));
  });
}
PyObject* empty_like_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return like_factory<Fill::Empty, false>("empty_like", a, n, k);
}
PyObject* zeros_like_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return like_factory<Fill::Zeros, false>("zeros_like", a, n, k);
}
PyObject* ones_like_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return like_factory<Fill::Ones, false>("ones_like", a, n, k);
}
PyObject* full_like_entry(PyObject*, PyObject* const* a, Py_ssize_t n, PyObject* k) {
  return like_factory<Fill::Zeros, true>("full_like", a, n, k);
}
}  // namespace

void init_factories(nb::module_& m) {
  static const OpEntry entries[] = {
      {"empty", empty_entry, "empty(*size, dtype=None, requires_grad=False) -> Tensor (contents undefined)", true, false},
      {"zeros", zeros_entry, "zeros(*size, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"ones", ones_entry, "ones(*size, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"full", full_entry, "full(size, fill_value, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"empty_like", empty_like_entry, "empty_like(input, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"zeros_like", zeros_like_entry, "zeros_like(input, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"ones_like", ones_like_entry, "ones_like(input, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"full_like", full_like_entry, "full_like(input, fill_value, *, dtype=None, requires_grad=False) -> Tensor", true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
