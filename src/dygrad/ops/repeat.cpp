// repeat and repeat_interleave: compositions of views, one copy and index_select (no OpDef of their own; the
// gradients come from expand's sum and index_select's index_add).
#include <optional>

#include "dygrad/runtime/op_sink.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/shape.h"

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
// The repeat counts of a repeats tensor (0-D or 1-D, integral), read on the host (a sync, as in torch).
std::vector<int64_t> repeat_counts(const Tensor& repeats) {
  check_defined("repeat_interleave", repeats, "repeats");
  DG_CHECK(repeats.dim() <= 1, Runtime, "[repeat_interleave] repeats must be 0-dim or 1-dim tensor, got shape ",
           repeats.shape());
  DG_CHECK(is_integral(repeats.dtype(), false), NotImplemented,
           "[repeat_interleave] repeats must be an integral tensor, got ", dtype_name(repeats.dtype()));
  HostReadScope read("repeat_interleave");
  std::vector<int64_t> counts = repeats.to_vector<int64_t>();
  for (int64_t c : counts) DG_CHECK(c >= 0, Runtime, "[repeat_interleave] repeats can not be negative, got ", c);
  return counts;
}

void check_output_size(std::optional<int64_t> output_size, int64_t total) {
  DG_CHECK(!output_size || *output_size == total, Runtime, "[repeat_interleave] output_size=", *output_size,
           " does not match the required size ", total, " (the sum of repeats)");
}

// k repeated counts[k] times, for k in order: the index the tensor forms gather with.
Tensor repeated_index(const std::vector<int64_t>& counts, std::optional<int64_t> output_size, DType dtype) {
  std::vector<int64_t> index;
  for (size_t k = 0; k < counts.size(); ++k)
    index.insert(index.end(), static_cast<size_t>(counts[k]), static_cast<int64_t>(k));
  check_output_size(output_size, static_cast<int64_t>(index.size()));
  const int64_t shape[1] = {static_cast<int64_t>(index.size())};
  return from_vector(index, shape, dtype);
}
}  // namespace

Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size) {
  return repeated_index(repeat_counts(repeats), output_size, repeats.dtype());
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

// A repeats tensor of one element is the int form; otherwise one count per slice of a along dim, and the result
// is index_select(a, dim, repeat_interleave(repeats)).
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim,
                         std::optional<int64_t> output_size) {
  check_defined("repeat_interleave", a);
  const std::vector<int64_t> counts = repeat_counts(repeats);
  const Tensor x = dim ? a : flatten(a);
  const int64_t d = wrap_dim("repeat_interleave", dim.value_or(0), x.dim());
  if (counts.size() == 1) return repeat_interleave(a, counts[0], dim, output_size);
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  DG_CHECK(static_cast<int64_t>(counts.size()) == size, Runtime, "[repeat_interleave] repeats must have the same size "
           "as input along dim, but got repeats.size(0) = ", counts.size(), " and input.size(", d, ") = ", size,
           " (input shape ", a.shape(), ")");
  return index_select(x, d, repeated_index(counts, output_size, DType::Int64));  // one host read of the counts
}

}  // namespace dg
