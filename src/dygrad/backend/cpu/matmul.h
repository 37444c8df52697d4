// CPU kernel of the matmul op (ops/linalg.cpp declares its OpDef) and the operand-layout rule the op layer
// uses to decide whether an operand can be handed to BLAS without a copy.
#pragma once
#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// inputs (a [..., M, K], b [..., K, N]) of one dtype (not bool), batch dims broadcast against each other;
// output [batch..., M, N], contiguous. Any strides; float32/float64 operands must satisfy blas_layout (the
// op layer copies them otherwise).
void matmul_kernel(Task& task);

// How BLAS reads a [rows, cols] matrix with element strides (row_stride, col_stride) in place: row-major
// (strides (ld, 1), passed as NoTrans) or column-major (strides (1, ld), passed as Trans). The stride of a
// size-1 dim does not matter. ok is false when neither holds (zero or general strides) or ld overflows int.
struct BlasLayout {
  bool ok = false;
  bool transposed = false;  // column-major: BLAS sees the transpose of a row-major [cols, rows] matrix
  int64_t ld = 0;           // leading dimension
};
BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

// The output tiling of one GEMM: a function of the shape alone (never the thread count), so that results
// are bitwise identical for any number of threads. Exposed for tests and the benchmark.
struct GemmTiling {
  int64_t tile_m = 0, tile_n = 0;    // tile height and width
  int64_t tiles_m = 0, tiles_n = 0;  // tiles per output matrix along M and N
};
GemmTiling gemm_tiling(int64_t batch, int64_t M, int64_t N, int64_t K);

// Tuning hook for bench/bench_gemm.cpp: how many tiles gemm_tiling aims at per GEMM call (the default is the
// measured choice). Process-wide, set while no GEMM runs; any value keeps results thread-count independent.
void set_gemm_target_tiles(int64_t tiles);
int64_t gemm_target_tiles();

}  // namespace dg::cpu
