// Random and range factories (device= as torch's: their ops build on the host, then factory_on_device places the
// result): rand, randn (*size, dtype=None, requires_grad=False), randint, rand_like,
// randn_like, arange, linspace, logspace, bernoulli_mask, bernoulli(_), multinomial; the in-place fills
// uniform_/normal_; get_rng_state/set_rng_state.
#include <string_view>

#include "common.h"
#include "dygrad/ops/dispatch.h"

namespace dg::py {

namespace {
// rand/randn(*size, *, dtype=None, requires_grad=False): floating dtypes only (torch).
template <bool Normal>
PyObject* random_factory(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* op = Normal ? "randn" : "rand";
  FactoryOptions o;
  if (!parse_factory_options(op, args + nargs, kwnames, o, true)) return nullptr;
  Dims shape;
  if (!factory_shape(op, args, nargs, o, shape)) return nullptr;
  TensorOptions options;
  if (!resolve_factory_options(op, o, DType::Float32, options)) return nullptr;
  return guarded([&] {
    const TensorOptions built = without_grad(options);
    return wrap(factory_on_device(Normal ? randn(shape, built) : rand(shape, built), options));
  });
}

// rand_like/randn_like(input, *, dtype=None, requires_grad=False)
template <bool Normal>
PyObject* random_like(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* op = Normal ? "randn_like" : "rand_like";
  FactoryOptions o;
  PyObject* input_kw = nullptr;
  if (!parse_factory_options(op, args + nargs, kwnames, o, true, {"input"}, &input_kw)) return nullptr;
  if (nargs > 1) return type_error(op, "takes 1 positional argument but %zd were given", nargs);
  const Tensor* input = to_tensor(op, "input", nargs == 1 ? args[0] : input_kw);
  if (!input) return nullptr;
  TensorOptions options;
  const Device input_device = input->device();
  if (!resolve_factory_options(op, o, input->dtype(), options, &input_device)) return nullptr;
  return guarded([&] {
    const TensorOptions built = without_grad(options);
    return wrap(factory_on_device(Normal ? randn(input->shape(), built) : rand(input->shape(), built), options));
  });
}

// randint(high, size) / randint(low, high, size), *, dtype=int64, requires_grad=False.
PyObject* randint_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  PyObject* kw[2] = {nullptr, nullptr};  // low, high
  if (!parse_factory_options("randint", args + nargs, kwnames, o, true, {"low", "high"}, kw)) return nullptr;
  PyObject* low = kw[0];
  PyObject* high = kw[1];
  PyObject* size = o.size;
  if (nargs == 3) low = args[0], high = args[1], size = args[2];
  else if (nargs == 2 && size) low = args[0], high = args[1];
  else if (nargs == 2) high = args[0], size = args[1];
  else if (nargs == 1 && high) low = args[0];
  else if (nargs == 1) high = args[0];
  else if (nargs > 3) return type_error("randint", "takes at most 3 positional arguments but %zd were given", nargs);
  if (!high || !size) return type_error("randint", "missing required argument '%s'", high ? "size" : "high");
  int64_t lo = 0, hi;
  Dims shape;
  if ((low && !to_int_argument("randint", "low", low, lo)) || !to_int_argument("randint", "high", high, hi) ||
      !to_int_list("randint", "size", size, shape))
    return nullptr;
  TensorOptions options;
  if (!resolve_factory_options("randint", o, DType::Int64, options)) return nullptr;
  return guarded([&] { return wrap(factory_on_device(randint(lo, hi, shape, options.dtype), options)); });
}

// arange(end) / arange(start, end, step=1), *, dtype=None, requires_grad=False: the dtype follows the
// numbers (int64 for ints, float32 when one is a float) unless given.
PyObject* arange_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  PyObject* kw[3] = {nullptr, nullptr, nullptr};  // start, end, step
  if (!parse_factory_options("arange", args + nargs, kwnames, o, true, {"start", "end", "step"}, kw)) return nullptr;
  if (nargs > 3) return type_error("arange", "takes at most 3 positional arguments but %zd were given", nargs);
  PyObject* start = kw[0];
  PyObject* end = kw[1];
  PyObject* step = kw[2];
  if (nargs == 1 && !end) end = args[0];
  else if (nargs == 1) start = args[0];
  if (nargs >= 2) start = args[0], end = args[1];
  if (nargs == 3) step = args[2];
  if (!end) return type_error("arange", "missing required argument 'end'");
  Scalar s = 0, e, st = 1;
  if (!to_scalar_argument("arange", "start", start, 0, s) || !to_scalar_argument("arange", "end", end, 0, e) ||
      !to_scalar_argument("arange", "step", step, 1, st))
    return nullptr;
  TensorOptions options;  // dtype, requires_grad and device; the dtype itself is inferred below unless given
  if (!resolve_factory_options("arange", o, DType::Float32, options)) return nullptr;
  std::optional<DType> dtype;
  if (o.dtype && o.dtype != Py_None) dtype = options.dtype;
  return guarded([&] { return wrap(factory_on_device(arange(s, e, st, dtype), options)); });
}

