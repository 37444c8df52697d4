// Random factories (rand, randn, randint, bernoulli_mask), bernoulli and multinomial, and arange, linspace and
// logspace. Each random Task reserves its Philox counters on the host at enqueue (runtime/context.h) and carries seed and offset as attributes,
// so the values depend only on (seed, offset, index): any thread count, replayable. See docs/rng.md.
#include <cmath>

#include "dygrad/ops/complex.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/shape.h"
#include "dygrad/ops/factory.h"
#include "dygrad/runtime/context.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg {

namespace {
OpCost random_cost(const Task& t) {
  OpCost c;
  c.flops = double(t.outputs[0].numel());
  c.bytes = double(t.outputs[0].numel()) * double(t.outputs[0].itemsize());
  return c;
}
}  // namespace

const OpDef op_rand("rand", attrs_type<RandomAttrs>(), {.cost = random_cost, .flags = kOpRandom});
const OpDef op_randn("randn", attrs_type<RandomAttrs>(), {.cost = random_cost, .flags = kOpRandom});
const OpDef op_randint("randint", attrs_type<RandintAttrs>(), {.cost = random_cost, .flags = kOpRandom});
const OpDef op_bernoulli_mask("bernoulli_mask", attrs_type<BernoulliAttrs>(), {.cost = random_cost, .flags = kOpRandom});
const OpDef op_arange("arange", attrs_type<ArangeAttrs>(), {.cost = random_cost});
const OpDef op_bernoulli("bernoulli", attrs_type<BernoulliTensorAttrs>(), {.cost = random_cost, .flags = kOpRandom});
// The multinomial kernel's per-thread buffers: a key (8 bytes) and an index (8 bytes) per category.
size_t multinomial_scratch(const Task& t) {
  const Tensor& weights = t.inputs[0];
  return per_worker_scratch_bytes<double>(weights.shape()[1], weights.shape()[0]) +
         per_worker_scratch_bytes<int64_t>(weights.shape()[1], weights.shape()[0]);
}
const OpDef op_multinomial("multinomial", attrs_type<MultinomialAttrs>(),
                           {.cost = random_cost, .flags = kOpRandom, .scratch = multinomial_scratch});
const OpDef op_linspace("linspace", attrs_type<LinspaceAttrs>(), {.cost = random_cost});

namespace {
// The counters of a Task drawing `count` counters: from the Generator's seed when given (counter 0 on), else
// reserved from the process generator.
RngCounter counters_for(uint64_t count, GeneratorSeed generator_seed) {
  if (generator_seed) return RngCounter{*generator_seed, 0};
  const RngState rng = reserve_rng(count);
  return RngCounter{rng.seed, rng.offset};
}

// Allocates the output, reserves its counters and enqueues the random op.
template <typename A>
Tensor random_tensor(const OpDef& op, IntSpan shape, DType dtype, Device device, A attrs, bool wide,
                     GeneratorSeed generator_seed = std::nullopt) {
  Tensor out = Tensor::empty(shape, dtype, device);
  attrs.rng = counters_for(philox_counters(out.numel(), wide), generator_seed);
  enqueue(op, {}, {out}, attrs);
  return out;
}

Tensor random_floating(const OpDef& op, IntSpan shape, const TensorOptions& options, GeneratorSeed generator_seed) {
  DG_CHECK(is_floating(options.dtype), Type, "[", op.name, "] expected a floating point dtype, got ",
           dtype_name(options.dtype));
  Tensor out = random_tensor(op, shape, options.dtype, options.device, RandomAttrs{}, options.dtype == DType::Float64,
                             generator_seed);
  if (options.requires_grad) out.set_requires_grad(true);
  return out;
}
}  // namespace

Tensor rand(IntSpan shape, TensorOptions options, GeneratorSeed generator_seed) {
  return random_floating(op_rand, shape, options, generator_seed);
}
Tensor randn(IntSpan shape, TensorOptions options, GeneratorSeed generator_seed) {
  if (is_complex(options.dtype)) [[unlikely]] {  // torch's: real and imaginary parts each N(0, 1/2), pairs in order
    Dims pairs(shape);
    pairs.push_back(2);
    options.dtype = to_real_dtype(options.dtype);
    return view_as_complex(mul(random_floating(op_randn, pairs, options, generator_seed), std::sqrt(0.5)));
  }
  return random_floating(op_randn, shape, options, generator_seed);
}

Tensor randint(int64_t low, int64_t high, IntSpan shape, DType dtype, Device device, GeneratorSeed generator_seed) {
  DG_CHECK(low < high, Value, "[randint] expects 'low' to be less than 'high', but got low=", low, " >= high=", high);
  DG_CHECK(dtype != DType::Bool || (low >= 0 && high <= 2), Value, "[randint] range [", low, ", ", high,
           ") does not fit dtype bool");
  RandintAttrs attrs;
  attrs.low = low;
  attrs.high = high;
  const bool wide = static_cast<uint64_t>(high) - static_cast<uint64_t>(low) > (uint64_t{1} << 32);
  return random_tensor(op_randint, shape, dtype, device, attrs, wide, generator_seed);
}

