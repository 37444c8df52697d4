// Random and range factories (device= as torch's: their ops build on the host, then factory_on_device places the
// result): rand, randn (*size, dtype=None, requires_grad=False), randint, rand_like,
// randn_like, arange, linspace, logspace, bernoulli_mask, bernoulli(_), multinomial; the in-place fills
// uniform_/normal_; get_rng_state/set_rng_state.
#include <string_view>

#include "common.h"
#include "dygrad/autograd/node.h"
#include "dygrad/ops/dispatch.h"

namespace dg::py {

namespace {
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

// rand/randn(*size, *, dtype=None, requires_grad=False, generator=None): floating dtypes only (torch).
template <bool Normal>
PyObject* random_factory(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* op = Normal ? "randn" : "rand";
  FactoryOptions o;
  if (!parse_factory_options(op, args + nargs, kwnames, o, true)) return nullptr;
  Dims shape;
  if (!factory_shape(op, args, nargs, o, shape)) return nullptr;
  TensorOptions options;
  GeneratorSeed seed;
  if (!resolve_factory_options(op, o, DType::Float32, options) || !to_generator_seed(op, o.generator, seed)) return nullptr;
  return guarded([&] {
    const TensorOptions built = without_grad(options);
    return wrap(factory_on_device(Normal ? randn(shape, built, seed) : rand(shape, built, seed), options));
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
  GeneratorSeed seed;
  if (!resolve_factory_options(op, o, input->dtype(), options, &input_device) || !to_generator_seed(op, o.generator, seed))
    return nullptr;
  return guarded([&] {
    const TensorOptions built = without_grad(options);
    return wrap(factory_on_device(Normal ? randn(input->shape(), built, seed) : rand(input->shape(), built, seed), options));
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
  GeneratorSeed seed;
  if (!resolve_factory_options("randint", o, DType::Int64, options) || !to_generator_seed("randint", o.generator, seed))
    return nullptr;
  return guarded([&] {
    return wrap(factory_on_device(randint(lo, hi, shape, options.dtype, Device::cpu(), seed), options));
  });
}

// arange(end) / arange(start, end, step=1), *, dtype=None, requires_grad=False: the dtype follows the
// numbers (int64 for ints, float32 when one is a float) unless given.
PyObject* arange_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FactoryOptions o;
  PyObject* kw[3] = {nullptr, nullptr, nullptr};  // start, end, step
  if (!parse_factory_options("arange", args + nargs, kwnames, o, true, {"start", "end", "step"}, kw)) return nullptr;
  if (o.generator && o.generator != Py_None) return type_error("arange", "got an unexpected keyword argument 'generator'");
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

// The in-place random fills: uniform_, normal_, exponential_, geometric_, cauchy_, log_normal_ (each with generator=)
// and random_. The draws are made without history and written with copy_ under the method's name: a leaf that
// requires grad raises, and a non-leaf's old value gets a zero gradient (torch's UniformBackward0, ...).
enum class Fill { Uniform, Normal, Exponential, Geometric, Cauchy, LogNormal };
struct FillSpec {
  const char* name;
  const char* first;   // parameter names and defaults
  const char* second;  // nullptr: one parameter
  double first_default, second_default;
};
constexpr FillSpec fill_spec(Fill f) {
  switch (f) {
    case Fill::Uniform: return {"uniform_", "from", "to", 0, 1};
    case Fill::Normal: return {"normal_", "mean", "std", 0, 1};
    case Fill::Exponential: return {"exponential_", "lambd", nullptr, 1, 0};
    case Fill::Geometric: return {"geometric_", "p", nullptr, 0, 0};
    case Fill::Cauchy: return {"cauchy_", "median", "sigma", 0, 1};
    case Fill::LogNormal: return {"log_normal_", "mean", "std", 1, 2};
  }
  return {};
}

// The largest finite value of a floating dtype.
double floating_max(DType dtype) {
  switch (dtype) {
    case DType::Float16: return 65504.0;
    case DType::BFloat16: return 3.3895313892515355e38;
    case DType::Float32: return 3.4028234663852886e38;
    default: return 1.7976931348623157e308;
  }
}

// torch's argument and dtype checks of each fill (its messages).
void check_fill(Fill f, const Tensor& target, double a0, double a1) {
  const DType dtype = target.dtype();
  const bool floating = is_floating(dtype);
  switch (f) {
    case Fill::Uniform:
      DG_CHECK(floating, Type, "[uniform_] expects a floating point tensor, got ", dtype_name(dtype));
      DG_CHECK(a0 <= a1, Runtime, "[uniform_] uniform_ expects to return a [from, to) range, but found from=", a0,
               " > to=", a1);
      DG_CHECK(a1 - a0 <= floating_max(dtype), Runtime, "[uniform_] uniform_ expects to-from <= the largest ",
               dtype_name(dtype), ", but found to=", a1, " and from=", a0, " which result in to-from to exceed the limit");
      return;
    case Fill::Normal:
      DG_CHECK(floating, Type, "[normal_] expects a floating point tensor, got ", dtype_name(dtype));
      DG_CHECK(a1 >= 0.0, Runtime, "[normal_] normal expects std >= 0.0, but found std ", a1);
      return;
    case Fill::Exponential:
      DG_CHECK(floating, Runtime, "[exponential_] Exponential distribution is a continuous probability distribution. "
               "dtype must be a floating point but you specified ", dtype_name(dtype));
      DG_CHECK(a0 > 0.0, Runtime, "[exponential_] exponential_ expects lambda > 0.0, but found lambda=", a0);
      return;
    case Fill::Geometric:
      DG_CHECK(dtype != DType::Bool && !is_complex(dtype), NotImplemented, "[geometric_] not implemented for ",
               dtype_name(dtype));
      DG_CHECK(a0 > 0.0 && a0 < 1.0, Runtime, "[geometric_] geometric_ expects p to be in (0, 1), but got p=", a0);
      return;
    case Fill::Cauchy:
      DG_CHECK(floating, Runtime, "[cauchy_] Cauchy distribution is a continuous probability distribution. dtype must "
               "be a floating point but you specified ", dtype_name(dtype));
      DG_CHECK(a1 > 0.0, Runtime, "[cauchy_] cauchy_ expects sigma > 0.0, but found sigma=", a1);
      return;
    case Fill::LogNormal:
      DG_CHECK(floating, NotImplemented, "[log_normal_] not implemented for ", dtype_name(dtype));
      DG_CHECK(a1 > 0.0, Runtime, "[log_normal_] log_normal_ expects std > 0.0, but found std=", a1);
      return;
  }
}

// The draws of a fill in `target`'s shape (float64 for a float64 target, else float32; uniform_ and normal_ in the
// target's own dtype, as before). u is uniform in [0, 1), z standard normal.
Tensor fill_draws(Fill f, const Tensor& target, double a0, double a1, GeneratorSeed seed) {
  const DType work = target.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  const TensorOptions own{.dtype = is_floating(target.dtype()) ? target.dtype() : work, .device = target.device()};
  const TensorOptions options{.dtype = work, .device = target.device()};
  const IntSpan shape = target.shape();
  switch (f) {
    case Fill::Uniform: {  // from + (to - from) u
      Tensor r = rand(shape, own, seed);
      if (a1 - a0 != 1.0) r = mul(r, a1 - a0);
      return a0 != 0.0 ? add(r, a0) : r;
    }
    case Fill::Normal: {  // mean + std z
      Tensor r = randn(shape, own, seed);
      if (a1 != 1.0) r = mul(r, a1);
      return a0 != 0.0 ? add(r, a0) : r;
    }
    case Fill::Exponential:  // -log(1 - u) / lambd
      return div(neg(log1p(neg(rand(shape, options, seed)))), a0);
    case Fill::Geometric:  // the number of trials to the first success: ceil(log(1 - u) / log(1 - p)), at least 1
      return clamp(ceil(div(log1p(neg(rand(shape, options, seed))), std::log1p(-a0))), Scalar(1.0), std::nullopt);
    case Fill::Cauchy: {  // median + sigma tan(pi (u - 1/2))
      const Tensor angle = mul(sub(rand(shape, options, seed), 0.5), M_PI);
      return add(mul(div(sin(angle), cos(angle)), a1), a0);
    }
    case Fill::LogNormal:  // exp(mean + std z)
      return exp(add(mul(randn(shape, options, seed), a1), a0));
  }
  return Tensor();
}

// Writes draws made without history into the fill's target (copy_ under the method's name).
PyObject* write_fill(const char* name, PyObject* target, const Tensor& draws) {
  ApiNameScope scope(name);
  copy_(unwrap(target), draws);
  Py_INCREF(target);
  return target;
}

// Tensor.<fill>(a0=default, a1=default, *, generator=None) -> self.
template <Fill F>
PyObject* fill_random_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr FillSpec spec = fill_spec(F);
  static const Signature sig = spec.second ? Signature(spec.name, {"self", spec.first, spec.second, "generator"}, 3, 1)
                                           : Signature(spec.name, {"self", spec.first, "generator"}, 2, F == Fill::Geometric ? 2 : 1);
  PyObject* a[4] = {nullptr, nullptr, nullptr, nullptr};
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  PyObject* generator = spec.second ? a[3] : a[2];
  const Tensor* target = to_tensor(spec.name, "self", a[0]);
  Scalar p0, p1 = spec.second_default;
  GeneratorSeed seed;
  if (!target || !to_scalar_argument(spec.name, spec.first, a[1], spec.first_default, p0) ||
      (spec.second && !to_scalar_argument(spec.name, spec.second, a[2], spec.second_default, p1)) ||
      !to_generator_seed(spec.name, generator, seed))
    return nullptr;
  return guarded([&] {
    const double a0 = p0.to_double(), a1 = p1.to_double();
    check_fill(F, *target, a0, a1);
    check_inplace(spec.name, *target);  // before drawing: a refused fill takes no numbers
    Tensor draws;
    {
      NoGradGuard no_grad;
      draws = fill_draws(F, *target, a0, a1, seed);
    }
    return write_fill(spec.name, a[0], draws);
  });
}

// random_'s bounds for a dtype, as torch's: integers take their range, floating dtypes the integers they hold
// exactly, [-2^digits, 2^digits] (beyond it torch warns for float32/float64 and raises past the dtype's own range).
struct RandomBounds {
  int64_t low, high;      // inclusive
  int digits;             // floating: the mantissa's bits; 0 for integers
  const char* type_name;  // torch's C++ type name in its messages
};
RandomBounds random_bounds(DType dtype) {
  switch (dtype) {
    case DType::Bool: return {0, 1, 0, "bool"};
    case DType::UInt8: return {0, 255, 0, "unsigned char"};
    case DType::Int8: return {-128, 127, 0, "signed char"};
    case DType::Int16: return {-32768, 32767, 0, "short"};
    case DType::Int32: return {INT32_MIN, INT32_MAX, 0, "int"};
    case DType::Int64: return {INT64_MIN, INT64_MAX, 0, "long"};
    case DType::Float16: return {-65504, 65504, 11, "c10::Half"};
    case DType::BFloat16: return {INT64_MIN, INT64_MAX, 8, "c10::BFloat16"};
    case DType::Float32: return {INT64_MIN, INT64_MAX, 24, "float"};
    case DType::Float64: return {INT64_MIN, INT64_MAX, 53, "double"};
    default: fail(ErrorKind::NotImplemented, "[random_] not implemented for ", dtype_name(dtype));
  }
}

// torch's warning for a floating bound outside the integers the dtype holds exactly; false when it raised.
bool warn_random_precision(const char* which, int64_t value, const RandomBounds& b) {
  const int64_t limit = int64_t{1} << b.digits;
  if (b.digits == 0 || (value >= -limit && value <= limit)) return true;
  const std::string message = std::string("[random_] ") + which + " is out of bounds [-(2^" + std::to_string(b.digits) +
                              "), 2^" + std::to_string(b.digits) + "]. Due to precision limitations " + b.type_name +
                              " can support discrete uniform distribution only within this range. This warning will "
                              "become an error in version 1.7 release, please fix the code in advance";
  return PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) == 0;
}

// Tensor.random_(*, generator=None): integers in [0, 2^digits] (floating) or [0, max] (integers);
// random_(to, *, generator=None): in [0, to); random_(from, to, *, generator=None): in [from, to), to=None: up to the
// default bound. Drawn as int64 (randint) and written in self's dtype.
PyObject* random_inplace_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("random_", {"self", "from", "to", "generator"}, 3, 1);
  PyObject* a[4] = {nullptr, nullptr, nullptr, nullptr};
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* target = to_tensor("random_", "self", a[0]);
  GeneratorSeed seed;
  if (!target || !to_generator_seed("random_", a[3], seed)) return nullptr;
  // One bound given alone (not `to=None`) is `to`: random_(to).
  PyObject* from_arg = a[1];
  PyObject* to_arg = a[2];
  if (from_arg && !to_arg) std::swap(from_arg, to_arg);
  int64_t from = 0, to = 0;
  const bool has_to = to_arg && to_arg != Py_None;
  if ((from_arg && !to_int_argument("random_", "from", from_arg, from)) ||
      (has_to && !to_int_argument("random_", "to", to_arg, to)))
    return nullptr;
  return guarded([&]() -> PyObject* {
    const RandomBounds b = random_bounds(target->dtype());
    // The inclusive upper bound: to - 1, or the dtype's default.
    const int64_t default_high = b.digits ? int64_t{1} << b.digits : b.high;
    DG_CHECK(!has_to || from < to, Runtime, "[random_] random_ expects 'from' to be less than 'to', but got from=", from,
             " >= to=", to);
    const int64_t high = has_to ? to - 1 : default_high;
    DG_CHECK(from >= b.low && from <= b.high, Runtime, "[random_] from is out of bounds for ", b.type_name);
    DG_CHECK(!has_to || (high >= b.low && high <= b.high), Runtime, "[random_] to - 1 is out of bounds for ",
             b.type_name);
    if (!warn_random_precision("from", from, b) || (has_to && !warn_random_precision("to - 1", high, b)))
      return nullptr;
    check_inplace("random_", *target);
    Tensor draws;
    {
      NoGradGuard no_grad;
      // [from, high] inclusive as randint's [from, high + 1); int64's largest value itself is left out (one in 2^63).
      const int64_t end = high == INT64_MAX ? INT64_MAX : high + 1;
      draws = randint(from, end, target->shape(), DType::Int64, target->device(), seed);
    }
    return write_fill("random_", a[0], draws);
  });
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
    DG_CHECK(p_tensor || (p.to_double() >= 0.0 && p.to_double() <= 1.0), Runtime,
             "[bernoulli_] bernoulli_ expects p to be in [0, 1], but got p=", p.to_double());
    check_inplace("bernoulli_", *target);
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
      {"uniform_", fill_random_entry<Fill::Uniform>, "uniform_(from=0, to=1, *, generator=None) -> Tensor: in place, "
                                                     "returns self", false, true},
      {"exponential_", fill_random_entry<Fill::Exponential>, "exponential_(lambd=1, *, generator=None) -> Tensor: in "
                                                             "place, returns self", false, true},
      {"geometric_", fill_random_entry<Fill::Geometric>, "geometric_(p, *, generator=None) -> Tensor: in place, returns "
                                                         "self", false, true},
      {"cauchy_", fill_random_entry<Fill::Cauchy>, "cauchy_(median=0, sigma=1, *, generator=None) -> Tensor: in place, "
                                                   "returns self", false, true},
      {"log_normal_", fill_random_entry<Fill::LogNormal>, "log_normal_(mean=1, std=2, *, generator=None) -> Tensor: in "
                                                          "place, returns self", false, true},
      {"random_", random_inplace_entry, "random_(from=0, to=None, *, generator=None) -> Tensor: integers drawn "
                                        "uniformly, in place, returns self", false, true},
      {"bernoulli", bernoulli_entry, "bernoulli(input, p=None, *, generator=None) -> Tensor: 1 with probability input (or p)", true, true},
      {"bernoulli_", bernoulli_inplace_entry, "bernoulli_(p=0.5, *, generator=None) -> Tensor: in place, returns self", false, true},
      {"multinomial", multinomial_entry, "multinomial(input, num_samples, replacement=False, *, generator=None) -> Tensor", true, true},
      {"linspace", spaced_entry<false>, "linspace(start, end, steps, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"logspace", spaced_entry<true>, "logspace(start, end, steps, base=10.0, *, dtype=None, requires_grad=False) -> Tensor", true, false},
      {"normal_", fill_random_entry<Fill::Normal>, "normal_(mean=0, std=1, *, generator=None) -> Tensor: in place, "
                                                   "returns self", false, true},
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