// bernoulli_mask(size, p, *, dtype=bool, device=None): 1 with probability p (dygrad-specific; dropout builds on it).
PyObject* bernoulli_mask_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("bernoulli_mask", {"size", "p", "dtype", "device"}, 2, 2);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  Dims shape;
  Scalar p;
  FactoryOptions o;
  o.dtype = a[2];
  o.device = a[3];
  TensorOptions options;
  if (!to_int_list("bernoulli_mask", "size", a[0], shape) || !to_scalar_argument("bernoulli_mask", "p", a[1], 0, p) ||
      !resolve_factory_options("bernoulli_mask", o, DType::Bool, options))
    return nullptr;
  return guarded([&] {
    return wrap(bernoulli_mask(shape, p.to_double(), options.dtype, std::nullopt, options.device));
  });
}

// Tensor.uniform_(from=0, to=1) / normal_(mean=0, std=1): in place, without autograd history (torch).
template <bool Normal>
PyObject* fill_random_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = Normal ? "normal_" : "uniform_";
  static const Signature sig(name, {"self", Normal ? "mean" : "from", Normal ? "std" : "to", "generator"}, 3, 1);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "self", a[0]);
  Scalar p0, p1;
  if (!input || !to_scalar_argument(name, Normal ? "mean" : "from", a[1], 0, p0) ||
      !to_scalar_argument(name, Normal ? "std" : "to", a[2], 1, p1))
    return nullptr;
  if (a[3] && a[3] != Py_None) return type_error(name, "generators are not supported (use dygrad.manual_seed)");
  return guarded([&] {
    DG_CHECK(is_floating(input->dtype()), Type, "[", name, "] expects a floating point tensor, got ", dtype_name(input->dtype()));
    DG_CHECK(!(grad_enabled() && input->requires_grad() && input->is_leaf()), Runtime, "[", name,
             "] a leaf Variable that requires grad is being used in an in-place operation (use dygrad.no_grad())");
    NoGradGuard no_grad;
    const double a0 = p0.to_double(), a1 = p1.to_double();
    const TensorOptions options{.dtype = input->dtype(), .device = input->device()};
    Tensor r = Normal ? randn(input->shape(), options) : rand(input->shape(), options);
    // uniform: from + (to - from) * u; normal: mean + std * z.
    const double scale = Normal ? a1 : a1 - a0;
    if (scale != 1.0) r = mul(r, scale);
    if (a0 != 0.0) r = add(r, a0);
    copy_(unwrap(a[0]), r);
    Py_INCREF(a[0]);
    return a[0];
  });
}
// generator=: a dygrad.Generator gives the op its seed (64 bits drawn from the Generator, so a seeded Generator
// replays the same numbers without touching the process generator); None leaves it unset.
bool to_generator_seed(const char* op, PyObject* o, GeneratorSeed& out) {
  if (!o || o == Py_None) return true;
  PyObject* draw = PyObject_HasAttrString(o, "_random64") ? PyObject_CallMethod(o, "_random64", nullptr) : nullptr;
  if (!draw) {
    if (PyErr_Occurred()) return false;
    type_error(op, "argument 'generator' must be a dygrad.Generator, not %s", type_name(o));
    return false;
  }
  const unsigned long long seed = PyLong_AsUnsignedLongLong(draw);
  Py_DECREF(draw);
  if (PyErr_Occurred()) return false;
  out = seed;
  return true;
}

