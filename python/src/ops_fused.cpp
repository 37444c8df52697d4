// Fused-op entry points: rms_norm, rotary_position_embedding, swiglu, scaled_dot_product_attention and the
// multi-tensor adamw_step and sgd_step; and dygrad._C._set_memory_category (nn.Module and the optimizers tag
// storages).
#include <string_view>
#include <vector>

#include "autocast.h"
#include "common.h"

namespace dg::py {

namespace {
// rms_norm(input, weight=None, eps=1e-5): over the last dim.
PyObject* rms_norm_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("rms_norm", {"input", "weight", "eps"}, 3, 1);
  PyObject* a[3];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* input = to_tensor("rms_norm", "input", a[0]);
  Tensor weight;
  double eps;
  if (!input || !to_optional_tensor("rms_norm", "weight", a[1], weight) ||
      !to_double_argument("rms_norm", "eps", a[2] == Py_None ? nullptr : a[2], 1e-5, eps))
    return nullptr;
  return guarded([&] { return wrap(rms_norm(*input, weight, eps)); });
}

// rotary_position_embedding(x, cos, sin, mode='interleaved', layout='BHTD')
PyObject* rope_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* name = "rotary_position_embedding";
  static const Signature sig(name, {"x", "cos", "sin", "mode", "layout"}, 5, 3);
  PyObject* a[5];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* x = to_tensor(name, "x", a[0]);
  const Tensor* cos = x ? to_tensor(name, "cos", a[1]) : nullptr;
  const Tensor* sin = cos ? to_tensor(name, "sin", a[2]) : nullptr;
  std::string_view mode = "interleaved", layout = "BHTD";
  if (!sin || !to_string_argument(name, "mode", a[3], mode) || !to_string_argument(name, "layout", a[4], layout))
    return nullptr;
  if (mode != "interleaved" && mode != "rotate_half") {
    PyErr_Format(PyExc_ValueError, "[%s] mode must be 'interleaved' or 'rotate_half', got '%s'", name, std::string(mode).c_str());
    return nullptr;
  }
  if (layout != "BHTD" && layout != "BTHD") {
    PyErr_Format(PyExc_ValueError, "[%s] layout must be 'BHTD' or 'BTHD', got '%s'", name, std::string(layout).c_str());
    return nullptr;
  }
  return guarded([&] {
    return wrap(rotary_position_embedding(*x, *cos, *sin, mode == "interleaved" ? RopeMode::Interleaved : RopeMode::RotateHalf,
                                          layout == "BHTD" ? RopeLayout::BHTD : RopeLayout::BTHD));
  });
}

// swiglu(gate, up=None): silu(gate) * up, or one tensor [..., 2F] split into gate and up.
PyObject* swiglu_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("swiglu", {"gate", "up"}, 2, 1);
  PyObject* a[2];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* gate = to_tensor("swiglu", "gate", a[0]);
  Tensor up;
  if (!gate || !to_optional_tensor("swiglu", "up", a[1], up)) return nullptr;
  return guarded([&] { return wrap(up.defined() ? swiglu(*gate, up) : swiglu(*gate)); });
}

// An attention's `scale`: None (the default, 1/sqrt(D)) or a number.
bool to_optional_scale(const char* name, PyObject* o, std::optional<double>& scale) {
  if (!o || o == Py_None) return true;
  double s;
  if (!to_double_argument(name, "scale", o, 1.0, s)) return false;
  scale = s;
  return true;
}

// scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
// enable_gqa=False)
PyObject* sdpa_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* name = "scaled_dot_product_attention";
  static const Signature sig(name, {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"},
                             6, 3);
  PyObject* a[8];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* q = to_tensor(name, "query", a[0]);
  const Tensor* k = q ? to_tensor(name, "key", a[1]) : nullptr;
  const Tensor* v = k ? to_tensor(name, "value", a[2]) : nullptr;
  Tensor mask;
  double dropout_p;
  bool is_causal, enable_gqa;
  if (!v || !to_optional_tensor(name, "attn_mask", a[3], mask) || !to_double_argument(name, "dropout_p", a[4], 0.0, dropout_p) ||
      !to_bool_argument(name, "is_causal", a[5], false, is_causal) ||
      !to_bool_argument(name, "enable_gqa", a[7], false, enable_gqa))
    return nullptr;
  std::optional<double> scale;
  if (!to_optional_scale(name, a[6], scale)) return nullptr;
  return guarded([&] {
    if (autocast::on())  // a lower-precision op under torch's CPU autocast (the mask too, when floating)
      return wrap(scaled_dot_product_attention(autocast::lower(*q), autocast::lower(*k), autocast::lower(*v),
                                               autocast::lower(mask), dropout_p, is_causal, scale, enable_gqa));
    return wrap(scaled_dot_product_attention(*q, *k, *v, mask, dropout_p, is_causal, scale, enable_gqa));
  });
}

// rotary_attention(qkv, cos, sin, heads, mode='interleaved', is_causal=False, *, scale=None)
PyObject* rotary_attention_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* name = "rotary_attention";
  static const Signature sig(name, {"qkv", "cos", "sin", "heads", "mode", "is_causal", "scale"}, 6, 4);
  PyObject* a[7];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  const Tensor* qkv = to_tensor(name, "qkv", a[0]);
  const Tensor* cos = qkv ? to_tensor(name, "cos", a[1]) : nullptr;
  const Tensor* sin = cos ? to_tensor(name, "sin", a[2]) : nullptr;
  int64_t heads = 0;
  std::string_view mode = "interleaved";
  bool is_causal = false;
  if (!sin || !to_int_argument(name, "heads", a[3], heads) || !to_string_argument(name, "mode", a[4], mode) ||
      !to_bool_argument(name, "is_causal", a[5], false, is_causal))
    return nullptr;
  if (mode != "interleaved" && mode != "rotate_half") {
    PyErr_Format(PyExc_ValueError, "[%s] mode must be 'interleaved' or 'rotate_half', got '%s'", name, std::string(mode).c_str());
    return nullptr;
  }
  std::optional<double> scale;
  if (!to_optional_scale(name, a[6], scale)) return nullptr;
  const RopeMode rope = mode == "interleaved" ? RopeMode::Interleaved : RopeMode::RotateHalf;
  return guarded([&] {
    if (autocast::on())  // a lower-precision op under torch's CPU autocast, as scaled_dot_product_attention
      return wrap(rotary_attention(autocast::lower(*qkv), *cos, *sin, heads, rope, is_causal, scale));
    return wrap(rotary_attention(*qkv, *cos, *sin, heads, rope, is_causal, scale));
  });
}

bool to_tensor_vector(const char* op, const char* argument, PyObject* o, std::vector<Tensor>& out) {
  if (!PyTuple_Check(o) && !PyList_Check(o))
    return type_error(op, "argument '%s' must be a list of Tensors, not %s", argument, type_name(o)), false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
  PyObject** items = PySequence_Fast_ITEMS(o);
  out.clear();
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!is_tensor(items[i]))
      return type_error(op, "argument '%s' item %zd must be Tensor, not %s", argument, i, type_name(items[i])), false;
    out.push_back(unwrap(items[i]));
  }
  return true;
}

