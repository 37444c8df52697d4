// Linear algebra: matmul with torch.matmul's semantics (1-D promotion, batched with broadcasting), mm, bmm,
// outer and linear. GEMMs run tiled over the intra-op pool; results do not depend on the thread count.
#pragma once
#include <optional>
#include <span>
#include <string_view>

#include "dygrad/core/tensor.h"

namespace dg {

// torch.matmul: 1-D @ 1-D is a dot product (0-D result); a 1-D left operand is a row vector and a 1-D right
// operand a column vector, their dim removed from the result; >= 2-D operands multiply their last two dims
// and broadcast the leading (batch) dims: [B, H, T, D] @ [B, H, D, T] -> [B, H, T, T],
// [B, T, C] @ [C, N] -> [B, T, N]. Both operands must have the same dtype (not bool).
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);      // [M, K] @ [K, N] -> [M, N]
Tensor bmm(const Tensor& a, const Tensor& b);     // [B, M, K] @ [B, K, N] -> [B, M, N], no broadcasting
Tensor outer(const Tensor& a, const Tensor& b);   // [M] x [N] -> [M, N]
// torch.nn.functional.linear: x @ weight^T + bias, weight [out_features, in_features], bias [out_features].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// beta * input + alpha * (mat1 @ mat2) [M, N] (input broadcast to it); baddbmm the same with bmm [B, M, N];
// addbmm with the sum over the batch of bmm [M, N]. beta = 0 ignores input (its nan/inf do not propagate).
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, Scalar beta = 1, Scalar alpha = 1);
Tensor& addmm_(Tensor& self, const Tensor& mat1, const Tensor& mat2, Scalar beta = 1, Scalar alpha = 1);
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, Scalar beta = 1, Scalar alpha = 1);
Tensor addbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, Scalar beta = 1, Scalar alpha = 1);

// torch.linalg.vector_norm: (sum |x|^ord)^(1 / ord) over dims (all when empty); ord inf / -inf: max / min |x|;
// ord 0: the count of non-zeros. Floating inputs; `dtype` casts x first. The gradient at a zero norm is 0.
Tensor vector_norm(const Tensor& x, double ord = 2, IntSpan dims = {}, bool keepdim = false,
                   std::optional<DType> dtype = std::nullopt);

// torch.einsum: operands labelled by the equation ("bij,bjk->bik"; "..." for broadcast dims; no "->": the labels
// that appear once, sorted, after the ellipsis dims). Labels missing from the output are summed; operands are
// contracted left to right, each pair through one bmm. A label repeated within one operand (a diagonal) is
// refused.
Tensor einsum(std::string_view equation, std::span<const Tensor> operands);

}  // namespace dg
