// The bindings' shared machinery: Tensor wrapping, error translation, call-site capture, FASTCALL argument
// parsing and registration of op entry points as module functions and Tensor methods.
#include "common.h"

#include "dygrad/ops/device.h"
#include "dygrad/runtime/devices.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <new>
#include <string_view>
#include <typeinfo>
#include <unordered_set>

namespace dg::py {

PyTypeObject* tensor_type = nullptr;
PyTypeObject* numpy_generic_type = nullptr;

PyObject* wrap(Tensor t) {
  if (!t.defined()) Py_RETURN_NONE;
  nb::object o = nb::inst_alloc(nb::handle(reinterpret_cast<PyObject*>(tensor_type)));
  new (nb::inst_ptr<Tensor>(o)) Tensor(std::move(t));
  nb::inst_mark_ready(o);  // constructed: its destructor runs when the instance dies
  return o.release().ptr();
}

// --- errors ----------------------------------------------------------------------------------------------------
// dg.OutOfMemoryError (a RuntimeError subclass), made by init_runtime (python/src/runtime.cpp).
PyObject* g_out_of_memory_error = nullptr;
namespace {
PyObject* python_exception_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::OutOfMemory: return g_out_of_memory_error ? g_out_of_memory_error : PyExc_RuntimeError;
    case ErrorKind::Type: return PyExc_TypeError;
    case ErrorKind::Value: return PyExc_ValueError;
    case ErrorKind::Index: return PyExc_IndexError;
    case ErrorKind::NotImplemented: return PyExc_NotImplementedError;
    case ErrorKind::Runtime: break;
  }
  return PyExc_RuntimeError;
}

PyObject* python_exception_for(nb::exception_type kind) {
  switch (kind) {
    case nb::exception_type::stop_iteration: return PyExc_StopIteration;
    case nb::exception_type::index_error: return PyExc_IndexError;
    case nb::exception_type::key_error: return PyExc_KeyError;
    case nb::exception_type::value_error: return PyExc_ValueError;
    case nb::exception_type::type_error: return PyExc_TypeError;
    case nb::exception_type::buffer_error: return PyExc_BufferError;
    case nb::exception_type::import_error: return PyExc_ImportError;
    case nb::exception_type::attribute_error: return PyExc_AttributeError;
    default: return PyExc_RuntimeError;
  }
}
}  // namespace

void set_error_from_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    PyErr_SetString(python_exception_for(e.kind()), e.what());
  } catch (nb::python_error& e) {
    e.restore();
  } catch (const nb::builtin_exception& e) {
    PyErr_SetString(python_exception_for(e.type()), e.what());
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "out of memory");
  } catch (const std::bad_cast&) {  // nb::cast_error: an argument of the wrong Python type
    PyErr_SetString(PyExc_TypeError, "an argument has the wrong type (expected int, float, bool or Tensor)");
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

thread_local PendingEntry pending_entry;

void EntryScope::open() {
  const PendingEntry entry = pending_entry;
  pending_entry.name = nullptr;
  if (entry.name)
    profiler::detail::open_host_op(entry.name, entry.ns);
  else
    profiler::detail::open_host_op("operator");
}

PyObject* type_error(const char* op, const char* format, ...) {
  pending_entry.name = nullptr;  // the call ends here: its entry must not begin the next op's span
  char message[512];
  int n = std::snprintf(message, sizeof message, "[%s] ", op);
  va_list args;
  va_start(args, format);
  std::vsnprintf(message + n, sizeof message - static_cast<size_t>(n), format, args);
  va_end(args);
  PyErr_SetString(PyExc_TypeError, message);
  return nullptr;
}

const char* type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

void init_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(python_exception_for(e.kind()), e.what());
    } catch (const std::bad_cast&) {
      // nb::cast_error from a binding that casts an argument itself: a wrong Python type is a TypeError
      // (torch's), never "RuntimeError: std::bad_cast".
      PyErr_SetString(PyExc_TypeError, "an argument has the wrong type (expected int, float, bool or Tensor)");
    }
  });
}

