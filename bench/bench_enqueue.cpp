// Host cost of one op call in C++: `add(a, b)` on 1-element float32 tensors (no grad, and with an input that
// requires grad), the in-place `add_(a, b)` and the scalar-operand `add(a, 1.0)`. The variants run
// interleaved, once each per benchmark iteration; counters report medians. Results: bench/RESULTS.md,
// "Enqueue cost". Two figures per variant:
//  * `<variant>_ns`, the host cost: bursts of kBurst = 1000 calls without a sync (fewer than the ring's 1024
//    slots, and the ring is drained before each burst, so the host never waits for the worker), the burst's
//    time divided by its count; kBurstsPerIteration bursts per iteration. This is the time the host spends
//    in the call while the worker runs the kernels on the other core.
//  * `<variant>_sustained_ns`: one loop of kSustained = 20000 calls, then one sync (timed apart): the steady
//    rate, bounded by whichever of the host and the worker is slower (the host sleeps when the ring is
//    full); `<variant>_full_ring` counts the iterations that ended with the ring full.
//
// What the host time contains: validation, type promotion, output allocation (TensorImpl and Storage from
// the object pools, the block from the caching allocator), Task construction in the ring, publishing it,
// waking the worker if it sleeps, and reclaiming finished Tasks (dropping their operands, which frees the
// previous calls' outputs), plus autograd recording in the requires_grad variant.
//
// `bench_enqueue --callgrind VARIANT N` runs N calls of one variant through a non-inlined wrapper for
// bench/enqueue_callgrind.sh (instruction counts under valgrind; see that script).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "dygrad/dygrad.h"

using namespace dg;

// The measured calls for callgrind: --toggle-collect on these names counts exactly the calls made through
// them (extern "C" so that the names are plain).
extern "C" {
__attribute__((noinline)) void callgrind_add(const Tensor* a, const Tensor* b, Tensor* out) { *out = add(*a, *b); }
__attribute__((noinline)) void callgrind_add_inplace(Tensor* a, const Tensor* b) { add_(*a, *b); }
__attribute__((noinline)) void callgrind_add_scalar(const Tensor* a, Tensor* out) { *out = add(*a, 1.0); }
}

namespace {

constexpr int kBurst = 1000;  // below Stream::kCapacity: a burst never waits for the worker
constexpr int kBurstsPerIteration = 10;
constexpr int kSustained = 20000;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

enum class Variant { Add, AddRequiresGrad, AddInplace, AddScalar };
constexpr Variant kVariants[] = {Variant::Add, Variant::AddRequiresGrad, Variant::AddInplace, Variant::AddScalar};
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::Add: return "add";
    case Variant::AddRequiresGrad: return "add_requires_grad";
    case Variant::AddInplace: return "add_";
    case Variant::AddScalar: return "add_scalar";
  }
  return "?";
}

struct Operands {
  Tensor a = ones(Dims{1}), b = ones(Dims{1}), w = ones(Dims{1}, {DType::Float32, true}), acc = zeros(Dims{1});
};

// Runs `count` calls of one variant after draining the stream; returns host ns per call (the loop only) and
// whether the ring was full when the loop ended.
std::pair<double, bool> run(Variant v, Operands& x, int count) {
  Stream::cpu().synchronize();
  auto t0 = std::chrono::steady_clock::now();
  switch (v) {
    case Variant::Add:
      for (int i = 0; i < count; ++i) benchmark::DoNotOptimize(add(x.a, x.b));
      break;
    case Variant::AddRequiresGrad:
      for (int i = 0; i < count; ++i) benchmark::DoNotOptimize(add(x.w, x.b));
      break;
    case Variant::AddInplace:
      for (int i = 0; i < count; ++i) add_(x.acc, x.b);
      break;
    case Variant::AddScalar:
      for (int i = 0; i < count; ++i) benchmark::DoNotOptimize(add(x.a, 1.0));
      break;
  }
  auto t1 = std::chrono::steady_clock::now();
  const bool full = Stream::cpu().enqueued() - Stream::cpu().completed() >= Stream::kCapacity - 1;
  Stream::cpu().synchronize();
  return {std::chrono::duration<double, std::nano>(t1 - t0).count() / count, full};
}

void BM_Enqueue(benchmark::State& state) {
  Operands x;
  for (Variant v : kVariants) run(v, x, kSustained);  // warm-up: pools, allocator cache, ring slots
  const size_t nv = std::size(kVariants);
  std::vector<std::vector<double>> burst_ns(nv), sustained_ns(nv);
  std::vector<int> full_ring(nv, 0);
  for (auto _ : state) {
    double total = 0;
    for (size_t k = 0; k < nv; ++k) {
      for (int r = 0; r < kBurstsPerIteration; ++r) {
        const double per_op = run(kVariants[k], x, kBurst).first;
        burst_ns[k].push_back(per_op);
        total += per_op * 1e-9 * kBurst;
      }
      auto [per_op, full] = run(kVariants[k], x, kSustained);
      sustained_ns[k].push_back(per_op);
      full_ring[k] += full;
    }
    state.SetIterationTime(total);
  }
  for (size_t k = 0; k < nv; ++k) {
    const std::string name = variant_name(kVariants[k]);
    state.counters[name + "_ns"] = median(burst_ns[k]);
    state.counters[name + "_sustained_ns"] = median(sustained_ns[k]);
    state.counters[name + "_full_ring"] = full_ring[k];
  }
  if (x.acc.item<float>() <= 0) state.SkipWithError("add_ did not accumulate");
}

int callgrind_main(const char* variant, long n) {
  Tensor a = ones(Dims{1}), b = ones(Dims{1}), out;
  // Warm-up through the op itself (not through the wrapper, so callgrind does not count it).
  for (int i = 0; i < 2000; ++i) {
    out = add(a, b);
    out = add(a, 1.0);
    add_(a, b);
  }
  Stream::cpu().synchronize();
  if (!std::strcmp(variant, "add")) {
    for (long i = 0; i < n; ++i) callgrind_add(&a, &b, &out);
  } else if (!std::strcmp(variant, "add_")) {
    for (long i = 0; i < n; ++i) callgrind_add_inplace(&a, &b);
  } else if (!std::strcmp(variant, "add_scalar")) {
    for (long i = 0; i < n; ++i) callgrind_add_scalar(&a, &out);
  } else {
    std::fprintf(stderr, "unknown variant %s (add, add_, add_scalar)\n", variant);
    return 2;
  }
  Stream::cpu().synchronize();
  std::printf("ran %ld calls of %s\n", n, variant);
  return 0;
}

}  // namespace

BENCHMARK(BM_Enqueue)->UseManualTime()->Iterations(21)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  if (argc == 4 && !std::strcmp(argv[1], "--callgrind")) return callgrind_main(argv[2], std::atol(argv[3]));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
