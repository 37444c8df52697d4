// The CPU GEMM's tiling rule (backend/cpu/matmul.cpp), exposed for tests and the benchmark.
#pragma once
#include <cstdint>

namespace dg::cpu {

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