// --- call sites ------------------------------------------------------------------------------------------------
// The line of the calling frame is cached by (code object, instruction offset): a training loop issues the
// same call sites over and over, and PyFrame_GetLineNumber walks the line table (linear in the offset).
// File and function names are kept alive for the process, so the const char* in CallSite stay valid.
namespace {
bool g_track_call_sites = true;

struct SiteCacheEntry {
  PyObject* code = nullptr;  // strong reference
  int lasti = -1;
  CallSite site;
  bool in_package = false;  // the frame is dygrad's own Python code (nn/, functional ...), not the user's
};
// The directory of dygrad's Python files (set at import by dygrad/__init__.py): a call site inside it is
// reported as the first frame outside it, the user's line that called into the module or functional.
std::string* g_package_dir = new std::string();
constexpr size_t kSiteCacheSize = 1024;
SiteCacheEntry g_site_cache[kSiteCacheSize];

const char* keep_utf8(PyObject* text) {
  static std::unordered_set<PyObject*>* kept = new std::unordered_set<PyObject*>();
  if (!text || !PyUnicode_Check(text)) return "?";
  if (kept->insert(text).second) Py_INCREF(text);
  const char* s = PyUnicode_AsUTF8(text);
  if (!s) {
    PyErr_Clear();
    return "?";
  }
  return s;
}
}  // namespace

void set_call_site_tracking(bool on) { g_track_call_sites = on; }
void set_package_dir(const std::string& dir) { *g_package_dir = dir; }
bool call_site_tracking() { return g_track_call_sites; }

namespace {
// The call site of one frame, from the cache or computed (and cached).
const SiteCacheEntry& frame_site(PyFrameObject* frame) {
  PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
  int lasti = PyFrame_GetLasti(frame);
  size_t slot = ((reinterpret_cast<uintptr_t>(code) >> 4) ^ static_cast<uintptr_t>(lasti) * 0x9E3779B1u) % kSiteCacheSize;
  SiteCacheEntry& entry = g_site_cache[slot];
  if (entry.code == reinterpret_cast<PyObject*>(code) && entry.lasti == lasti) {
    Py_DECREF(code);
    return entry;
  }
  CallSite site;
  site.file = keep_utf8(code->co_filename);
  site.function = keep_utf8(code->co_name);
  site.line = static_cast<uint32_t>(PyFrame_GetLineNumber(frame));
  PyObject* old = entry.code;
  entry.code = reinterpret_cast<PyObject*>(code);  // takes the reference
  entry.lasti = lasti;
  entry.site = site;
  entry.in_package = !g_package_dir->empty() && std::string_view(site.file).starts_with(*g_package_dir);
  Py_XDECREF(old);
  return entry;
}
}  // namespace

CallSite python_call_site() {
  if (!g_track_call_sites) return {};
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed; the caller of the builtin
  if (!frame) return {};
  const SiteCacheEntry& first = frame_site(frame);
  if (!first.in_package) return first.site;  // a user's direct call: the common, cached case
  // Called from dygrad's own Python code: the first frame outside the package (at most a few levels up).
  const CallSite innermost = first.site;
  PyFrameObject* current = PyFrame_GetBack(frame);  // new reference, or null at the bottom
  for (int depth = 0; current && depth < 32; ++depth) {
    const SiteCacheEntry& entry = frame_site(current);
    if (!entry.in_package) {
      const CallSite site = entry.site;  // copied before the cache slot can be reused
      Py_DECREF(current);
      return site;
    }
    PyFrameObject* back = PyFrame_GetBack(current);
    Py_DECREF(current);
    current = back;
  }
  Py_XDECREF(current);
  return innermost;
}

PythonCallSite::PythonCallSite() : scope_(python_call_site()) {}

// The line is looked up only when a sink will be told (a frame walk otherwise saved on every item()).
PythonHostRead::PythonHostRead(const Tensor& t, const char* reader)
    : reader_(reader, /*once=*/true), site_(op_sinks::engaged() ? python_call_site() : current_call_site()) {
  nb::gil_scoped_release release;
  t.wait_readable();
}

// --- argument parsing ------------------------------------------------------------------------------------------
Signature::Signature(const char* op, std::initializer_list<const char*> names, int num_positional, int num_required)
    : op_(op), num_names_(static_cast<int>(names.size())), num_positional_(num_positional), num_required_(num_required) {
  DG_CHECK(num_names_ <= kMaxNames, Runtime, "[", op, "] internal error: a signature of ", num_names_,
           " parameters (at most ", kMaxNames, ")");
  int i = 0;
  for (const char* n : names) names_[i++] = n;
}

