// Neural-network entry points exposed at top level for dygrad.nn (written in Python on top of them):
// softmax, log_softmax, embedding, cross_entropy.
#include <string_view>

#include "common.h"

namespace dg::py {

namespace {
// softmax/log_softmax(input, dim, dtype=None): dtype casts the input first (torch).
template <bool IsLog>
PyObject* softmax_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = IsLog ? "log_softmax" : "softmax";
  static const Signature sig(name, {"input", "dim", "dtype"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  int64_t dim;
  if (!input || !to_int_argument(name, "dim", a[1], dim)) return nullptr;
  DType dtype = input->dtype();
  bool cast = a[2] && a[2] != Py_None;
  if (cast && !to_dtype(name, a[2], dtype)) return nullptr;
  return guarded([&] {
    Tensor x = cast ? to(*input, dtype) : *input;
    return wrap(IsLog ? log_softmax(x, dim) : softmax(x, dim));
  });
}

// embedding(weight, input): rows of weight picked by the integer tensor input (torch.embedding's order).
PyObject* embedding_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("embedding", {"weight", "input"}, 2, 2);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* weight = to_tensor("embedding", "weight", a[0]);
  const Tensor* indices = weight ? to_tensor("embedding", "input", a[1]) : nullptr;
  if (!indices) return nullptr;
  return guarded([&] { return wrap(embedding(*weight, *indices)); });
}

// cross_entropy(input, target, ignore_index=-100, reduction='mean'): class-index targets.
PyObject* cross_entropy_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("cross_entropy", {"input", "target", "ignore_index", "reduction"}, 4, 2);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("cross_entropy", "input", a[0]);
  const Tensor* target = input ? to_tensor("cross_entropy", "target", a[1]) : nullptr;
  if (!target) return nullptr;
  int64_t ignore_index = -100;
  if (a[2] && !to_int_argument("cross_entropy", "ignore_index", a[2], ignore_index)) return nullptr;
  std::string_view reduction = "mean";
  if (a[3]) {
    if (!PyUnicode_Check(a[3]))
      return type_error("cross_entropy", "argument 'reduction' must be str, not %s", type_name(a[3]));
    reduction = PyUnicode_AsUTF8(a[3]);
  }
  return guarded([&] { return wrap(cross_entropy(*input, *target, reduction, ignore_index)); });
}
}  // namespace

void init_ops_nn(nb::module_& m) {
  static const OpEntry entries[] = {
      {"softmax", softmax_entry<false>, "softmax(input, dim, dtype=None) -> Tensor", true, true},
      {"log_softmax", softmax_entry<true>, "log_softmax(input, dim, dtype=None) -> Tensor", true, true},
      {"embedding", embedding_entry, "embedding(weight, input) -> Tensor: weight[input]", true, false},
      {"cross_entropy", cross_entropy_entry,
       "cross_entropy(input, target, ignore_index=-100, reduction='mean') -> Tensor: class-index targets", true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