// adamw_step(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8,
// weight_decay=1e-2, decoupled_weight_decay=True): updates params, exp_avgs, exp_avg_sqs and the 0-d float32
// state_steps in place; returns None. model_params=[...]: master weights (params float32, their bfloat16 / float16
// copies written after the update; ops/fused.h). lr may be a 0-d tensor, and hyper= a float64 [4] tensor {beta1,
// beta2, eps, weight_decay} (then the numbers are not read): the Task reads both when it runs (an optimizer's
// per-group values).
PyObject* adamw_step_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const Signature sig("adamw_step", {"params", "grads", "exp_avgs", "exp_avg_sqs", "state_steps", "lr", "beta1",
                                            "beta2", "eps", "weight_decay", "decoupled_weight_decay", "model_params",
                                            "hyper"}, 11, 5);
  PyObject* a[13];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, state_steps, model_params;
  AdamWOptions o;
  if (a[11] && a[11] != Py_None && !to_tensor_vector("adamw_step", "model_params", a[11], model_params)) return nullptr;
  const bool lr_tensor = a[5] && is_tensor(a[5]), hyper_given = a[12] && a[12] != Py_None;
  const Tensor* hyper = hyper_given ? to_tensor("adamw_step", "hyper", a[12]) : nullptr;
  if ((hyper_given && !hyper) || !to_tensor_vector("adamw_step", "params", a[0], params) ||
      !to_tensor_vector("adamw_step", "grads", a[1], grads) ||
      !to_tensor_vector("adamw_step", "exp_avgs", a[2], exp_avgs) ||
      !to_tensor_vector("adamw_step", "exp_avg_sqs", a[3], exp_avg_sqs) ||
      !to_tensor_vector("adamw_step", "state_steps", a[4], state_steps) ||
      (!lr_tensor && !to_double_argument("adamw_step", "lr", a[5], o.lr, o.lr)) ||
      !to_double_argument("adamw_step", "beta1", a[6], o.beta1, o.beta1) ||
      !to_double_argument("adamw_step", "beta2", a[7], o.beta2, o.beta2) ||
      !to_double_argument("adamw_step", "eps", a[8], o.eps, o.eps) ||
      !to_double_argument("adamw_step", "weight_decay", a[9], o.weight_decay, o.weight_decay) ||
      !to_bool_argument("adamw_step", "decoupled_weight_decay", a[10], true, o.decoupled_weight_decay))
    return nullptr;
  return guarded([&] {
    if (!lr_tensor && !hyper_given) {  // numbers only: checked and made tensors by the C++ function
      adamw_step(params, grads, exp_avgs, exp_avg_sqs, state_steps, o, model_params);
      Py_RETURN_NONE;
    }
    // Only a tensor not given is made from the numbers: made anyway, it is an op per step that nothing reads, and on
    // a device a copy from the host that a compiled step would have to run as segments (docs/jit.md, "On a device").
    const Device device = params.empty() ? Device::cpu() : params[0].device();
    std::pair<Tensor, Tensor> made;
    if (!lr_tensor || !hyper) made = adamw_hyper_tensors(o, device);
    adamw_step(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr_tensor ? unwrap(a[5]) : made.first,
               hyper ? *hyper : made.second, o.decoupled_weight_decay, model_params);
    Py_RETURN_NONE;
  });
}

// sgd_step(params, grads, momentum_buffers=None, momentum_initialized=None, lr=1e-3, momentum=0, dampening=0,
// weight_decay=0, nesterov=False, maximize=False, *, hyper=None): updates params and, with momentum, the buffers and
// their 0-d bool momentum_initialized flags in place (ops/fused.h); returns None. lr may be a 0-d tensor, and hyper=
// a float64 [3] tensor {momentum, dampening, weight_decay} (then those numbers are not read): the Task reads both when
// it runs (an optimizer's per-group values).
PyObject* sgd_step_entry(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  static const char* name = "sgd_step";
  static const Signature sig(name, {"params", "grads", "momentum_buffers", "momentum_initialized", "lr", "momentum",
                                    "dampening", "weight_decay", "nesterov", "maximize", "hyper"}, 10, 2);
  PyObject* a[11];
  if (!sig.parse(self, args, nargs, kwnames, a)) return nullptr;
  std::vector<Tensor> params, grads, buffers, initialized;
  SgdOptions o;
  const bool lr_tensor = a[4] && is_tensor(a[4]), hyper_given = a[10] && a[10] != Py_None;
  const Tensor* hyper = hyper_given ? to_tensor(name, "hyper", a[10]) : nullptr;
  if ((hyper_given && !hyper) || !to_tensor_vector(name, "params", a[0], params) ||
      !to_tensor_vector(name, "grads", a[1], grads) ||
      (a[2] && a[2] != Py_None && !to_tensor_vector(name, "momentum_buffers", a[2], buffers)) ||
      (a[3] && a[3] != Py_None && !to_tensor_vector(name, "momentum_initialized", a[3], initialized)) ||
      (!lr_tensor && !to_double_argument(name, "lr", a[4], o.lr, o.lr)) ||
      !to_double_argument(name, "momentum", a[5], o.momentum, o.momentum) ||
      !to_double_argument(name, "dampening", a[6], o.dampening, o.dampening) ||
      !to_double_argument(name, "weight_decay", a[7], o.weight_decay, o.weight_decay) ||
      !to_bool_argument(name, "nesterov", a[8], false, o.nesterov) ||
      !to_bool_argument(name, "maximize", a[9], false, o.maximize))
    return nullptr;
  return guarded([&] {
    if (!lr_tensor && !hyper_given) {  // numbers only: checked and made tensors by the C++ function
      sgd_step(params, grads, buffers, initialized, o);
      Py_RETURN_NONE;
    }
    const Device device = params.empty() ? Device::cpu() : params[0].device();
    std::pair<Tensor, Tensor> made;  // as adamw_step's: only what is not given
    if (!lr_tensor || !hyper) made = sgd_hyper_tensors(o, device);
    sgd_step(params, grads, buffers, initialized, lr_tensor ? unwrap(a[4]) : made.first, hyper ? *hyper : made.second,
             o.nesterov, o.maximize);
    Py_RETURN_NONE;
  });
}
}  // namespace