bool Signature::parse(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** out) const {
  if (profiler::detail::recording()) pending_entry = {op_, profiler::now_ns()};
  for (int i = 0; i < num_names_; ++i) out[i] = nullptr;
  int next = 0;
  if (self) out[next++] = self;
  if (nargs > num_positional_ - next) {
    type_error(op_, "takes %d positional argument%s but %zd %s given", num_positional_, num_positional_ == 1 ? "" : "s",
               nargs + next, nargs + next == 1 ? "was" : "were");
    return false;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[next++] = args[i];
  if (kwnames) {
    if (!interned_[0])
      for (int i = 0; i < num_names_; ++i) interned_[i] = PyUnicode_InternFromString(names_[i]);
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; ++k) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, k);
      int found = -1;
      for (int i = 0; i < num_names_ && found < 0; ++i)
        if (key == interned_[i]) found = i;
      for (int i = 0; i < num_names_ && found < 0; ++i)
        if (PyUnicode_Compare(key, interned_[i]) == 0) found = i;
      if (found < 0) {
        type_error(op_, "got an unexpected keyword argument '%s'", PyUnicode_AsUTF8(key));
        return false;
      }
      if (out[found]) {
        type_error(op_, "got multiple values for argument '%s'", names_[found]);
        return false;
      }
      out[found] = args[nargs + k];
    }
  }
  for (int i = 0; i < num_required_; ++i)
    if (!out[i]) {
      type_error(op_, "missing required argument '%s'", names_[i]);
      return false;
    }
  return true;
}

bool to_scalar(PyObject* o, Scalar& out) {
  if (PyFloat_Check(o)) {
    out = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  if (PyBool_Check(o)) {
    out = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) [[unlikely]] {
      // Out of int64: [2**63, 2**64) is a uint64 (torch's Scalar takes it so); anything else is Python's
      // OverflowError from the unsigned conversion, as torch's.
      const unsigned long long u = PyLong_AsUnsignedLongLong(o);
      if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return false;
      out = Scalar(static_cast<uint64_t>(u));
      return true;
    }
    out = Scalar(static_cast<int64_t>(v));
    return true;
  }
  // NumPy scalars (np.float64 and np.bool_ aside, they are not int/float subclasses): through .item().
  if (numpy_generic_type && PyObject_TypeCheck(o, numpy_generic_type)) {
    PyObject* item = PyObject_CallMethod(o, "item", nullptr);
    if (!item) return PyErr_Clear(), false;
    bool ok = (PyFloat_Check(item) || PyLong_Check(item)) && to_scalar(item, out);
    Py_DECREF(item);
    return ok;
  }
  return false;
}

PyObject* not_implemented_unless_error() {
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NOTIMPLEMENTED;
}

Tensor complex_number(PyObject* o, const Tensor& beside) {
  const Py_complex c = PyComplex_AsCComplex(o);
  const bool wide = beside.dtype() == DType::Float64 || beside.dtype() == DType::Complex128;
  Tensor t = Tensor::empty(Dims{}, wide ? DType::Complex128 : DType::Complex64);
  if (wide) *static_cast<Complex<double>*>(t.raw_data()) = Complex<double>(c.real, c.imag);
  else *static_cast<Complex<float>*>(t.raw_data()) = Complex<float>(float(c.real), float(c.imag));
  return t;
}

bool to_operand(const char* op, const char* argument, PyObject* o, Operand& out, const Tensor* beside) {
  if (is_tensor(o)) {
    out.tensor = &unwrap(o);
    return true;
  }
  out.tensor = nullptr;
  if (to_scalar(o, out.scalar)) return true;
  if (PyErr_Occurred()) return false;  // an int beyond [-2**63, 2**64)
  if (beside && PyComplex_Check(o)) {
    out.number = complex_number(o, *beside);
    out.tensor = &out.number;
    return true;
  }
  type_error(op, "argument '%s' must be Tensor or Number, not %s", argument, type_name(o));
  return false;
}

const Tensor* to_tensor(const char* op, const char* argument, PyObject* o) {
  if (o && is_tensor(o)) return &unwrap(o);
  type_error(op, "argument '%s' must be Tensor, not %s", argument, o ? type_name(o) : "nothing");
  return nullptr;
}

bool to_scalar_argument(const char* op, const char* argument, PyObject* o, Scalar fallback, Scalar& out) {
  if (!o) {
    out = fallback;
    return true;
  }
  if (!is_tensor(o) && to_scalar(o, out)) return true;
  if (PyErr_Occurred()) return false;  // an int beyond [-2**63, 2**64)
  type_error(op, "argument '%s' must be Number, not %s", argument, type_name(o));
  return false;
}

