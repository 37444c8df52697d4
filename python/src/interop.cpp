// NumPy and Python data interop: dygrad.tensor (copies, dtype inferred as torch.tensor infers it),
// dygrad.from_numpy and Tensor.numpy() (zero-copy both ways), Tensor.tolist(), and the deferred release of
// Python objects whose memory a Storage borrows (the stream worker may drop the last reference without
// the GIL).
#include <nanobind/ndarray.h>

#include <algorithm>
#include <atomic>
#include <complex>
#include <cstring>
#include <mutex>
#include <vector>

#include "common.h"
#include "dygrad/ops/complex.h"
#include "dygrad/ops/device.h"

namespace dg::py {

nb::object item_object(const Tensor& t);  // tensor.cpp

// --- deferred release ------------------------------------------------------------------------------------------
namespace {
std::mutex g_release_mutex;
std::vector<PyObject*>* g_pending_release = new std::vector<PyObject*>();  // guarded by g_release_mutex
std::atomic<bool> g_release_scheduled{false};
std::atomic<bool> g_interpreter_exiting{false};

int drain_pending_releases(void*) {
  std::vector<PyObject*> objects;
  {
    std::lock_guard<std::mutex> lock(g_release_mutex);
    objects.swap(*g_pending_release);
    g_release_scheduled.store(false);
  }
  for (PyObject* o : objects) Py_DECREF(o);
  return 0;
}

PyTypeObject* g_ndarray_type = nullptr;  // numpy.ndarray
}  // namespace

void release_python_object(PyObject* o) {
  if (g_interpreter_exiting.load()) return;  // after Python's atexit: the process is going away
  if (PyGILState_Check()) {
    Py_DECREF(o);
    return;
  }
  std::lock_guard<std::mutex> lock(g_release_mutex);
  g_pending_release->push_back(o);
  // The main thread runs the release at its next bytecode boundary (a sync point also drains the list).
  if (!g_release_scheduled.exchange(true) && Py_AddPendingCall(drain_pending_releases, nullptr) != 0)
    g_release_scheduled.store(false);
}

namespace {
// --- NumPy buffers -> dtype --------------------------------------------------------------------------------------
constexpr const char* kSupportedNumpyTypes =
    "The only supported types are: complex128, complex64, float64, float32, float16, int64, int32, int16, int8, "
    "uint64, uint32, uint16, uint8, and bool.";

bool dtype_from_format(const Py_buffer& view, DType& out) {
  const char* f = view.format ? view.format : "B";
  if (*f == '@' || *f == '=' || *f == '<') ++f;
  if (*f == '>' || *f == '!' || f[0] == '\0' || (f[1] != '\0' && f[0] != 'Z')) return false;
  switch (*f) {
    case '?': out = DType::Bool; return view.itemsize == 1;
    case 'B': out = DType::UInt8; return view.itemsize == 1;
    case 'b': out = DType::Int8; return view.itemsize == 1;
    case 'h': out = DType::Int16; return view.itemsize == 2;
    case 'H': out = DType::UInt16; return view.itemsize == 2;
    case 'i': case 'l': case 'q':
      if (view.itemsize == 4) return out = DType::Int32, true;
      if (view.itemsize == 8) return out = DType::Int64, true;
      return false;
    case 'I': case 'L': case 'Q':
      if (view.itemsize == 4) return out = DType::UInt32, true;
      if (view.itemsize == 8) return out = DType::UInt64, true;
      return false;
    case 'e': out = DType::Float16; return view.itemsize == 2;
    case 'f': out = DType::Float32; return view.itemsize == 4;
    case 'd': out = DType::Float64; return view.itemsize == 8;
    case 'Z':  // NumPy's complex formats: "Zf", "Zd"
      if (f[1] == 'f' && f[2] == '\0' && view.itemsize == 8) return out = DType::Complex64, true;
      if (f[1] == 'd' && f[2] == '\0' && view.itemsize == 16) return out = DType::Complex128, true;
      return false;
    default: return false;
  }
}

std::string numpy_type_name(PyObject* array) {
  nb::object dtype = nb::steal(PyObject_GetAttrString(array, "dtype"));
  if (!dtype.is_valid()) return PyErr_Clear(), "unknown";
  return nb::cast<std::string>(nb::str(dtype));
}

bool is_ndarray(PyObject* o) { return g_ndarray_type && PyObject_TypeCheck(o, g_ndarray_type); }

// A Py_buffer that is released when it goes out of scope.
struct Buffer {
  Py_buffer view{};
  bool held = false;
  ~Buffer() {
    if (held) PyBuffer_Release(&view);
  }
};

// from_numpy: a Tensor over the array's memory; the Storage holds a reference to the array.
Tensor tensor_from_array(PyObject* array) {
  DG_CHECK(is_ndarray(array), Type, "[from_numpy] expected np.ndarray (got ", type_name(array), ")");
  Buffer buffer;
  bool writable = true;
  if (PyObject_GetBuffer(array, &buffer.view, PyBUF_STRIDES | PyBUF_FORMAT | PyBUF_WRITABLE) != 0) {
    PyErr_Clear();
    writable = false;
    if (PyObject_GetBuffer(array, &buffer.view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) throw nb::python_error();
  }
  buffer.held = true;
  DType dtype;
  DG_CHECK(dtype_from_format(buffer.view, dtype), Type, "[from_numpy] can't convert np.ndarray of type ",
           numpy_type_name(array), ". ", kSupportedNumpyTypes);
  if (!writable &&
      PyErr_WarnEx(PyExc_UserWarning, "[from_numpy] The given NumPy array is not writable; writing to the tensor "
                   "is undefined behaviour.", 1) != 0)
    throw nb::python_error();
  const int ndim = buffer.view.ndim;
  DG_CHECK(ndim <= 64, Value, "[from_numpy] arrays of more than 64 dimensions are not supported (got ", ndim, ")");
  Dims sizes, strides;
  int64_t max_offset = 0;
  bool empty = false;
  for (int d = 0; d < ndim; ++d) {
    int64_t size = buffer.view.shape[d];
    int64_t stride_bytes = buffer.view.strides ? buffer.view.strides[d] : 0;
    DG_CHECK(stride_bytes >= 0, Value, "[from_numpy] At least one stride in the given numpy array is negative, and "
             "tensors with negative strides are not currently supported. (You can probably work around this by making "
             "a copy of your array with array.copy().)");
    DG_CHECK(stride_bytes % buffer.view.itemsize == 0, Value, "[from_numpy] given numpy array strides not a multiple "
             "of the element byte size. Copy the numpy array to reallocate the memory.");
    sizes.push_back(size);
    strides.push_back(stride_bytes / buffer.view.itemsize);
    if (size == 0) empty = true;
    else max_offset += (size - 1) * strides.back();
  }
  if (!buffer.view.strides) strides = contiguous_strides(sizes);
  size_t nbytes = empty ? 0 : static_cast<size_t>(max_offset + 1) * static_cast<size_t>(buffer.view.itemsize);
  Py_INCREF(array);
  Ref<Storage> storage = Storage::wrap_external(buffer.view.buf, nbytes,
                                                [](void* o) { release_python_object(static_cast<PyObject*>(o)); },
                                                array);
  return Tensor(make_ref<TensorImpl>(std::move(storage), std::move(sizes), std::move(strides), 0, dtype));
}

// --- dygrad.tensor from Python data -------------------------------------------------------------------------------
enum class ValueKind { Bool, Int, Float, Complex };

struct Gathered {
  Dims shape;
  std::vector<Scalar> values;
  std::vector<double> imaginary;  // the imaginary parts, once a complex number is seen (values: the real parts)
  ValueKind kind = ValueKind::Bool;
  bool any = false;
  DType array_dtype = DType::Float32;  // for NumPy arrays (kept as they are)
  // Positions of ints outside int64, held in `values` as a UInt in [2**63, 2**64) and as the rounded double beyond:
  // a floating target rounds them, a bool one makes them True, a uint64 one takes the UInts and raises Python's
  // OverflowError for the others, any other target refuses them (torch's rules; docs/dtypes.md).
  std::vector<size_t> beyond_int64;
  // One-element tensors in the data are numbers whose dtype joins the inference (torch's infer_scalar_type: the
  // promote_types of every element's type, a tensor's being its dtype). `tensor_dtype`: that promotion, once a tensor
  // is seen; the other flags are what only the target dtype decides on (torch's errors are raised after inference).
  std::optional<DType> tensor_dtype;
  bool multi_element_tensor = false;  // a tensor of more than one element where a number belongs
  bool floating_tensor = false;       // a floating or complex tensor (an integer or bool target refuses it)
  bool complex_tensor_imaginary = false;  // a complex tensor with a nonzero imaginary part
  bool in_tensor_item = false;            // gathering a tensor's element (not a Python number of the data)
  std::optional<ValueKind> number_kind;   // the widest kind among the data's own Python numbers
};

// A Python number of the data (not a tensor's element) of kind `k`.
void note_number(Gathered& g, ValueKind k) {
  if (!g.in_tensor_item && (!g.number_kind || k > *g.number_kind)) g.number_kind = k;
}

// The dtype numbers of kind `kind` infer (torch's defaults).
DType number_dtype(ValueKind kind) {
  switch (kind) {
    case ValueKind::Bool: return DType::Bool;
    case ValueKind::Int: return DType::Int64;
    case ValueKind::Float: return DType::Float32;
    case ValueKind::Complex: return DType::Complex64;
  }
  return DType::Float32;
}

// An int outside int64's range into `g` (see Gathered::beyond_int64).
bool gather_beyond_int64(PyObject* o, size_t depth, Gathered& g) {
  if (!PyLong_Check(o) || PyBool_Check(o)) return false;
  int overflow = 0;
  PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow == 0) return false;
  Scalar value;
  const unsigned long long bits = overflow > 0 ? PyLong_AsUnsignedLongLong(o) : 0;
  if (overflow > 0 && !PyErr_Occurred()) {
    value = Scalar(static_cast<uint64_t>(bits));
  } else {
    PyErr_Clear();
    const double rounded = PyLong_AsDouble(o);  // OverflowError beyond float64's range, as torch's
    if (rounded == -1.0 && PyErr_Occurred()) throw nb::python_error();
    value = Scalar(rounded);
  }
  DG_CHECK(depth == g.shape.size(), Value, "[tensor] expected a sequence at dim ", depth, " (got a number)");
  g.beyond_int64.push_back(g.values.size());
  note_number(g, ValueKind::Int);
  g.values.push_back(value);
  if (!g.any || g.kind < ValueKind::Int) g.kind = ValueKind::Int;
  g.any = true;
  return true;
}

void note_kind(Gathered& g, const Scalar& s) {
  ValueKind k = s.is_floating() ? ValueKind::Float : s.is_integral() ? ValueKind::Int : ValueKind::Bool;
  note_number(g, k);
  if (!g.any || k > g.kind) g.kind = k;
  g.any = true;
}

void gather(PyObject* o, size_t depth, Gathered& g) {
  DG_CHECK(depth <= 32, Value, "[tensor] too many dimensions (more than 32)");
  Scalar s;
  if (is_tensor(o) && depth == g.shape.size()) {
    // A tensor where a number may stand (never descended into for the sizes): its one element, as torch's.
    const Tensor& t = unwrap(o);
    g.tensor_dtype = g.tensor_dtype ? promote_types(*g.tensor_dtype, t.dtype()) : t.dtype();
    g.floating_tensor = g.floating_tensor || !is_integral(t.dtype(), true);
    if (t.numel() != 1) {
      g.multi_element_tensor = true;
      g.values.push_back(Scalar(0.0));
      if (g.kind == ValueKind::Complex) g.imaginary.push_back(0.0);
      g.any = true;
      return;
    }
    if (t.requires_grad() &&
        PyErr_WarnEx(PyExc_UserWarning, "Converting a tensor with requires_grad=True to a scalar may lead to unexpected "
                     "behavior.\nConsider using tensor.detach() first.", 1) != 0)
      throw nb::python_error();
    nb::object item = item_object(reshape(detach(t), Dims{}));
    if (PyComplex_Check(item.ptr()) && PyComplex_ImagAsDouble(item.ptr()) != 0.0) g.complex_tensor_imaginary = true;
    g.in_tensor_item = true;
    gather(item.ptr(), depth, g);
    g.in_tensor_item = false;
    return;
  }
  if (is_tensor(o)) {
    // A tensor where the sizes (set by the first elements) say a sequence belongs: its elements, by dim 0 (torch
    // iterates it); its dtype joins the inference as a number's would.
    const Tensor& t = unwrap(o);
    DG_CHECK(t.dim() > 0, Value, "[tensor] expected a sequence at dim ", depth, " (got a 0-d tensor)");
    g.tensor_dtype = g.tensor_dtype ? promote_types(*g.tensor_dtype, t.dtype()) : t.dtype();
    nb::object pieces = nb::steal(PyObject_CallMethod(o, "unbind", nullptr));
    if (!pieces.is_valid()) throw nb::python_error();
    gather(pieces.ptr(), depth, g);
    return;
  }
  if (gather_beyond_int64(o, depth, g)) return;
  if (to_scalar(o, s)) {
    DG_CHECK(depth == g.shape.size(), Value, "[tensor] expected a sequence at dim ", depth, " (got a number)");
    note_kind(g, s);
    g.values.push_back(s);
    if (g.kind == ValueKind::Complex) g.imaginary.push_back(0.0);
    return;
  }
  if (PyComplex_Check(o)) {
    DG_CHECK(depth == g.shape.size(), Value, "[tensor] expected a sequence at dim ", depth, " (got a number)");
    g.imaginary.resize(g.values.size(), 0.0);
    g.values.push_back(Scalar(PyComplex_RealAsDouble(o)));
    g.imaginary.push_back(PyComplex_ImagAsDouble(o));
    note_number(g, ValueKind::Complex);
    g.kind = ValueKind::Complex;
    g.any = true;
    return;
  }
  DG_CHECK(!PyUnicode_Check(o) && !PyBytes_Check(o) && PySequence_Check(o), Type,
           "[tensor] new(): invalid data type '", type_name(o), "'");
  nb::object seq = nb::steal(PySequence_Fast(o, "[tensor] expected a sequence"));
  if (!seq.is_valid()) throw nb::python_error();
  const int64_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  if (depth == g.shape.size()) {
    // After a tensor of many elements where a number belongs, torch's error is that tensor's.
    DG_CHECK(g.values.empty() || !g.multi_element_tensor, Value, "[tensor] only one element tensors can be converted "
             "to Python scalars");
    DG_CHECK(g.values.empty(), Value, "[tensor] expected a number at dim ", depth, " (got a sequence)");
    g.shape.push_back(n);
  } else {
    DG_CHECK(depth < g.shape.size() && g.shape[depth] == n, Value, "[tensor] expected sequence of length ",
             depth < g.shape.size() ? g.shape[depth] : 0, " at dim ", depth, " (got ", n, ")");
  }
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  for (int64_t i = 0; i < n; ++i) gather(items[i], depth + 1, g);
}

// A contiguous copy of a NumPy array (made on the host, now: the array may change after the call).
Tensor copy_array(PyObject* array) {
  nb::object numpy = nb::module_::import_("numpy");
  nb::object contiguous = numpy.attr("asarray")(nb::handle(array), nb::arg("order") = "C");  // keeps 0-d
  Buffer buffer;
  if (PyObject_GetBuffer(contiguous.ptr(), &buffer.view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) throw nb::python_error();
  buffer.held = true;
  DType dtype;
  DG_CHECK(dtype_from_format(buffer.view, dtype), Type, "[tensor] can't convert np.ndarray of type ",
           numpy_type_name(array), ". ", kSupportedNumpyTypes);
  Dims sizes;
  for (int d = 0; d < buffer.view.ndim; ++d) sizes.push_back(buffer.view.shape[d]);
  Tensor out = [&] {
    HostAllocationScope host;  // memory no queued Task still uses: the host writes it directly
    return Tensor::empty(sizes, dtype);
  }();
  if (buffer.view.len > 0) std::memcpy(out.raw_data(), buffer.view.buf, static_cast<size_t>(buffer.view.len));
  return out;
}

Tensor tensor_from_data(PyObject* data, const DType* dtype) {
  if (is_tensor(data)) {
    Tensor src = detach(unwrap(data));
    return dtype ? to(src, *dtype, true) : clone(src);
  }
  if (is_ndarray(data) || (numpy_generic_type && PyObject_TypeCheck(data, numpy_generic_type))) {
    nb::object array = nb::module_::import_("numpy").attr("asarray")(nb::handle(data));
    Tensor t = copy_array(array.ptr());
    return dtype && *dtype != t.dtype() ? to(t, *dtype) : t;
  }
  Gathered g;
  gather(data, 0, g);
  DType inferred = number_dtype(g.kind);
  if (!g.any && g.shape.size() > 0) inferred = DType::Float32;  // [] -> float32, as torch
  // With tensors among the numbers: the promotion of their dtypes with the numbers' (a float32 and a float64 tensor
  // give float64, an int32 tensor and a Python int int64).
  if (g.tensor_dtype)
    inferred = g.number_kind ? promote_types(*g.tensor_dtype, number_dtype(*g.number_kind)) : *g.tensor_dtype;
  DType target = dtype ? *dtype : inferred;
  if (g.tensor_dtype) {
    // torch stores a tensor into an integer or bool target through __index__, into any other through __float__.
    const bool integral_target = is_integral(target, true);
    DG_CHECK(!(integral_target && (g.floating_tensor || g.multi_element_tensor)), Type, "[tensor] only integer "
             "tensors of a single element can be converted to an index");
    DG_CHECK(!g.multi_element_tensor, Value, "[tensor] only one element tensors can be converted to Python scalars");
    DG_CHECK(is_complex(target) || !g.complex_tensor_imaginary, Runtime, "[tensor] value cannot be converted to type "
             "double without overflow");
  }
  if (!g.beyond_int64.empty()) [[unlikely]] {
    if (target == DType::UInt64) {  // element by element, as torch: the first bad one names the error
      for (size_t i = 0, next = 0; i < g.values.size(); ++i) {
        const bool beyond = next < g.beyond_int64.size() && g.beyond_int64[next] == i;
        next += beyond;
        const Scalar& v = g.values[i];
        if (v.is_uint()) continue;
        DG_CHECK(beyond || !v.is_floating(), Type, "[tensor] an integer is required");
        if (beyond || v.to_double() < 0) {
          PyErr_SetString(PyExc_OverflowError, v.to_double() < 0 ? "can't convert negative int to unsigned"
                                                                 : "int too big to convert");
          throw nb::python_error();
        }
      }
    } else if (target == DType::Bool) {
      for (size_t i : g.beyond_int64) g.values[i] = Scalar(true);  // nonzero
    } else {
      DG_CHECK(is_floating(target) || is_complex(target), Value, "[tensor] Overflow when unpacking long long");
    }
  }
  if (g.kind == ValueKind::Complex) {  // float64 pairs [..., 2], viewed as complex128, then converted
    g.imaginary.resize(g.values.size(), 0.0);
    std::vector<double> pairs(2 * g.values.size());
    for (size_t i = 0; i < g.values.size(); ++i) pairs[2 * i] = g.values[i].to_double(), pairs[2 * i + 1] = g.imaginary[i];
    Dims pair_shape = g.shape;
    pair_shape.push_back(2);
    const Tensor z = view_as_complex(from_vector<double>(pairs, pair_shape, DType::Float64));
    return to(z, target, true);
  }
  if (g.kind == ValueKind::Float || is_floating(target)) {
    std::vector<double> values(g.values.size());
    for (size_t i = 0; i < values.size(); ++i) values[i] = g.values[i].to_double();
    return from_vector<double>(values, g.shape, target);
  }
  std::vector<int64_t> values(g.values.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = g.values[i].to_int();
  return from_vector<int64_t>(values, g.shape, target);
}

PyObject* tensor_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("tensor", {"data", "dtype", "device", "requires_grad", "pin_memory"}, 1, 1);
  PyObject* a[5];
  if (!sig.parse(nullptr, args, nargs, kwnames, a)) return nullptr;
  DType dtype;
  if (a[1] && a[1] != Py_None && !to_dtype("tensor", a[1], dtype)) return nullptr;
  bool requires_grad;
  if (!to_bool_argument("tensor", "requires_grad", a[3], false, requires_grad)) return nullptr;
  // The device: device=, else the default device; a tensor's copy stays on its device while that is the CPU (torch
  // copies a tensor where it is unless a default device is set).
  Device device = is_tensor(a[0]) && default_device().is_cpu() ? unwrap(a[0]).device() : default_device();
  if (a[2] && a[2] != Py_None && !to_device_arg("tensor", a[2], device)) return nullptr;
  if (!device_available("tensor", device)) return nullptr;
  bool pinned;
  if (!to_bool_argument("tensor", "pin_memory", a[4], false, pinned)) return nullptr;
  return guarded([&] {
    DG_CHECK(!pinned || device.is_cpu(), Runtime, "[tensor] only dense CPU tensors can be pinned, not ", device.str(),
             " ones");
    const DType* cast = a[1] && a[1] != Py_None ? &dtype : nullptr;
    Tensor t;
    if (is_tensor(a[0]) && unwrap(a[0]).device() != device) {  // the copy between devices is the copy torch makes
      t = to_device(detach(unwrap(a[0])), device);
      if (cast) t = to(t, *cast);
    } else {
      t = tensor_from_data(a[0], cast);
    }
    if (t.device() != device) t = to_device(t, device);  // built on the host, then copied (docs/devices.md)
    if (pinned) t = pin_memory(t);  // a copy (torch's pinned tensor is a copy too)
    if (requires_grad) t.set_requires_grad(true);
    return wrap(std::move(t));
  });
}

PyObject* from_numpy_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("from_numpy", {"ndarray"}, 1, 1);
  PyObject* a[1];
  if (!sig.parse(nullptr, args, nargs, kwnames, a)) return nullptr;
  return guarded([&] { return wrap(tensor_from_array(a[0])); });
}

// --- Tensor -> NumPy / Python ----------------------------------------------------------------------------------------
nb::dlpack::dtype dlpack_dtype(DType t) {
  using nb::dlpack::dtype_code;
  auto make = [](dtype_code code, int bits) {
    nb::dlpack::dtype d;
    d.code = static_cast<uint8_t>(code);
    d.bits = static_cast<uint8_t>(bits);
    d.lanes = 1;
    return d;
  };
  switch (t) {
    case DType::Bool: return make(dtype_code::Bool, 8);
    case DType::UInt8: return make(dtype_code::UInt, 8);
    case DType::Int8: return make(dtype_code::Int, 8);
    case DType::Int16: return make(dtype_code::Int, 16);
    case DType::UInt16: return make(dtype_code::UInt, 16);
    case DType::UInt32: return make(dtype_code::UInt, 32);
    case DType::UInt64: return make(dtype_code::UInt, 64);
    case DType::Int32: return make(dtype_code::Int, 32);
    case DType::Int64: return make(dtype_code::Int, 64);
    case DType::Float8_e4m3fn: case DType::Float8_e5m2: break;  // NumPy has no float8 (numpy() refuses them)
    case DType::Complex64: return make(dtype_code::Complex, 64);
    case DType::Complex128: return make(dtype_code::Complex, 128);
    case DType::Float16: return make(dtype_code::Float, 16);
    case DType::BFloat16: return make(dtype_code::Bfloat, 16);
    case DType::Float32: return make(dtype_code::Float, 32);
    case DType::Float64: return make(dtype_code::Float, 64);
  }
  return make(dtype_code::Float, 32);
}

nb::object tensor_to_numpy(const Tensor& t) {
  // A device's memory is not the host's: NumPy cannot view it (torch's TypeError, with the device's name).
  DG_CHECK(t.device().is_cpu(), Type, "[numpy] can't convert ", t.device().str(), " device type tensor to numpy. Use "
           "Tensor.cpu() to copy the tensor to host memory first.");
  DG_CHECK(!t.requires_grad(), Runtime, "[numpy] Can't call numpy() on Tensor that requires grad. Use "
           "tensor.detach().numpy() instead.");
  DG_CHECK(t.dtype() != DType::BFloat16 && !is_float8(t.dtype()), Type, "[numpy] Got unsupported ScalarType ",
           dtype_torch_name(t.dtype()));
  DG_CHECK(t.device().is_cpu(), Type, "[numpy] can't convert ", t.device().str(), " device type tensor to numpy. Use "
           "Tensor.cpu() to copy the tensor to host memory first.");
  { PythonHostRead read(t, "numpy"); }
  drain_pending_releases(nullptr);
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  if (t.numel() == 0) {
    nb::object numpy = nb::module_::import_("numpy");
    return numpy.attr("empty")(nb::tuple(nb::cast(shape)), numpy_dtype_name(t.dtype()));
  }
  // NumPy now sees this memory: later dygrad writes into it finish before their call returns.
  t.storage().mark_shared_with_host();
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  nb::ndarray<nb::numpy> array(t.raw_data(), shape.size(), shape.data(), owner, strides.data(), dlpack_dtype(t.dtype()));
  return nb::cast(array, nb::rv_policy::reference);
}

nb::object list_of(const Tensor& t, IntSpan shape, size_t depth, const auto& values, int64_t& next) {
  if (depth == shape.size()) {
    auto v = values[static_cast<size_t>(next++)];
    if constexpr (std::is_same_v<decltype(v), std::complex<double>>)
      return nb::steal(PyComplex_FromDoubles(v.real(), v.imag()));
    else if (t.dtype() == DType::Bool) return nb::bool_(static_cast<bool>(v));
    else if (is_floating(t.dtype())) return nb::float_(static_cast<double>(v));
    else if constexpr (std::is_same_v<decltype(v), uint64_t>) return nb::steal(PyLong_FromUnsignedLongLong(v));
    else return nb::int_(static_cast<int64_t>(v));
  }
  nb::object list = nb::steal(PyList_New(shape[depth]));
  if (!list.is_valid()) throw nb::python_error();  // MemoryError: never write into a list that is not there
  for (int64_t i = 0; i < shape[depth]; ++i)
    PyList_SET_ITEM(list.ptr(), i, list_of(t, shape, depth + 1, values, next).release().ptr());
  return list;
}

nb::object tensor_to_list(const Tensor& t) {
  // The nested lists are made even for an empty tensor: (2**62, 0) would need 2**62 of them (a fuzzer
  // crash). Past 2**31 lists, raise instead of exhausting memory or running for hours.
  int64_t lists = 0, level = 1;
  for (size_t d = 0; d + 1 < t.shape().size() && level > 0; ++d) {
    if (__builtin_mul_overflow(level, t.shape()[d], &level) || __builtin_add_overflow(lists, level, &lists) ||
        lists > (int64_t{1} << 31))
      fail(ErrorKind::Runtime, "[tolist] a tensor of shape ", t.shape(), " would need more than 2**31 nested lists");
  }
  PythonHostRead read(t, "tolist");
  int64_t next = 0;
  if (is_complex(t.dtype())) {  // Python complex numbers, from the float64 pairs
    const std::vector<double> parts = to(view_as_real(detach(t)), DType::Float64).to_vector<double>();
    std::vector<std::complex<double>> values(parts.size() / 2);
    for (size_t i = 0; i < values.size(); ++i) values[i] = {parts[2 * i], parts[2 * i + 1]};
    return list_of(t, t.shape(), 0, values, next);
  }
  if (is_floating(t.dtype())) return list_of(t, t.shape(), 0, t.to_vector<double>(), next);
  if (t.dtype() == DType::UInt64) return list_of(t, t.shape(), 0, t.to_vector<uint64_t>(), next);
  return list_of(t, t.shape(), 0, t.to_vector<int64_t>(), next);
}
}  // namespace

void init_interop(nb::module_& m) {
  try {
    nb::module_ numpy = nb::module_::import_("numpy");
    g_ndarray_type = reinterpret_cast<PyTypeObject*>(numpy.attr("ndarray").ptr());
    numpy_generic_type = reinterpret_cast<PyTypeObject*>(numpy.attr("generic").ptr());
    Py_INCREF(g_ndarray_type);
    Py_INCREF(numpy_generic_type);
  } catch (const nb::python_error&) {
    // NumPy is optional for the core; from_numpy/numpy() raise without it.
  }
  static const OpEntry entries[] = {
      {"tensor", tensor_entry, "tensor(data, *, dtype=None, device=None, requires_grad=False) -> Tensor\n\n"
       "A new tensor holding a copy of `data` (nested sequences, numbers, NumPy arrays or tensors). The dtype "
       "is inferred as torch.tensor infers it: Python floats give float32, ints int64, bools bool; NumPy "
       "arrays keep theirs.", true, false},
      {"from_numpy", from_numpy_entry, "from_numpy(ndarray) -> Tensor\n\nA tensor sharing the array's memory: "
       "writes on either side are seen by the other. dygrad's writes into it finish before the call returns.",
       true, false},
  };
  register_ops(m, entries);
  nb::handle tensor_class(reinterpret_cast<PyObject*>(tensor_type));
  nb::setattr(tensor_class, "numpy", nb::cpp_function([](const Tensor& t) {
                                      profiler::HostOpScope scope("numpy");
                                      return tensor_to_numpy(t);
                                    },
                                                      nb::is_method(), nb::name("numpy")));
  nb::setattr(tensor_class, "tolist", nb::cpp_function([](const Tensor& t) {
                                      profiler::HostOpScope scope("tolist");
                                      return tensor_to_list(t);
                                    },
                                                       nb::is_method(), nb::name("tolist")));
  nb::setattr(tensor_class, "__array__",
              nb::cpp_function([](const Tensor& t, nb::handle dtype, nb::handle) {
                nb::object array = tensor_to_numpy(t);
                return dtype.is_none() ? array : array.attr("astype")(dtype);
              }, nb::is_method(), nb::name("__array__"), nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none()));
  m.def("_drain_pending_releases", [] { drain_pending_releases(nullptr); });
  m.def("_interpreter_exiting", [] {
    // Registered with atexit by dygrad/__init__.py: finish queued work while Python can still release
    // objects, then let releases that come later leak instead of touching a finalising interpreter.
    {
      // Drains the stream and stops its worker (docs/stream.md, "Exit and fork"): no dygrad thread runs
      // kernels while libraries are torn down, even if other Python threads still issue ops (theirs then
      // run on their own thread). A deferred error nobody read is dropped.
      nb::gil_scoped_release release;
      Stream::shutdown_all();
    }
    drain_pending_releases(nullptr);
    g_interpreter_exiting.store(true);
  });
}

}  // namespace dg::py
