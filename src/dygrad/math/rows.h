// The fused LLM ops' per-element row math (math/scalar.h: device-neutral): what backend/cpu/fused_norm.cpp and
// fused_rope.cpp compute for each element once a row's reductions are known, written once so a GPU kernel or
// generated code computes the same bits. The row reductions themselves (sums over a row) belong to each backend:
// their order is the backend's (docs/ops.md).
#pragma once
#include <cmath>

#include "dygrad/math/scalar.h"

namespace dg::math {

// RMSNorm of a row x[0, n) with weight w: rstd = 1 / sqrt(mean(x^2) + eps), y = x rstd w (in that order).
template <typename C>
DG_MATH C rms_inverse(C mean_square, C eps) { return C(1) / std::sqrt(mean_square + eps); }
template <typename C>
DG_MATH C rms_norm(C x, C rstd, C w) { return x * rstd * w; }
// Its input gradient, with xhat = x rstd, gw = g w and mean_dot = mean(gw xhat) over the row:
// grad_x = rstd (gw - xhat mean_dot).
template <typename C>
DG_MATH C rms_norm_backward(C rstd, C gw, C xhat, C mean_dot) { return rstd * (gw - xhat * mean_dot); }

// Rotary embedding of one element x whose pair partner is `partner`: y = x c + partner s', with s' = -s on the
// pair's first element and +s on its second (the inverse rotation, for the gradient, negates s).
template <typename C>
DG_MATH C rotate(C x, C partner, C c, C signed_s) { return x * c + partner * signed_s; }

}  // namespace dg::math