bool to_bool_argument(const char* op, const char* argument, PyObject* o, bool fallback, bool& out) {
  if (!o || o == Py_None) {
    out = fallback;
    return true;
  }
  if (PyBool_Check(o)) {
    out = o == Py_True;
    return true;
  }
  type_error(op, "argument '%s' must be bool, not %s", argument, type_name(o));
  return false;
}

bool to_int_argument(const char* op, const char* argument, PyObject* o, int64_t& out) {
  if (o && !PyBool_Check(o) && !PyFloat_Check(o) && (PyLong_Check(o) || (!is_tensor(o) && PyIndex_Check(o)))) {
    PyObject* i = PyNumber_Index(o);
    if (!i) return false;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow) {
      PyErr_Format(PyExc_OverflowError, "[%s] argument '%s' does not fit in int64", op, argument);
      return false;
    }
    out = v;
    return true;
  }
  type_error(op, "argument '%s' must be int, not %s", argument, o ? type_name(o) : "nothing");
  return false;
}

bool to_int_list(const char* op, const char* argument, PyObject* o, Dims& out) {
  out.clear();
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    int64_t v;
    if (!to_int_argument(op, argument, o, v)) return false;
    out.push_back(v);
    return true;
  }
  if (!PyTuple_Check(o) && !PyList_Check(o)) {
    type_error(op, "argument '%s' must be tuple of ints, not %s", argument, type_name(o));
    return false;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  PyObject** items = PySequence_Fast_ITEMS(o);
  for (Py_ssize_t i = 0; i < n; ++i) {
    int64_t v;
    if (!to_int_argument(op, argument, items[i], v)) return false;
    out.push_back(v);
  }
  return true;
}

bool to_shape(const char* op, PyObject* const* args, Py_ssize_t count, Dims& out) {
  out.clear();
  if (count == 1 && (PyTuple_Check(args[0]) || PyList_Check(args[0]))) return to_int_list(op, "size", args[0], out);
  for (Py_ssize_t i = 0; i < count; ++i) {
    int64_t v;
    if (!to_int_argument(op, "size", args[i], v)) return false;
    out.push_back(v);
  }
  return true;
}

// --- registration ----------------------------------------------------------------------------------------------
void register_ops(nb::module_& m, std::span<const OpEntry> entries) {
  // PyMethodDefs must outlive the functions made from them: they live as long as the process.
  static std::deque<PyMethodDef>* defs = new std::deque<PyMethodDef>();
  for (const OpEntry& e : entries) {
    defs->push_back(PyMethodDef{e.name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(e.function)),
                                METH_FASTCALL | METH_KEYWORDS, e.doc});
    PyMethodDef* def = &defs->back();
    if (e.as_function) {
      nb::object f = nb::steal(PyCFunction_NewEx(def, nullptr, nb::str("dygrad").ptr()));
      if (!f.is_valid()) throw nb::python_error();
      m.attr(e.name) = f;
    }
    if (e.as_method) {
      nb::object descr = nb::steal(PyDescr_NewMethod(tensor_type, def));
      if (!descr.is_valid() || PyObject_SetAttrString(reinterpret_cast<PyObject*>(tensor_type), e.name, descr.ptr()) != 0)
        throw nb::python_error();
    }
  }
}

bool parse_factory_options(const char* op, PyObject* const* kwvalues, PyObject* kwnames, FactoryOptions& o,
                           bool accepts_generator, std::initializer_list<const char*> extra_names,
                           PyObject** extra_values) {
  if (!kwnames) return true;
  for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    std::string_view name = key ? key : "";
    PyObject* value = kwvalues[k];
    if (name == "dtype") o.dtype = value;
    else if (name == "requires_grad") o.requires_grad = value;
    else if (name == "device") o.device = value;
    else if (name == "size") o.size = value;
    else if (name == "pin_memory") o.pin_memory = value;
    else if (name == "layout" || name == "memory_format") continue;
    else if (name == "generator" && accepts_generator) o.generator = value;
    else {
      int i = 0;
      bool found = false;
      for (const char* extra : extra_names) {
        if (name == extra) {
          extra_values[i] = value;
          found = true;
        }
        ++i;
      }
      if (!found) return type_error(op, "got an unexpected keyword argument '%s'", key), false;
    }
  }
  return true;
}

