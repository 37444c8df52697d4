// Joining, splitting and indexing: cat, stack, split, chunk, unbind, index_select, gather, scatter_add, scatter,
// index_add, tril, triu. Index tensors are int64 or int32; an index out of range is detected by the kernel and raised at
// the next sync point (docs/async-errors.md). split, chunk and unbind return views.
#pragma once
#include <optional>
#include <span>
#include <vector>

#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_attrs.h"

namespace dg {

// Joins tensors along an existing dim (promoted as torch.cat; 1-D empty tensors are skipped as in torch).
Tensor cat(std::span<const Tensor> tensors, int64_t dim = 0);
// Joins equally shaped tensors along a new dim.
Tensor stack(std::span<const Tensor> tensors, int64_t dim = 0);
// Views of consecutive pieces along dim: of split_size each (the last may be smaller) or of the given sizes.
std::vector<Tensor> split(const Tensor& a, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, IntSpan split_sizes, int64_t dim = 0);
// `chunks` views of ceil(size / chunks) elements along dim (fewer when the size runs out).
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
// The size(dim) views a.select(dim, i). split, chunk and unbind record ONE autograd node for all their views,
// whose backward joins the gradients with a single cat (zeros for views that got none).
std::vector<Tensor> unbind(const Tensor& a, int64_t dim = 0);

// out[..., j, ...] = a[..., index[j], ...] along dim; index is 1-D (or 0-D).
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
// out[i][j][k] = a[i][index[i][j][k]][k] (dim = 1); out has index's shape.
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
// out = a with out[i][index[i][j][k]][k] += src[i][j][k] (dim = 1), summed in a fixed order.
Tensor scatter_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& scatter_add_(Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
// out = a with out[..., index[j], ...] += src[..., j, ...] along dim (the backward of index_select).
Tensor index_add(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
Tensor& index_add_(Tensor& a, int64_t dim, const Tensor& index, const Tensor& src);
// out = a with out[i][index[i][j][k]][k] = src[i][j][k] (dim = 1), or = value; `reduce` combines with the old
// element instead (torch's reduce='add' / 'multiply'). Where an index repeats, the last write wins.
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
               ScatterReduce reduce = ScatterReduce::None);
Tensor scatter(const Tensor& a, int64_t dim, const Tensor& index, Scalar value,
               ScatterReduce reduce = ScatterReduce::None);
Tensor& scatter_(Tensor& a, int64_t dim, const Tensor& index, const Tensor& src,
                 ScatterReduce reduce = ScatterReduce::None);
Tensor& scatter_(Tensor& a, int64_t dim, const Tensor& index, Scalar value, ScatterReduce reduce = ScatterReduce::None);

// torch's Tensor.repeat: a copy tiled repeats[d] times along each dim (a left-padded with size-1 dims when
// repeats has more entries than a has dims).
Tensor repeat(const Tensor& a, IntSpan repeats);
// torch.repeat_interleave: each slice of a along dim (of the flattened a when dim is nullopt) repeated
// `repeats` times, or repeats[i] times for slice i; the tensor form reads the counts on the host (a sync).
// repeat_interleave(repeats) alone is the index form: [0] * repeats[0] + [1] * repeats[1] + ...
Tensor repeat_interleave(const Tensor& a, int64_t repeats, std::optional<int64_t> dim = std::nullopt,
                         std::optional<int64_t> output_size = std::nullopt);
Tensor repeat_interleave(const Tensor& a, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt,
                         std::optional<int64_t> output_size = std::nullopt);
Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> output_size = std::nullopt);

// The lower / upper triangle of the last two dims: kept where col - row <= diagonal (tril) or
// col - row >= diagonal (triu); zero elsewhere.
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor triu(const Tensor& a, int64_t diagonal = 0);

}  // namespace dg
