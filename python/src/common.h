// Shared machinery of the bindings: the Tensor type and its fast wrap/unwrap, argument parsing for the
// FASTCALL entry points (ops), Python scalars/dtypes/shapes, error translation and call-site capture.
// See python/README.md for how an op is bound.
#pragma once
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <initializer_list>
#include <span>

#include "dygrad/dygrad.h"
#include "dygrad/profiler/profiler.h"
#include "dygrad/runtime/op_sink.h"

namespace nb = nanobind;

namespace dg::py {

// An op's name as a template argument (binary_tensor_entry<"maximum", maximum>): one table line binds an op.
template <size_t N>
struct OpName {
  constexpr OpName(const char (&s)[N]) {  // NOLINT: implicit, from the literal
    for (size_t i = 0; i < N; ++i) value[i] = s[i];
  }
  char value[N];
};

// --- the Tensor type -----------------------------------------------------------------------------------------
// dygrad._C.Tensor is a nanobind class whose instances hold a dg::Tensor (one Ref<TensorImpl>) inline.
// Hot paths skip nanobind's type lookup: they test Py_TYPE against the cached type and place the Tensor
// into a freshly allocated instance directly.
extern PyTypeObject* tensor_type;
extern PyTypeObject* numpy_generic_type;  // numpy.generic, set by init_interop (null without NumPy)

inline bool is_tensor(PyObject* o) {
  PyTypeObject* t = Py_TYPE(o);
  return t == tensor_type || PyType_IsSubtype(t, tensor_type);
}
inline Tensor& unwrap(PyObject* o) { return *nb::inst_ptr<Tensor>(nb::handle(o)); }
// A new reference to a Python Tensor holding `t` (None when t is undefined); nullptr with an error set.
PyObject* wrap(Tensor t);
inline nb::object wrap_object(Tensor t) { return nb::steal(wrap(std::move(t))); }

// --- errors --------------------------------------------------------------------------------------------------
// Sets the Python exception for the exception being handled (call inside a catch block).
void set_error_from_current_exception();
// TypeError "[op] message" and nullptr, for argument checks in FASTCALL entry points.
PyObject* type_error(const char* op, const char* format, ...);
// The Python name of an object's type, for messages ("str", "NoneType").
const char* type_name(PyObject* o);

// Records the Python caller's file, function and line as the call site of the ops issued in this scope,
// so a deferred kernel error names the Python line (docs: python/README.md, "call sites").
class PythonCallSite {
 public:
  PythonCallSite();
  PythonCallSite(const PythonCallSite&) = delete;
  PythonCallSite& operator=(const PythonCallSite&) = delete;

 private:
  CallSiteScope scope_;
};
CallSite python_call_site();

// A host read from Python (item, tolist, numpy, bool(t)...): for the scope, the op sinks are told `reader` and the
// user's line (runtime/op_sink.h); the constructor waits for the tensor without holding the GIL.
class PythonHostRead {
 public:
  PythonHostRead(const Tensor& t, const char* reader);
  PythonHostRead(const PythonHostRead&) = delete;
  PythonHostRead& operator=(const PythonHostRead&) = delete;

 private:
  HostReadScope reader_;
  CallSiteScope site_;
};
void set_call_site_tracking(bool on);
void set_package_dir(const std::string& dir);  // dygrad's Python files: call sites skip frames inside it
bool call_site_tracking();

// The profiler's host span of an op begins at its Python entry point: Signature::parse notes the entry
// (only while a profiler records) and guarded() opens the op's HostOpScope from that instant. An entry
// point without a Signature (an operator slot) opens it at guarded() under the name "operator".
struct PendingEntry {
  const char* name = nullptr;
  int64_t ns = 0;
};
extern thread_local PendingEntry pending_entry;
class EntryScope {
 public:
  EntryScope() : engaged_(profiler::detail::recording()) {
    if (engaged_) open();
  }
  ~EntryScope() {
    if (engaged_) profiler::detail::close_host_op();
  }
  EntryScope(const EntryScope&) = delete;
  EntryScope& operator=(const EntryScope&) = delete;

