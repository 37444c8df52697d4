// Reduction entry points: sum and mean over all dims or a dim / list of dims, with keepdim and dtype.
#include "common.h"

namespace dg::py {

namespace {
struct Sum {
  static constexpr const char* name = "sum";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim) { return sum(a, dims, keepdim); }
};
struct Mean {
  static constexpr const char* name = "mean";
  static Tensor apply(const Tensor& a, IntSpan dims, bool keepdim) { return mean(a, dims, keepdim); }
};

// dygrad.<op>(input, dim=None, keepdim=False, *, dtype=None); dtype casts the input first (torch).
template <class Op>
PyObject* reduce_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Op::name, {"input", "dim", "keepdim", "dtype"}, 3, 1);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Op::name, "input", a[0]);
  if (!input) return nullptr;
  Dims dims;
  bool all = !a[1] || a[1] == Py_None;
  if (!all && !to_int_list(Op::name, "dim", a[1], dims)) return nullptr;
  bool keepdim;
  if (!to_bool_argument(Op::name, "keepdim", a[2], false, keepdim)) return nullptr;
  DType dtype = input->dtype();
  bool cast = a[3] && a[3] != Py_None;
  if (cast && !to_dtype(Op::name, a[3], dtype)) return nullptr;
  return guarded([&] {
    Tensor x = cast ? to(*input, dtype) : *input;
    // An explicit empty list reduces nothing in torch; dygrad's C++ API reads it as "all dims".
    if (!all && dims.empty()) return wrap(Op::apply(x, std::span<const int64_t>(), keepdim));
    return wrap(Op::apply(x, dims, keepdim));
  });
}
}  // namespace

void init_ops_reduce(nb::module_& m) {
  static const OpEntry entries[] = {
      {"sum", reduce_entry<Sum>, "sum(input, dim=None, keepdim=False, *, dtype=None) -> Tensor", true, true},
      {"mean", reduce_entry<Mean>, "mean(input, dim=None, keepdim=False, *, dtype=None) -> Tensor", true, true},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