namespace {
// "cpu", "cpu:N" (the CPU, as torch takes it), "test", "test:N", "cuda", "cuda:N"; false for anything else.
bool parse_device_string(std::string_view text, Device& out) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view digits = text.substr(colon + 1);
    if (digits.empty() || digits.size() > 4) return false;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
      index = index * 10 + (c - '0');
    }
  }
  if (name == "cpu") out = Device::cpu();
  else if (name == "test") out = Device{Device::Type::Test, static_cast<int16_t>(index)};
  else if (name == "cuda") out = Device{Device::Type::CUDA, static_cast<int16_t>(index)};
  else return false;
  return true;
}

// The device types dygrad.device() knows but dygrad has no tensors on (a str naming them is a device, unavailable).
bool known_unavailable_type(std::string_view text) {
  const std::string_view name = text.substr(0, text.find(':'));
  return name == "meta" || name == "mps" || name == "xpu";
}

thread_local Device t_default_device = Device::cpu();
}  // namespace

Device default_device() { return t_default_device; }
void set_default_device(Device device) { t_default_device = device; }

bool looks_like_device(PyObject* o) {
  if (!PyUnicode_Check(o)) return false;
  const char* text = PyUnicode_AsUTF8(o);
  Device d;
  if (!text) return PyErr_Clear(), false;
  return parse_device_string(text, d) || known_unavailable_type(text);
}

bool to_device_arg(const char* op, PyObject* o, Device& out) {
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    const long index = PyLong_AsLong(o);
    if (index < 0 || index >= kMaxCudaDevices) {
      PyErr_Format(PyExc_RuntimeError, "[%s] invalid device index %ld", op, index);
      return false;
    }
    out = Device{Device::Type::CUDA, static_cast<int16_t>(index)};
    return true;
  }
  const char* text = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : nullptr;
  if (!text) {
    if (!PyErr_Occurred()) type_error(op, "expected a device (a str such as 'cpu' or 'test:0'), got %s", Py_TYPE(o)->tp_name);
    return false;
  }
  if (parse_device_string(text, out)) return true;
  if (known_unavailable_type(text))
    PyErr_Format(PyExc_RuntimeError, "[%s] device '%s' is not available (dygrad's devices: cpu, test:N when the test "
                 "device is on, cuda:N with the CUDA backend)", op, text);
  else  // torch's message for a device type it does not know
    PyErr_Format(PyExc_RuntimeError, "[%s] Expected one of cpu, cuda, mps, meta, xpu, test device type at start of "
                 "device string: %s", op, text);
  return false;
}

bool device_available(const char* op, Device device) {
  if (device.is_cpu()) [[likely]] return true;
  try {
    dg::check_device_available(op, device);  // the one message (runtime/devices.h)
    return true;
  } catch (const Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return false;
  }
}

bool resolve_factory_options(const char* op, const FactoryOptions& o, DType fallback, TensorOptions& out,
                             const Device* fallback_device) {
  out.dtype = fallback;
  if (o.dtype && o.dtype != Py_None && !to_dtype(op, o.dtype, out.dtype)) return false;
  if (!to_bool_argument(op, "requires_grad", o.requires_grad, false, out.requires_grad)) return false;
  if (o.device && o.device != Py_None) {
    if (!to_device_arg(op, o.device, out.device)) return false;
  } else {
    out.device = fallback_device ? *fallback_device : t_default_device;
  }
  if (!device_available(op, out.device)) return false;
  if (!to_bool_argument(op, "pin_memory", o.pin_memory, false, out.pinned)) return false;
  if (!out.pinned) [[likely]] return true;
  try {  // torch's checks: a CPU tensor, and an accelerator whose pinned memory it takes
    DG_CHECK(out.device.is_cpu(), Runtime, "[", op, "] only dense CPU tensors can be pinned, not ", out.device.str(),
             " ones");
    check_pinned_memory_available(op);
    return true;
  } catch (const Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return false;
  }
}

Tensor factory_on_device(Tensor t, const TensorOptions& options) {
  if (options.pinned && !t.storage().is_pinned()) t = pin_memory(t);  // t has no history: neither has the copy
  if (t.device() != options.device) t = to_device(t, options.device);  // t has no history: the copy has none
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

bool factory_shape(const char* op, PyObject* const* args, Py_ssize_t nargs, const FactoryOptions& o, Dims& shape) {
  if (o.size) {
    if (nargs > 0) return type_error(op, "got multiple values for argument 'size'"), false;
    return to_int_list(op, "size", o.size, shape);
  }
  return to_shape(op, args, nargs, shape);
}

}  // namespace dg::py