 private:
  static void open();
  bool engaged_;
};

// Runs `body` (returning a new reference) with the call site recorded, the profiler's op scope open and
// C++ errors translated.
template <typename F>
PyObject* guarded(F&& body) noexcept {
  try {
    PythonCallSite site;
    EntryScope entry;
    return body();
  } catch (...) {
    set_error_from_current_exception();
    return nullptr;
  }
}

// --- argument parsing for FASTCALL entry points -----------------------------------------------------------------
using FastcallFunction = PyObject* (*)(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);

// A Python signature: `names` are the parameters in order; the first `num_positional` may be passed by
// position, the rest only by keyword; the first `num_required` must be given. When the entry point is
// called as a Tensor method, `self` fills parameter 0.
class Signature {
 public:
  Signature(const char* op, std::initializer_list<const char*> names, int num_positional, int num_required);
  // Fills out[0..size()) with borrowed references (nullptr: not given). False with a TypeError set.
  bool parse(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, PyObject** out) const;
  const char* op() const { return op_; }
  int size() const { return num_names_; }

 private:
  static constexpr int kMaxNames = 16;
  const char* op_;
  const char* names_[kMaxNames];
  mutable PyObject* interned_[kMaxNames] = {};
  int num_names_, num_positional_, num_required_;
};

// A Tensor-or-number operand.
struct Operand {
  const Tensor* tensor = nullptr;
  Scalar scalar;
  Tensor number;  // a Python complex number, as a zero-dim tensor (tensor points here)
};
// A Python complex number beside a tensor, as a zero-dim CPU tensor of torch's dtype for it: complex128 beside a
// float64 or complex128 tensor, else complex64 (torch's default complex dtype; docs/dtypes.md, "Complex").
Tensor complex_number(PyObject* o, const Tensor& beside);
// Python bool/int/float (and NumPy scalars) as a Scalar: an int in [2**63, 2**64) is a UInt (docs/dtypes.md,
// "Python ints beyond int64"). False (no error set) when `o` is not a number; false with torch's OverflowError set
// for an int outside [-2**63, 2**64) (Python's own "int too big to convert", "can't convert negative int to unsigned").
bool to_scalar(PyObject* o, Scalar& out);
// The end of an operator slot whose operand was neither a tensor nor a number: NotImplemented, or null where
// to_scalar raised its OverflowError.
PyObject* not_implemented_unless_error();
// A Tensor or a number; false with a TypeError naming the op and the argument.
// A Python complex number is accepted when `beside` (the op's tensor operand) is given.
bool to_operand(const char* op, const char* argument, PyObject* o, Operand& out, const Tensor* beside = nullptr);
// A Tensor argument; nullptr with a TypeError.
const Tensor* to_tensor(const char* op, const char* argument, PyObject* o);
// A number argument (alpha=...); `fallback` when o is null. False with a TypeError.
bool to_scalar_argument(const char* op, const char* argument, PyObject* o, Scalar fallback, Scalar& out);
bool to_bool_argument(const char* op, const char* argument, PyObject* o, bool fallback, bool& out);
bool to_int_argument(const char* op, const char* argument, PyObject* o, int64_t& out);
// dygrad.return_types.<name> (torch.return_types.<name>: a named tuple of values and indices) holding `r`, for
// name "max", "min", "sort" or "topk"; null with a Python error set on failure.
PyObject* wrap_values_indices(const char* name, ValuesIndices r);
// Absent or None leaves `out` undefined; otherwise a Tensor (TypeError naming the argument).
bool to_optional_tensor(const char* op, const char* argument, PyObject* o, Tensor& out);
// A Python number as double; absent: `fallback`.
bool to_double_argument(const char* op, const char* argument, PyObject* o, double fallback, double& out);
// A str; absent leaves `out` as it is.
bool to_string_argument(const char* op, const char* argument, PyObject* o, std::string_view& out);
// A shape given as ints (`*size`, in args[first..nargs)) or as one sequence: zeros(2, 3), zeros((2, 3)).
bool to_shape(const char* op, PyObject* const* args, Py_ssize_t count, Dims& out);

// --- factory keywords ---------------------------------------------------------------------------------------
// The keywords torch's factories take: dtype, requires_grad, device, size, and the ignored
// layout/pin_memory/memory_format (generator= too when `accepts_generator`: the op reads it, to_generator_seed).
// Op-specific keywords are named in `extra_names` and returned in extra_values (borrowed; untouched when not given).
struct FactoryOptions {
  PyObject* generator = nullptr;
  PyObject* dtype = nullptr;
  PyObject* requires_grad = nullptr;
  PyObject* device = nullptr;
  PyObject* size = nullptr;
  PyObject* pin_memory = nullptr;
};
bool parse_factory_options(const char* op, PyObject* const* kwvalues, PyObject* kwnames, FactoryOptions& o,
                           bool accepts_generator = false, std::initializer_list<const char*> extra_names = {},
                           PyObject** extra_values = nullptr);
// dtype (else `fallback`), requires_grad, and the device: device= if given, else `fallback_device` (the *_like and
// new_* factories pass their input's), else this thread's default device. False with a Python error naming the op
// when the device is not a device or is not available.
bool resolve_factory_options(const char* op, const FactoryOptions& o, DType fallback, TensorOptions& out,
                             const Device* fallback_device = nullptr);
// The device factories build on when they are given none: dygrad.set_default_device / `with dygrad.device(d):`.
// Per thread, as torch's (a new thread starts on the CPU); the CPU until set.
Device default_device();
void set_default_device(Device device);
// False with a RuntimeError naming the op when `device` is not available (the test device off, no CUDA backend).
bool device_available(const char* op, Device device);
// A factory whose op builds on the host (the random and range ops take no device): called with
// `without_grad(options)`, its result goes through factory_on_device, which copies it to options.device (nothing
// when the op already built it there) and then sets requires_grad, so the tensor returned is a leaf.
inline TensorOptions without_grad(TensorOptions options) {
  options.requires_grad = false;
  return options;
}
Tensor factory_on_device(Tensor t, const TensorOptions& options);
// The shape from `size=` or from the positional arguments (*size or one sequence).
bool factory_shape(const char* op, PyObject* const* args, Py_ssize_t nargs, const FactoryOptions& o, Dims& shape);
bool to_int_list(const char* op, const char* argument, PyObject* o, Dims& out);

// --- dtypes --------------------------------------------------------------------------------------------------
// dygrad.float32 etc. are instances of dygrad._C.dtype; the `dtype` property returns these singletons.
PyObject* dtype_object(DType t);  // borrowed
// A dtype argument: a dygrad dtype, a NumPy dtype or type, or float/int/bool. False with a TypeError.
bool to_dtype(const char* op, PyObject* o, DType& out);
// A device argument: "cpu", "test", "test:1", "cuda:0" (a str or dygrad.device), or an int (a CUDA index, as torch).
// False with a Python error naming the op when it is not a device; whether the device exists is the op's check
// (device_available).
bool to_device_arg(const char* op, PyObject* o, Device& out);
// Whether `o` names a device (a str that parses as one), for arguments that take a device or a dtype.
bool looks_like_device(PyObject* o);
bool is_dtype_object(PyObject* o);  // a dygrad dtype (dygrad.float32 ...)
// NumPy's type for a DType ("float32"); nullptr for bfloat16.
const char* numpy_dtype_name(DType t);

// --- module registration ---------------------------------------------------------------------------------------
struct OpEntry {
  const char* name;
  FastcallFunction function;
  const char* doc;
  bool as_function;  // dygrad.<name>(...)
  bool as_method;    // Tensor.<name>(...)
};
// Adds the entries as module functions and/or Tensor methods (FASTCALL: argument parsing only).
void register_ops(nb::module_& m, std::span<const OpEntry> entries);

void init_errors(nb::module_& m);
void init_dtype(nb::module_& m);
void init_tensor(nb::module_& m);
void init_interop(nb::module_& m);
void init_ops_arithmetic(nb::module_& m);
void init_ops_shape(nb::module_& m);
void init_ops_reduce(nb::module_& m);
void init_factories(nb::module_& m);
void init_ops_math(nb::module_& m);
void init_ops_compare(nb::module_& m);
void init_ops_nn(nb::module_& m);
void init_ops_index(nb::module_& m);
void init_ops_fused(nb::module_& m);
void init_ops_random(nb::module_& m);
void init_ops_sort(nb::module_& m);
void init_ops_linalg(nb::module_& m);
void init_autograd(nb::module_& m);
void init_autocast(nb::module_& m);  // autocast.cpp
void init_runtime(nb::module_& m);
void init_profiler(nb::module_& m);
void init_distributed(nb::module_& m);  // distributed.cpp

// Defers a Py_DECREF to a thread that holds the GIL when called without it (the stream worker frees
// Storages whose memory a NumPy array owns). See interop.cpp.
void release_python_object(PyObject* o);

}  // namespace dg::py
