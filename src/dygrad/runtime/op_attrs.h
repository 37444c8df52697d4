// The attribute structs of the op table: the contract between an op's declaration (ops/) and its kernels
// (backend/<device>/), which both read them. One struct per kind of attribute, each naming the ops that
// carry it; a struct is plain data copied into the Task at enqueue (docs/ops.md, "Attributes"). Each lists its
// fields once (DG_ATTRS_FIELDS, runtime/attrs.h): equality, hashing, printing and visiting come from the list.
#pragma once
#include <cstdint>

#include "dygrad/core/dtype.h"
#include "dygrad/core/small_vector.h"
#include "dygrad/runtime/attrs.h"

namespace dg {

// add: out = a + alpha * b.
struct AddAttrs {
  static constexpr const char* kName = "AddAttrs";
  Scalar alpha = 1;
  DG_ATTRS_FIELDS(alpha);
};

// One scalar operand: add_scalar, mul_scalar, div_scalar, rsub_scalar, rdiv_scalar (a <op> value); fill
// (the value); pow_scalar (the exponent); rpow_scalar (the base); the comparisons with a scalar (a <op> value);
// masked_fill (the fill value).
struct ScalarAttrs {
  static constexpr const char* kName = "ScalarAttrs";
  Scalar value;
  DG_ATTRS_FIELDS(value);
};

// round: half to even after scaling by 10^decimals (decimals < 0: by 1 / 10^-decimals).
struct RoundAttrs {
  static constexpr const char* kName = "RoundAttrs";
  int64_t decimals = 0;
  DG_ATTRS_FIELDS(decimals);
};

// where_scalar: out = cond ? a : value, or cond ? value : a when scalar_when_true.
struct WhereScalarAttrs {
  static constexpr const char* kName = "WhereScalarAttrs";
  Scalar value;
  bool scalar_when_true = false;
  DG_ATTRS_FIELDS(value, scalar_when_true);
};

// clamp_scalar: scalar bounds (each optional). clamp_tensor: which of the inputs (x, min?, max?) are present.
struct ClampAttrs {
  static constexpr const char* kName = "ClampAttrs";
  Scalar min, max;
  bool has_min = false, has_max = false;
  DG_ATTRS_FIELDS(min, max, has_min, has_max);
};

// gelu, gelu_backward: the approximation.
struct GeluAttrs {
  static constexpr const char* kName = "GeluAttrs";
  bool tanh_approximation = false;  // false: x * Phi(x) (approximate="none")
  DG_ATTRS_FIELDS(tanh_approximation);
};

// Reductions over dims (sum, amax, amin, max_dim, min_dim, argmax, argmin, logsumexp and their backward
// kernels; softmax and log_softmax with their backward over one dim): the reduced dims, sorted, wrapped.
// Empty for a 0-dim input.
struct ReduceAttrs {
  static constexpr const char* kName = "ReduceAttrs";
  Dims dims;
  DG_ATTRS_FIELDS(dims);
};

// var, std: reduced dims (as ReduceAttrs), the correction (1: Bessel's) and which of the two.
struct VarianceAttrs {
  static constexpr const char* kName = "VarianceAttrs";
  Dims dims;
  double correction = 1;
  bool standard_deviation = false;
  DG_ATTRS_FIELDS(dims, correction, standard_deviation);
};

// repeat_interleave (the index form: k written counts[k] times): the output's length, and whether the call read the
// counts on the host to find it (no output_size given: the op's host-read trait).
struct RepeatInterleaveAttrs {
  static constexpr const char* kName = "RepeatInterleaveAttrs";
  int64_t output_size = 0;
  bool size_read_on_host = true;
  DG_ATTRS_FIELDS(output_size, size_read_on_host);
};

// One dim: cat (the concatenation dim), gather, index_select, scatter_add, index_add.
struct DimAttrs {
  static constexpr const char* kName = "DimAttrs";
  int64_t dim = 0;
  DG_ATTRS_FIELDS(dim);
};

// scatter, scatter_value: out[p, index[p, j]] = src[p, j] (scatter) or value (scatter_value), or combined
// with the old element by `reduce` (torch's reduce='add' / 'multiply').
enum class ScatterReduce : uint8_t { None, Add, Multiply };
inline const char* attr_enum_name(ScatterReduce r) {
  return r == ScatterReduce::Add ? "add" : r == ScatterReduce::Multiply ? "multiply" : "none";
}
struct ScatterAttrs {
  static constexpr const char* kName = "ScatterAttrs";
  int64_t dim = 0;
  ScatterReduce reduce = ScatterReduce::None;
  Scalar value;  // scatter_value only
  DG_ATTRS_FIELDS(dim, reduce, value);
};

// addmm (addmm and baddbmm): out = beta * input + alpha * a @ b.
struct AddmmAttrs {
  static constexpr const char* kName = "AddmmAttrs";
  Scalar beta = 1, alpha = 1;
  DG_ATTRS_FIELDS(beta, alpha);
};

// tril, triu: keep the elements on and below (tril) / above (triu) the diagonal `diagonal`.
struct TriangleAttrs {
  static constexpr const char* kName = "TriangleAttrs";
  int64_t diagonal = 0;
  bool upper = false;
  DG_ATTRS_FIELDS(diagonal, upper);
};

// sort: along dim, descending or not (dygrad's sort is always stable: `stable` is recorded, never needed).
struct SortAttrs {
  static constexpr const char* kName = "SortAttrs";
  int64_t dim = -1;
  bool descending = false, stable = false;
  DG_ATTRS_FIELDS(dim, descending, stable);
};

// topk: the k largest (or smallest) along dim, in sorted order.
struct TopkAttrs {
  static constexpr const char* kName = "TopkAttrs";
  int64_t k = 0, dim = -1;
  bool largest = true, sorted = true;
  DG_ATTRS_FIELDS(k, dim, largest, sorted);
};

// cumsum, cumprod, cumprod_backward: the scanned dim; `reverse` scans from the end (cumsum's backward).
struct ScanAttrs {
  static constexpr const char* kName = "ScanAttrs";
  int64_t dim = 0;
  bool reverse = false;
  DG_ATTRS_FIELDS(dim, reverse);
};

// flip: the reversed dims (wrapped, distinct).
struct FlipAttrs {
  static constexpr const char* kName = "FlipAttrs";
  Dims dims;
  DG_ATTRS_FIELDS(dims);
};

// index, index_put (advanced indexing): the dim of the input each index tensor indexes, in order; and for
// index_put whether values accumulate.
struct AdvancedIndexAttrs {
  static constexpr const char* kName = "AdvancedIndexAttrs";
  Dims dims;
  bool accumulate = false;
  DG_ATTRS_FIELDS(dims, accumulate);
};

// Random kernels carry an RngCounter (runtime/attrs.h) named `rng`: `Attrs::rng()` reaches it whatever the struct.
// Counters a random Task of `numel` elements reserves: every backend maps 4 elements to one Philox counter, or 2
// for 64-bit values (`wide`), so a seed gives the same numbers on every backend and thread count.
inline uint64_t philox_counters(int64_t numel, bool wide) {
  const uint64_t per = wide ? 2 : 4;
  return (static_cast<uint64_t>(numel) + per - 1) / per;
}
// rand, randn.
struct RandomAttrs {
  static constexpr const char* kName = "RandomAttrs";
  RngCounter rng;
  DG_ATTRS_FIELDS(rng);
};
// randint: uniform integers in [low, high).
struct RandintAttrs {
  static constexpr const char* kName = "RandintAttrs";
  RngCounter rng;
  int64_t low = 0, high = 0;
  DG_ATTRS_FIELDS(rng, low, high);
};
// bernoulli_mask: 1 with probability p, else 0.
struct BernoulliAttrs {
  static constexpr const char* kName = "BernoulliAttrs";
  RngCounter rng;
  double p = 0.5;
  DG_ATTRS_FIELDS(rng, p);
};
// bernoulli: out[i] = 1 with probability p[i] (the input), else 0.
struct BernoulliTensorAttrs {
  static constexpr const char* kName = "BernoulliTensorAttrs";
  RngCounter rng;
  DG_ATTRS_FIELDS(rng);
};
// multinomial: num_samples category indices per row of the input's weights, with or without replacement.
struct MultinomialAttrs {
  static constexpr const char* kName = "MultinomialAttrs";
  RngCounter rng;
  int64_t num_samples = 1;
  bool replacement = false;
  DG_ATTRS_FIELDS(rng, num_samples, replacement);
};
// linspace, logspace: `steps` values from start to end (base ** value for logspace), computed from both ends.
struct LinspaceAttrs {
  static constexpr const char* kName = "LinspaceAttrs";
  Scalar start, end;
  double base = 10;
  bool logarithmic = false;
  DG_ATTRS_FIELDS(start, end, base, logarithmic);
};
// arange: out[i] = start + i * step.
struct ArangeAttrs {
  static constexpr const char* kName = "ArangeAttrs";
  Scalar start, step;
  DG_ATTRS_FIELDS(start, step);
};

// cross_entropy and its backward: the ignored class and the reduction.
enum class LossReduction : uint8_t { None, Mean, Sum };
inline const char* attr_enum_name(LossReduction r) {
  return r == LossReduction::Mean ? "mean" : r == LossReduction::Sum ? "sum" : "none";
}
struct CrossEntropyAttrs {
  static constexpr const char* kName = "CrossEntropyAttrs";
  int64_t ignore_index = -100;
  LossReduction reduction = LossReduction::Mean;
  DG_ATTRS_FIELDS(ignore_index, reduction);
};

// nll_loss and its backward: the ignored class, the reduction, and whether a class-weight input follows the target.
struct NllLossAttrs {
  static constexpr const char* kName = "NllLossAttrs";
  int64_t ignore_index = -100;
  LossReduction reduction = LossReduction::Mean;
  bool weighted = false;
  DG_ATTRS_FIELDS(ignore_index, reduction, weighted);
};
// grad_norm (torch.nn.utils.get_total_norm): the order p of the vector norm over all its inputs (inf, -inf,
// 0 or > 0). clip_grads_with_norm: the largest total norm the gradients keep.
struct GradNormAttrs {
  static constexpr const char* kName = "GradNormAttrs";
  double norm_type = 2.0;
  DG_ATTRS_FIELDS(norm_type);
};
struct ClipGradNormAttrs {
  static constexpr const char* kName = "ClipGradNormAttrs";
  double max_norm = 1.0;
  DG_ATTRS_FIELDS(max_norm);
};

// embedding_backward: the number of rows of the weight (V).
struct EmbeddingBackwardAttrs {
  static constexpr const char* kName = "EmbeddingBackwardAttrs";
  int64_t num_embeddings = 0;
  DG_ATTRS_FIELDS(num_embeddings);
};

// rms_norm (eps, has_weight) and rms_norm_backward (has_weight and which gradients to compute).
struct RmsNormAttrs {
  static constexpr const char* kName = "RmsNormAttrs";
  double eps = 1e-6;
  bool has_weight = false;
  bool need_grad_input = false, need_grad_weight = false;  // backward only
  DG_ATTRS_FIELDS(eps, has_weight, need_grad_input, need_grad_weight);
};

// rotary_position_embedding and its backward.
struct RopeAttrs {
  static constexpr const char* kName = "RopeAttrs";
  bool rotate_half = false;  // false: interleaved pairs (2i, 2i+1); true: pairs (i, i + D/2)
  int64_t time_dim = 1;      // the dim of x holding the position t (1 or 2)
  bool inverse = false;      // rotate by -angle (the backward: the inverse rotation)
  DG_ATTRS_FIELDS(rotate_half, time_dim, inverse);
};

// scaled_dot_product_attention and its backward.
enum class AttentionMask : uint8_t { None, Bool, Additive };  // Bool: true = attend
inline const char* attr_enum_name(AttentionMask m) {
  return m == AttentionMask::Bool ? "bool" : m == AttentionMask::Additive ? "additive" : "none";
}
struct AttentionAttrs {
  static constexpr const char* kName = "AttentionAttrs";
  double scale = 1;
  bool is_causal = false;  // query i sees keys j <= i
  AttentionMask mask = AttentionMask::None;
  DG_ATTRS_FIELDS(scale, is_causal, mask);
};

// rotary_attention and its backward: causal or full attention of the heads of a fused qkv projection
// [B, T, 3 H D], q and k rotated by the rotary embedding of their positions (RopeAttrs' pairs).
struct RotaryAttentionAttrs {
  static constexpr const char* kName = "RotaryAttentionAttrs";
  double scale = 1;
  bool is_causal = false;
  int64_t heads = 1;
  bool rotate_half = false;  // false: interleaved pairs (2i, 2i+1); true: pairs (i, i + D/2)
  DG_ATTRS_FIELDS(scale, is_causal, heads, rotate_half);
};

// adamw_step (AdamW, and Adam with decoupled = false). The step counts are tensors of the Task (torch's 0-d float32
// state["step"]), incremented by the kernel; so are the hyper-parameters: the Task reads lr (a 0-d floating tensor)
// and {beta1, beta2, eps, weight_decay} (a float64 [4] tensor) as its last two inputs, so a recorded Task re-run
// later sees the values a scheduler or the user wrote since (issue 31, part 4). Only the form of the update is an
// attribute.
struct AdamWAttrs {
  static constexpr const char* kName = "AdamWAttrs";
  bool decoupled = true;  // AdamW: p *= 1 - lr wd; false (Adam): g += wd p
  DG_ATTRS_FIELDS(decoupled);
};

// sgd_step (SGD, torch.optim.SGD's single-tensor update). As adamw_step's, the hyper-parameters are tensors the Task
// reads when it runs: lr (a 0-d floating tensor) and {momentum, dampening, weight_decay} (a float64 [3] tensor);
// whether a momentum buffer has had its first step is a 0-d bool tensor of the Task per buffer. The attributes are
// what shapes the kernel: which formula runs, never a value a schedule changes.
struct SgdAttrs {
  static constexpr const char* kName = "SgdAttrs";
  bool momentum = false;  // momentum buffers are outputs (torch's momentum != 0)
  bool nesterov = false;  // the update is d_p + momentum buf, not buf
  bool maximize = false;  // the gradient is negated first
  DG_ATTRS_FIELDS(momentum, nesterov, maximize);
};

}  // namespace dg