// bernoulli(input, *, generator=None): 1 with probability input[i]; bernoulli(input, p, *, generator=None): with
// probability p, in input's shape and dtype.
PyObject* bernoulli_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("bernoulli", {"input", "p", "generator"}, 2, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("bernoulli", "input", a[0]);
  GeneratorSeed seed;
  if (!input || !to_generator_seed("bernoulli", a[2], seed)) return nullptr;
  if (!a[1] || a[1] == Py_None) return guarded([&] { return wrap(bernoulli(*input, seed)); });
  Scalar p;
  if (!to_scalar_argument("bernoulli", "p", a[1], 0, p)) return nullptr;
  return guarded([&] {
    return wrap(bernoulli_mask(input->shape(), p.to_double(), input->dtype(), seed, input->device()));
  });
}

// Tensor.bernoulli_(p=0.5, *, generator=None): p a number or a tensor of probabilities (broadcast to self).
PyObject* bernoulli_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("bernoulli_", {"self", "p", "generator"}, 2, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* target = to_tensor("bernoulli_", "self", a[0]);
  GeneratorSeed seed;
  if (!target || !to_generator_seed("bernoulli_", a[2], seed)) return nullptr;
  const Tensor* p_tensor = a[1] && is_tensor(a[1]) ? &unwrap(a[1]) : nullptr;
  Scalar p = 0.5;
  if (!p_tensor && a[1] && !to_scalar_argument("bernoulli_", "p", a[1], 0.5, p)) return nullptr;
  return guarded([&] {
    ApiNameScope name("bernoulli_");
    Tensor draws;
    {
      NoGradGuard no_grad;
      draws = p_tensor ? bernoulli(expand(*p_tensor, target->shape()), seed)
                       : bernoulli_mask(target->shape(), p.to_double(), target->dtype(), seed, target->device());
    }
    copy_(unwrap(a[0]), draws);
    Py_INCREF(a[0]);
    return a[0];
  });
}

// multinomial(input, num_samples, replacement=False, *, generator=None)
PyObject* multinomial_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("multinomial", {"input", "num_samples", "replacement", "generator"}, 3, 2);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("multinomial", "input", a[0]);
  int64_t samples;
  bool replacement;
  GeneratorSeed seed;
  if (!input || !to_int_argument("multinomial", "num_samples", a[1], samples) ||
      !to_bool_argument("multinomial", "replacement", a[2], false, replacement) ||
      !to_generator_seed("multinomial", a[3], seed))
    return nullptr;
  return guarded([&] { return wrap(multinomial(*input, samples, replacement, seed)); });
}

// linspace(start, end, steps, *, dtype=None, requires_grad=False) and logspace(start, end, steps, base=10.0, *, ...):
// float32 unless dtype is given (torch's default dtype, whatever the numbers).
template <bool Log>
PyObject* spaced_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* op = Log ? "logspace" : "linspace";
  FactoryOptions o;
  PyObject* kw[4] = {nullptr, nullptr, nullptr, nullptr};  // start, end, steps, base
  if (!parse_factory_options(op, args + nargs, kwnames, o, false, {"start", "end", "steps", "base"}, kw))
    return nullptr;
  const Py_ssize_t most = Log ? 4 : 3;
  if (nargs > most) return type_error(op, "takes at most %zd positional arguments but %zd were given", most, nargs);
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (kw[i]) return type_error(op, "got multiple values for argument '%s'", i == 0 ? "start" : i == 1 ? "end" : i == 2 ? "steps" : "base");
    kw[i] = args[i];
  }
  if (!Log && kw[3]) return type_error(op, "got an unexpected keyword argument 'base'");
  for (int i = 0; i < 3; ++i)
    if (!kw[i]) return type_error(op, "missing required argument '%s'", i == 0 ? "start" : i == 1 ? "end" : "steps");
  Scalar start, end, base = 10.0;
  int64_t steps;
  TensorOptions options;
  // start and end may be 0-dim tensors (torch reads their value: a sync point).
  for (int i = 0; i < 2; ++i) {
    if (!is_tensor(kw[i])) continue;
    const Tensor& t = unwrap(kw[i]);
    if (t.dim() != 0) {
      PyErr_Format(PyExc_RuntimeError, "[%s] only supports 0-dimensional start and end tensors, but got %s with %lld "
                   "dimension(s)", op, i == 0 ? "start" : "end", static_cast<long long>(t.dim()));
      return nullptr;
    }
    try {
      PythonHostRead read(t, op);
      (i == 0 ? start : end) = t.item_scalar();
    } catch (...) {
      set_error_from_current_exception();
      return nullptr;
    }
  }
  if ((!is_tensor(kw[0]) && !to_scalar_argument(op, "start", kw[0], 0, start)) ||
      (!is_tensor(kw[1]) && !to_scalar_argument(op, "end", kw[1], 0, end)) ||
      !to_int_argument(op, "steps", kw[2], steps) || !to_scalar_argument(op, "base", kw[3], 10.0, base) ||
      !resolve_factory_options(op, o, DType::Float32, options))
    return nullptr;
  return guarded([&] {
    Tensor out = Log ? logspace(start, end, steps, base.to_double(), options.dtype) : linspace(start, end, steps, options.dtype);
    return wrap(factory_on_device(out, options));
  });
}
}  // namespace

