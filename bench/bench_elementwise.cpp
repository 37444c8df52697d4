// Elementwise bandwidth: dygrad's add, mul and neg on contiguous float32 buffers larger than the L3 cache,
// against a plain vectorised C++ loop over the same buffers split over the same threads. Each benchmark
// iteration runs both sides once, in alternating order (interleaved); counters report the medians in GB/s
// and the ratio dygrad / plain. Results: bench/RESULTS.md, "Elementwise bandwidth".
//
// Sizes: each buffer is max(256 MiB, 2/3 of the L3 size read from /sys), so one binary op streams at least
// twice the L3 (two inputs and one output). Bytes counted: inputs read + output written (the write-allocate
// read of the output is not counted, for either side).
//
// Threads: the plain loop runs on dygrad's own pool through parallel_for with the same grain the kernels use,
// so both sides get the same threads (the pool's num_threads, the cores by default) and the same split
// into equal contiguous halves; the comparison isolates the kernel and the op's dispatch. In dygrad the
// stream worker is pool thread 0; in the plain loop the benchmark thread is.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "dygrad/backend/cpu/loops.h"
#include "dygrad/dygrad.h"
#include "dygrad/runtime/thread_pool.h"

using namespace dg;

namespace {

int64_t l3_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string s;
  if (!(f >> s) || s.empty()) return 0;
  int64_t v = std::stoll(s);
  if (s.back() == 'K') v <<= 10;
  if (s.back() == 'M') v <<= 20;
  return v;
}

int64_t buffer_elements() {
  const int64_t bytes = std::max<int64_t>(int64_t{256} << 20, l3_bytes() * 2 / 3);
  return (bytes + (int64_t{1} << 20) - 1) / (int64_t{1} << 20) * (int64_t{1} << 20) / 4;
}

struct Buffers {
  int64_t n = buffer_elements();
  Tensor a = dg::rand(Dims{n}), b = dg::rand(Dims{n});
  Tensor plain_out;
  Buffers() {
    plain_out = full(Dims{n}, 0.0);  // touch every page before timing
    plain_out.wait_readable();
    a.wait_readable();
    b.wait_readable();
  }
};
Buffers& buffers() {
  static Buffers* b = new Buffers();
  return *b;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

enum class Op { Add, Mul, Neg };

// The plain loops: out[i] = f(a[i], b[i]) over contiguous float32, split like the kernels split.
void plain(Op op, const float* __restrict a, const float* __restrict b, float* __restrict out, int64_t n) {
  parallel_for(0, n, cpu::kElementwiseGrain, [&](int64_t lo, int64_t hi) {
    switch (op) {
      case Op::Add:
        for (int64_t i = lo; i < hi; ++i) out[i] = a[i] + b[i];
        break;
      case Op::Mul:
        for (int64_t i = lo; i < hi; ++i) out[i] = a[i] * b[i];
        break;
      case Op::Neg:
        for (int64_t i = lo; i < hi; ++i) out[i] = -a[i];
        break;
    }
  });
}

Tensor through_dygrad(Op op, const Tensor& a, const Tensor& b) {
  switch (op) {
    case Op::Add: return add(a, b);
    case Op::Mul: return mul(a, b);
    case Op::Neg: return neg(a);
  }
  return Tensor();
}

void BM_Elementwise(benchmark::State& state, Op op) {
  Buffers& buf = buffers();
  const double bytes = double(buf.n) * 4.0 * (op == Op::Neg ? 2.0 : 3.0);
  std::vector<double> dygrad_s, plain_s;
  auto run_dygrad = [&] {
    auto t0 = std::chrono::steady_clock::now();
    Tensor out = through_dygrad(op, buf.a, buf.b);
    out.wait_readable();
    dygrad_s.push_back(seconds_since(t0));
  };
  auto run_plain = [&] {
    auto t0 = std::chrono::steady_clock::now();
    plain(op, buf.a.data<float>(), buf.b.data<float>(), buf.plain_out.data<float>(), buf.n);
    plain_s.push_back(seconds_since(t0));
  };
  run_dygrad();  // warm-up: the output block comes from the cache afterwards, its pages touched
  run_plain();
  dygrad_s.clear();
  plain_s.clear();
  bool dygrad_first = true;
  for (auto _ : state) {
    if (dygrad_first) {
      run_dygrad();
      run_plain();
    } else {
      run_plain();
      run_dygrad();
    }
    dygrad_first = !dygrad_first;
    state.SetIterationTime(dygrad_s.back());
  }
  const double d = median(dygrad_s), p = median(plain_s);
  state.counters["dygrad_GBps"] = bytes / d / 1e9;
  state.counters["plain_GBps"] = bytes / p / 1e9;
  state.counters["ratio"] = p / d;  // dygrad's bandwidth as a fraction of the plain loop's
  state.counters["MiB_per_buffer"] = double(buf.n) * 4.0 / double(1 << 20);
  state.counters["threads"] = ThreadPool::instance().num_threads();
}

}  // namespace

// 21 interleaved pairs per op: medians of 21 runs of each side.
BENCHMARK_CAPTURE(BM_Elementwise, add, Op::Add)->UseManualTime()->Iterations(21)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Elementwise, mul, Op::Mul)->UseManualTime()->Iterations(21)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Elementwise, neg, Op::Neg)->UseManualTime()->Iterations(21)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
