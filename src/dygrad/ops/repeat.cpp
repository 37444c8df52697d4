// repeat and repeat_interleave: compositions of views, one copy and index_select (the gradients come from expand's
// sum and index_select's index_add), and the index form of repeat_interleave, an OpDef of its own.
#include <optional>

#include "dygrad/runtime/op_sink.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg {

// a [s_0, ..., s_{n-1}] (left-padded with 1s to repeats.size() dims) is viewed as [1, s_0, 1, s_1, ...],
// expanded to [r_0, s_0, r_1, s_1, ...], copied, and viewed as [r_0 * s_0, r_1 * s_1, ...].
Tensor repeat(const Tensor& a, IntSpan repeats) {
  check_defined("repeat", a);
  const int64_t n = static_cast<int64_t>(repeats.size());
  DG_CHECK(n >= a.dim(), Runtime, "[repeat] number of dimensions of repeat dims (", n, ") can not be smaller than "
           "number of dimensions of tensor (", a.dim(), ", shape ", a.shape(), ")");
  for (int64_t r : repeats)
    DG_CHECK(r >= 0, Runtime, "[repeat] repeats must be non-negative, got ", repeats, " for shape ", a.shape());
  const int64_t lead = n - a.dim();
  Dims interleaved, expanded, result;
  for (int64_t d = 0; d < n; ++d) {
    const int64_t size = d < lead ? 1 : a.shape()[d - lead];
    interleaved.push_back(1);
    interleaved.push_back(size);
    expanded.push_back(repeats[d]);
    expanded.push_back(size);
    result.push_back(repeats[d] * size);
  }
  return view(clone(expand(reshape(a, interleaved), expanded)), result);
}

namespace {
// The host-read trait: the call read the counts unless output_size was given.
bool size_read_on_host(const Attrs& attrs) { return attrs.get<RepeatInterleaveAttrs>().size_read_on_host; }
}  // namespace

// The index form's Task: inputs (counts, 1-D integral), outputs (index [output_size], the counts' dtype); a negative
// count or a total other than output_size fails the Task (a deferred error when output_size was given; otherwise
// the call checked both on the host first).
const OpDef op_repeat_interleave("repeat_interleave", attrs_type<RepeatInterleaveAttrs>(),
                                 {.host_read = size_read_on_host});

namespace {
void check_repeats(const Tensor& repeats) {
  check_defined("repeat_interleave", repeats, "repeats");
  DG_CHECK(repeats.dim() <= 1, Runtime, "[repeat_interleave] repeats must be 0-dim or 1-dim tensor, got shape ",
           repeats.shape());
  DG_CHECK(is_integral(repeats.dtype(), false), NotImplemented,
           "[repeat_interleave] repeats must be an integral tensor, got ", dtype_name(repeats.dtype()));
}

void check_output_size(std::optional<int64_t> output_size, int64_t total) {
  DG_CHECK(!output_size || *output_size == total, Runtime, "[repeat_interleave] output_size=", *output_size,
           " does not match the required size ", total, " (the sum of repeats)");
}

// The repeat counts, read on the host (a sync, as in torch), and their sum.
int64_t read_total(const Tensor& repeats) {
  HostReadScope read("repeat_interleave");
  int64_t total = 0;
  for (int64_t c : repeats.to_vector<int64_t>()) {
    DG_CHECK(c >= 0, Runtime, "[repeat_interleave] repeats can not be negative, got ", c);
    total += c;
  }
  return total;
}
}  // namespace

Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size) {
  check_repeats(repeats);
  if (output_size)
    DG_CHECK(*output_size >= 0, Runtime, "[repeat_interleave] output_size must be non-negative, got ", *output_size);
  const int64_t total = output_size ? *output_size : read_total(repeats);
  const int64_t shape[1] = {total};
  Tensor out = Tensor::empty(shape, repeats.dtype(), repeats.device());
  enqueue(op_repeat_interleave, {reshape(repeats, Dims{-1})}, {out}, RepeatInterleaveAttrs{total, !output_size});
  return out;
}

// Each element (slice along dim) of a repeated `repeats` times in place: a [..., s, ...] viewed as
// [..., s, 1, ...], expanded to [..., s, r, ...], copied, and viewed as [..., s * r, ...]. dim = nullopt
// flattens a first.
Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim, std::optional<int64_t> output_size) {
  check_defined("repeat_interleave", a);
  DG_CHECK(repeats >= 0, Runtime, "[repeat_interleave] repeats must be non-negative, got ", repeats);
  const Tensor x = dim ? a : flatten(a);
  const int64_t d = wrap_dim("repeat_interleave", dim.value_or(0), x.dim());
  if (x.dim() == 0) return repeat_interleave(reshape(x, Dims{1}), repeats, 0, output_size);
  check_output_size(output_size, x.shape()[d] * repeats);
  Dims expanded(x.shape()), result(x.shape());
  expanded.insert(static_cast<size_t>(d + 1), repeats);
  result[static_cast<size_t>(d)] *= repeats;
  return view(clone(expand(unsqueeze(x, d + 1), expanded)), result);
}

// A repeats tensor of one element is the int form (its value read on the host, as torch does); otherwise one count
// per slice of a along dim, and the result is index_select(a, dim, repeat_interleave(repeats, output_size)): no host
// read when output_size is given.
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim,
                         std::optional<int64_t> output_size) {
  check_defined("repeat_interleave", a);
  check_repeats(repeats);
  if (repeats.numel() == 1) {
    HostReadScope read("repeat_interleave");
    const int64_t count = repeats.item<int64_t>();
    DG_CHECK(count >= 0, Runtime, "[repeat_interleave] repeats can not be negative, got ", count);
    return repeat_interleave(a, count, dim, output_size);
  }
  check_same_device("repeat_interleave", a, repeats);
  const Tensor x = dim ? a : flatten(a);
  const int64_t d = wrap_dim("repeat_interleave", dim.value_or(0), x.dim());
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  DG_CHECK(repeats.numel() == size, Runtime, "[repeat_interleave] repeats must have the same size as input along "
           "dim, but got repeats.size(0) = ", repeats.numel(), " and input.size(", d, ") = ", size, " (input shape ",
           a.shape(), ")");
  return index_select(x, d, to(repeat_interleave(repeats, output_size), DType::Int64));
}

}  // namespace dg