Tensor bernoulli_mask(IntSpan shape, double p, DType dtype, GeneratorSeed generator_seed, Device device) {
  DG_CHECK(p >= 0.0 && p <= 1.0, Value, "[bernoulli_mask] probability p must be in [0, 1], got ", p);
  BernoulliAttrs attrs;
  attrs.p = p;
  return random_tensor(op_bernoulli_mask, shape, dtype, device, attrs, false, generator_seed);
}

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype, Device device) {
  const bool integers = !start.is_floating() && !end.is_floating() && !step.is_floating();
  const DType out_dtype = dtype.value_or(integers ? DType::Int64 : DType::Float32);
  // an int in [2**63, 2**64) takes torch's checked conversion to the result dtype (an int64 arange refuses it)
  for (const Scalar* x : {&start, &end, &step})
    if (x->is_uint()) [[unlikely]] check_scalar_fits("arange", *x, out_dtype);
  const double s = start.to_double(), e = end.to_double(), d = step.to_double();
  DG_CHECK(std::isfinite(s) && std::isfinite(e), Value, "[arange] unsupported range: ", s, " -> ", e);
  DG_CHECK(d != 0.0, Value, "[arange] step must be nonzero");
  DG_CHECK((d > 0 && e >= s) || (d < 0 && e <= s), Value, "[arange] upper bound and lower bound inconsistent with "
           "step sign: start=", start.to_string(), ", end=", end.to_string(), ", step=", step.to_string());
  int64_t size = 0;
  if (integers) {  // exact: ceil((end - start) / step) in integers
    const int64_t si = start.to_int(), ei = end.to_int(), di = step.to_int();
    size = di > 0 ? (ei - si + di - 1) / di : (si - ei + (-di) - 1) / (-di);
  } else {
    size = static_cast<int64_t>(std::ceil((e - s) / d));
  }
  DG_CHECK(size >= 0, Value, "[arange] invalid size ", size);
  Tensor out = Tensor::empty(Dims{size}, out_dtype, device);
  const Attrs attrs = ArangeAttrs{start, step};
  enqueue(op_arange, {}, {out}, attrs);
  return out;
}

Tensor arange(Scalar end, Device device) { return arange(0, end, 1, std::nullopt, device); }

Tensor bernoulli(const Tensor& p, GeneratorSeed generator_seed) {
  check_defined("bernoulli", p);
  DG_CHECK(is_floating(p.dtype()), NotImplemented, "[bernoulli] not implemented for '", dtype_name(p.dtype()),
           "': the probabilities must be a floating point tensor");
  Tensor probabilities = p.is_contiguous() ? p : clone(detach(p));
  Tensor out = Tensor::empty(p.shape(), p.dtype(), p.device());
  BernoulliTensorAttrs attrs;
  attrs.rng = counters_for(philox_counters(out.numel(), false), generator_seed);
  enqueue(op_bernoulli, {probabilities}, {out}, attrs);
  return out;
}

Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement, GeneratorSeed generator_seed) {
  check_defined("multinomial", weights);
  DG_CHECK(weights.dim() == 1 || weights.dim() == 2, Runtime, "[multinomial] prob_dist must be 1 or 2 dim, got shape ",
           weights.shape());
  DG_CHECK(is_floating(weights.dtype()), Runtime, "[multinomial] only supports floating-point dtypes for input, got ",
           dtype_name(weights.dtype()));
  DG_CHECK(num_samples > 0, Runtime, "[multinomial] cannot sample n_sample <= 0 samples (got ", num_samples, ")");
  const int64_t categories = weights.shape()[weights.dim() - 1];
  DG_CHECK(replacement || num_samples <= categories, Runtime, "[multinomial] cannot sample n_sample > prob_dist.size(-1) "
           "samples without replacement (n_sample = ", num_samples, ", input shape ", weights.shape(), ")");
  DG_CHECK(categories > 0, Runtime, "[multinomial] the number of categories cannot be 0 (input shape ", weights.shape(), ")");
  const Tensor rows = weights.dim() == 1 ? reshape(weights, Dims{1, categories}) : weights;
  Tensor out = Tensor::empty(Dims{rows.shape()[0], num_samples}, DType::Int64, weights.device());
  MultinomialAttrs attrs;
  attrs.num_samples = num_samples;
  attrs.replacement = replacement;
  // Per row: one 53-bit uniform per sample (with replacement) or per category (without), two words each.
  const int64_t per_row = replacement ? num_samples : categories;
  attrs.rng = counters_for(philox_counters(rows.shape()[0] * per_row, true), generator_seed);
  enqueue(op_multinomial, {detach(rows)}, {out}, attrs);
  return weights.dim() == 1 ? reshape(out, Dims{num_samples}) : out;
}

namespace {
Tensor spaced(const char* op, Scalar start, Scalar end, int64_t steps, double base, bool logarithmic, DType dtype,
              Device device) {
  DG_CHECK(steps >= 0, Runtime, "[", op, "] number of steps must be non-negative, got ", steps);
  DG_CHECK(dtype != DType::Bool, Runtime, "[", op, "] not implemented for 'Bool'");
  Tensor out = Tensor::empty(Dims{steps}, dtype, device);
  LinspaceAttrs attrs;
  attrs.start = start;
  attrs.end = end;
  attrs.base = base;
  attrs.logarithmic = logarithmic;
  enqueue(op_linspace, {}, {out}, attrs);
  return out;
}
}  // namespace

Tensor linspace(Scalar start, Scalar end, int64_t steps, DType dtype, Device device) {
  return spaced("linspace", start, end, steps, 10.0, false, dtype, device);
}
Tensor logspace(Scalar start, Scalar end, int64_t steps, double base, DType dtype, Device device) {
  return spaced("logspace", start, end, steps, base, true, dtype, device);
}

}  // namespace dg