void init_ops_fused(nb::module_& m) {
  static const OpEntry entries[] = {
      {"rms_norm", rms_norm_entry, "rms_norm(input, weight=None, eps=1e-5) -> Tensor: over the last dim", true, false},
      {"rotary_position_embedding", rope_entry,
       "rotary_position_embedding(x, cos, sin, mode='interleaved'|'rotate_half', layout='BHTD'|'BTHD') -> Tensor", true, false},
      {"swiglu", swiglu_entry, "swiglu(gate, up=None) -> Tensor: silu(gate) * up", true, false},
      {"scaled_dot_product_attention", sdpa_entry,
       "scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, "
       "enable_gqa=False)", true, false},
      {"rotary_attention", rotary_attention_entry,
       "rotary_attention(qkv, cos, sin, heads, mode='interleaved'|'rotate_half', is_causal=False, *, scale=None) -> "
       "Tensor [B, T, heads * D]: rotary embedding of q and k, then attention, from a fused projection [B, T, 3 * heads * D]",
       true, false},
      {"adamw_step", adamw_step_entry,
       "adamw_step(params, grads, exp_avgs, exp_avg_sqs, state_steps, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, "
       "weight_decay=1e-2, decoupled_weight_decay=True, *, model_params=None) -> None: in place, state_steps (0-d float32) incremented",
       true, false},
      {"sgd_step", sgd_step_entry,
       "sgd_step(params, grads, momentum_buffers=None, momentum_initialized=None, lr=1e-3, momentum=0, dampening=0, "
       "weight_decay=0, nesterov=False, maximize=False, *, hyper=None) -> None: in place, as torch.optim.SGD",
       true, false},
  };
  register_ops(m, entries);
  m.def("_set_memory_category", [](const Tensor& tensor, const std::string& name) {
    static constexpr std::pair<std::string_view, MemoryCategory> names[] = {
        {"parameter", MemoryCategory::Parameter},   {"gradient", MemoryCategory::Gradient},
        {"optimizer_state", MemoryCategory::OptimizerState}, {"activation", MemoryCategory::Activation},
        {"temporary", MemoryCategory::Temporary},   {"other", MemoryCategory::Other},
        {"communication", MemoryCategory::Communication}};
    for (const auto& [n, c] : names)
      if (n == name) return tensor.storage().set_category(c);
    throw nb::value_error(("[_set_memory_category] unknown category '" + name +
                           "' (parameter, gradient, optimizer_state, activation, temporary, other, communication)").c_str());
  }, nb::arg("tensor"), nb::arg("name"));
}

}  // namespace dg::py
