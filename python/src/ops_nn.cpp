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

// embedding(weight, input, padding_idx=None): rows of weight picked by the integer tensor input (torch's
// argument order). padding_idx (in [-V, V), negative counts from the end, as nn.functional.embedding takes
// it) gets no gradient: its row enters through a detached copy, so the values are unchanged.
PyObject* embedding_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("embedding", {"weight", "input", "padding_idx"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* weight = to_tensor("embedding", "weight", a[0]);
  const Tensor* indices = weight ? to_tensor("embedding", "input", a[1]) : nullptr;
  if (!indices) return nullptr;
  bool padded = a[2] && a[2] != Py_None;
  int64_t padding_idx = 0;
  if (padded && !to_int_argument("embedding", "padding_idx", a[2], padding_idx)) return nullptr;
  return guarded([&] {
    if (!padded) return wrap(embedding(*weight, *indices));
    DG_CHECK(weight->dim() == 2, Value, "[embedding] weight must be 2-D, got shape ", weight->shape());
    const int64_t rows = weight->shape()[0];
    DG_CHECK(padding_idx >= -rows && padding_idx < rows, Index, "[embedding] padding_idx ", padding_idx,
             " is out of range for a weight of shape ", weight->shape());
    if (padding_idx < 0) padding_idx += rows;
    if (!weight->requires_grad() || !grad_enabled()) return wrap(embedding(*weight, *indices));
    const int64_t column[2] = {rows, 1};
    Tensor keep = reshape(to(ne(arange(rows), Scalar(padding_idx)), weight->dtype()), column);
    Tensor masked = add(mul(*weight, keep), mul(detach(*weight), rsub(keep, 1)));
    return wrap(embedding(masked, *indices));
  });
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
      {"embedding", embedding_entry, "embedding(weight, input, padding_idx=None) -> Tensor: weight[input]", true, false},
      {"cross_entropy", cross_entropy_entry,
       "cross_entropy(input, target, ignore_index=-100, reduction='mean') -> Tensor: class-index targets", true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