void init_ops_random(nb::module_& m) {
  static const OpEntry entries[] = {
      {"rand", random_factory<false>, "rand(*size, dtype=None, requires_grad=False) -> Tensor: uniform on [0, 1)", true, false},
      {"randn", random_factory<true>, "randn(*size, dtype=None, requires_grad=False) -> Tensor: standard normal", true, false},
      {"rand_like", random_like<false>, "rand_like(input, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"randn_like", random_like<true>, "randn_like(input, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"randint", randint_entry, "randint(low=0, high, size, *, dtype=int64, requires_grad=False) -> Tensor", true, false},
      {"arange", arange_entry, "arange(start=0, end, step=1, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"bernoulli_mask", bernoulli_mask_entry, "bernoulli_mask(size, p, dtype=bool, device=None) -> Tensor: 1 with probability p", true, false},
      {"uniform_", fill_random_entry<false>, "uniform_(from=0, to=1) -> Tensor: in place, returns self", false, true},
      {"bernoulli", bernoulli_entry, "bernoulli(input, p=None, *, generator=None) -> Tensor: 1 with probability input (or p)", true, true},
      {"bernoulli_", bernoulli_inplace_entry, "bernoulli_(p=0.5, *, generator=None) -> Tensor: in place, returns self", false, true},
      {"multinomial", multinomial_entry, "multinomial(input, num_samples, replacement=False, *, generator=None) -> Tensor", true, true},
      {"linspace", spaced_entry<false>, "linspace(start, end, steps, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"logspace", spaced_entry<true>, "logspace(start, end, steps, base=10.0, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"normal_", fill_random_entry<true>, "normal_(mean=0, std=1) -> Tensor: in place, returns self", false, true},
  };
  register_ops(m, entries);
  m.def("get_rng_state", [] {
    RngState s = rng_state();
    nb::dict d;
    d["seed"] = s.seed;
    d["offset"] = s.offset;
    return d;
  }, "The generator state as a dict {'seed', 'offset'}; set_rng_state(state) restores it.");
  m.def("set_rng_state", [](nb::dict state) {
    if (!state.contains("seed") || !state.contains("offset"))
      throw nb::type_error("[set_rng_state] expects the dict returned by get_rng_state ({'seed', 'offset'})");
    uint64_t fields[2] = {0, 0};
    const char* names[2] = {"seed", "offset"};
    for (int i = 0; i < 2; ++i) {
      PyObject* v = state[names[i]].ptr();
      if (!PyLong_Check(v) || PyBool_Check(v))
        throw nb::type_error(("[set_rng_state] '" + std::string(names[i]) + "' must be int, not " +
                              Py_TYPE(v)->tp_name).c_str());
      fields[i] = PyLong_AsUnsignedLongLong(v);
      if (PyErr_Occurred()) throw nb::python_error();  // negative or over 64 bits: OverflowError
    }
    set_rng_state(RngState{fields[0], fields[1]});
  }, nb::arg("new_state"));
}

}  // namespace dg::py
