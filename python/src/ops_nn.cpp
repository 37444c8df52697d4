// Neural-network entry points exposed at top level for dygrad.nn (written in Python on top of them):
// softmax, log_softmax, embedding, cross_entropy and the other losses, pad, one_hot, and clip_grad_norm_'s ops.
#include <optional>
#include <string_view>
#include <vector>

#include "autocast.h"
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
    Tensor keep = reshape(to(ne(arange(rows, weight->device()), Scalar(padding_idx)), weight->dtype()), column);
    Tensor masked = add(mul(*weight, keep), mul(detach(*weight), rsub(keep, 1)));
    return wrap(embedding(masked, *indices));
  });
}

bool to_tensor_vector(const char* op, const char* argument, PyObject* o, std::vector<Tensor>& out) {
  if (!PyTuple_Check(o) && !PyList_Check(o))
    return type_error(op, "argument '%s' must be a list of Tensors, not %s", argument, type_name(o)), false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  PyObject** items = PySequence_Fast_ITEMS(o);
  out.clear();
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!is_tensor(items[i]))
      return type_error(op, "argument '%s' item %zd must be Tensor, not %s", argument, i, type_name(items[i])), false;
    out.push_back(unwrap(items[i]));
  }
  return true;
}

// cross_entropy(input, target, weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.0): class
// indices (the fused op when there are no weights and no smoothing) or class probabilities (a floating target).
PyObject* cross_entropy_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("cross_entropy", {"input", "target", "weight", "ignore_index", "reduction", "label_smoothing"}, 2, 2);
  PyObject* a[6];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("cross_entropy", "input", a[0]);
  const Tensor* target = input ? to_tensor("cross_entropy", "target", a[1]) : nullptr;
  if (!target) return nullptr;
  Tensor weight;
  int64_t ignore_index = -100;
  if (a[3] && !to_int_argument("cross_entropy", "ignore_index", a[3], ignore_index)) return nullptr;
  std::string_view reduction = "mean";
  double label_smoothing = 0.0;
  if (!to_optional_tensor("cross_entropy", "weight", a[2], weight) ||
      !to_string_argument("cross_entropy", "reduction", a[4], reduction) ||
      !to_double_argument("cross_entropy", "label_smoothing", a[5], 0.0, label_smoothing))
    return nullptr;
  return guarded([&] {
    Tensor x = *input, t = *target;
    if (autocast::on()) {  // an fp32 op under torch's CPU autocast
      x = autocast::fp32(x);
      t = autocast::fp32(t);
      weight = autocast::fp32(weight);
    }
    if (!weight.defined() && label_smoothing == 0.0 && !is_floating(t.dtype()))
      return wrap(cross_entropy(x, t, reduction, ignore_index));
    return wrap(cross_entropy(x, t, weight, reduction, ignore_index, label_smoothing));
  });
}

// mse_loss / l1_loss(input, target, reduction='mean').
template <OpName Name, Tensor (*Loss)(const Tensor&, const Tensor&, std::string_view)>
PyObject* pointwise_loss_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig(Name.value, {"input", "target", "reduction"}, 3, 2);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(Name.value, "input", a[0]);
  const Tensor* target = input ? to_tensor(Name.value, "target", a[1]) : nullptr;
  std::string_view reduction = "mean";
  if (!target || !to_string_argument(Name.value, "reduction", a[2], reduction)) return nullptr;
  return guarded([&] {
    if (autocast::on()) return wrap(Loss(autocast::fp32(*input), autocast::fp32(*target), reduction));  // fp32 ops
    return wrap(Loss(*input, *target, reduction));
  });
}

// nll_loss(input, target, weight=None, ignore_index=-100, reduction='mean').
PyObject* nll_loss_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("nll_loss", {"input", "target", "weight", "ignore_index", "reduction"}, 5, 2);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("nll_loss", "input", a[0]);
  const Tensor* target = input ? to_tensor("nll_loss", "target", a[1]) : nullptr;
  if (!target) return nullptr;
  Tensor weight;
  int64_t ignore_index = -100;
  std::string_view reduction = "mean";
  if (!to_optional_tensor("nll_loss", "weight", a[2], weight) ||
      (a[3] && !to_int_argument("nll_loss", "ignore_index", a[3], ignore_index)) ||
      !to_string_argument("nll_loss", "reduction", a[4], reduction))
    return nullptr;
  return guarded([&] {
    if (autocast::on())  // an fp32 op under torch's CPU autocast
      return wrap(nll_loss(autocast::fp32(*input), *target, autocast::fp32(weight), reduction, ignore_index));
    return wrap(nll_loss(*input, *target, weight, reduction, ignore_index));
  });
}

// binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction='mean').
PyObject* bce_with_logits_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static constexpr const char* name = "binary_cross_entropy_with_logits";
  static const Signature sig(name, {"input", "target", "weight", "pos_weight", "reduction"}, 5, 2);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor(name, "input", a[0]);
  const Tensor* target = input ? to_tensor(name, "target", a[1]) : nullptr;
  if (!target) return nullptr;
  Tensor weight, pos_weight;
  std::string_view reduction = "mean";
  if (!to_optional_tensor(name, "weight", a[2], weight) || !to_optional_tensor(name, "pos_weight", a[3], pos_weight) ||
      !to_string_argument(name, "reduction", a[4], reduction))
    return nullptr;
  return guarded([&] {
    if (autocast::on())  // an fp32 op under torch's CPU autocast
      return wrap(binary_cross_entropy_with_logits(autocast::fp32(*input), autocast::fp32(*target), autocast::fp32(weight),
                                                   autocast::fp32(pos_weight), reduction));
    return wrap(binary_cross_entropy_with_logits(*input, *target, weight, pos_weight, reduction));
  });
}

// pad(input, pad, mode='constant', value=None).
PyObject* pad_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("pad", {"input", "pad", "mode", "value"}, 4, 2);
  PyObject* a[4];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("pad", "input", a[0]);
  Dims pads;
  std::string_view mode = "constant";
  if (!input || !to_int_list("pad", "pad", a[1], pads) || !to_string_argument("pad", "mode", a[2], mode)) return nullptr;
  std::optional<double> value;
  if (a[3] && a[3] != Py_None) {
    double v;
    if (!to_double_argument("pad", "value", a[3], 0.0, v)) return nullptr;
    value = v;
  }
  return guarded([&] { return wrap(pad(*input, pads, mode, value)); });
}

// one_hot(tensor, num_classes=-1).
PyObject* one_hot_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("one_hot", {"tensor", "num_classes"}, 2, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* tensor = to_tensor("one_hot", "tensor", a[0]);
  int64_t num_classes = -1;
  if (!tensor || (a[1] && !to_int_argument("one_hot", "num_classes", a[1], num_classes))) return nullptr;
  return guarded([&] { return wrap(one_hot(*tensor, num_classes)); });
}

// _grad_norm(tensors, norm_type=2.0): torch.nn.utils.get_total_norm's value, one Task.
PyObject* grad_norm_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("_grad_norm", {"tensors", "norm_type"}, 2, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  std::vector<Tensor> tensors;
  double norm_type = 2.0;
  if (!to_tensor_vector("_grad_norm", "tensors", a[0], tensors) ||
      !to_double_argument("_grad_norm", "norm_type", a[1], 2.0, norm_type))
    return nullptr;
  return guarded([&] { return wrap(grad_norm(tensors, norm_type)); });
}

// _clip_grads_with_norm_(grads, max_norm, total_norm): in place, one Task; returns None.
PyObject* clip_grads_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("_clip_grads_with_norm_", {"grads", "max_norm", "total_norm"}, 3, 3);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  std::vector<Tensor> grads;
  double max_norm = 1.0;
  if (!to_tensor_vector("_clip_grads_with_norm_", "grads", a[0], grads) ||
      !to_double_argument("_clip_grads_with_norm_", "max_norm", a[1], 1.0, max_norm))
    return nullptr;
  const Tensor* total_norm = to_tensor("_clip_grads_with_norm_", "total_norm", a[2]);
  if (!total_norm) return nullptr;
  return guarded([&] {
    clip_grads_with_norm_(grads, max_norm, *total_norm);
    Py_RETURN_NONE;
  });
}
}  // namespace

void init_ops_nn(nb::module_& m) {
  static const OpEntry entries[] = {
      {"softmax", softmax_entry<false>, "softmax(input, dim, dtype=None) -> Tensor", true, true},
      {"log_softmax", softmax_entry<true>, "log_softmax(input, dim, dtype=None) -> Tensor", true, true},
      {"embedding", embedding_entry, "embedding(weight, input, padding_idx=None) -> Tensor: weight[input]", true, false},
      {"cross_entropy", cross_entropy_entry,
       "cross_entropy(input, target, *, weight=None, ignore_index=-100, reduction='mean', label_smoothing=0.0) -> Tensor",
       true, false},
      {"mse_loss", pointwise_loss_entry<"mse_loss", mse_loss>, "mse_loss(input, target, reduction='mean') -> Tensor", true, false},
      {"l1_loss", pointwise_loss_entry<"l1_loss", l1_loss>, "l1_loss(input, target, reduction='mean') -> Tensor", true, false},
      {"nll_loss", nll_loss_entry,
       "nll_loss(input, target, weight=None, ignore_index=-100, reduction='mean') -> Tensor", true, false},
      {"binary_cross_entropy_with_logits", bce_with_logits_entry,
       "binary_cross_entropy_with_logits(input, target, weight=None, pos_weight=None, reduction='mean') -> Tensor", true, false},
      {"pad", pad_entry, "pad(input, pad, mode='constant', value=None) -> Tensor", true, false},
      {"one_hot", one_hot_entry, "one_hot(tensor, num_classes=-1) -> Tensor: int64", true, false},
      {"_grad_norm", grad_norm_entry, "_grad_norm(tensors, norm_type=2.0) -> Tensor: the total norm, one Task", true, false},
      {"_clip_grads_with_norm_", clip_grads_entry,
       "_clip_grads_with_norm_(grads, max_norm, total_norm) -> None: grads *= min(1, max_norm / (total_norm + 1e-6))",
       true, false},
  };
  register_ops(m, entries);
}

}  // namespace dg::py
