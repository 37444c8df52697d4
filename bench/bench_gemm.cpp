// GEMM benchmark: dygrad's matmul (shape-tiled serial OpenBLAS on dygrad's pool) against the multithreaded
// OpenBLAS called directly with the same number of threads, at 1024^3 and the model's shapes. Results go into
// bench/RESULTS.md (section GEMM).
//
// Method. libdygrad links the serial OpenBLAS. The reference is the pthread OpenBLAS, loaded privately with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND) so that its symbols and its internal calls stay apart from the serial
// library's, and set to the same thread count (checked, and the process CPU time it uses is reported). The
// serial library, called directly on one thread, is shown for context. Each benchmark runs `runs` iterations;
// one iteration times dygrad, the reference and the serial BLAS once each, in an order that rotates between
// iterations, each after an idle gap that lets every pool go back to sleep (OpenBLAS's threads spin for about
// 0.1 s after a call and would otherwise take a core from the next run; dygrad's spin for 0.1 ms). A timed
// sample is `calls` GEMMs back to back (dygrad: enqueued, then one synchronize), divided by `calls`: the
// steady state of a training step, where one wake-up of the stream worker and the pool is amortised. Interleaving in one process means a load change on this shared machine hits all three alike.
// Google Benchmark reports dygrad's time as manual time and the three medians as counters; a markdown table
// of the medians, their ratio and the paired ratio (the median over iterations of reference time / dygrad
// time within the same iteration, which cancels slow load drift) is printed at the end.
//
// --tiles=2,4,8 interleaves dygrad with several tile targets (cpu::set_gemm_target_tiles; the first is the
// "dygrad" column) and prints a second table: how the tiling was chosen.
//
// Usage: bench_gemm [--threads=2] [--runs=21] [--gap_ms=120] [--calls=4] [--tiles=T1,T2,...]
//                   [Google Benchmark flags]
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dygrad/backend/cpu/matmul.h"
#include "dygrad/dygrad.h"

namespace {

using SgemmFn = decltype(&cblas_sgemm);
constexpr const char* kSerialPath = "/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0";
constexpr const char* kPthreadPath = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";

struct Blas {
  void* handle = nullptr;
  SgemmFn sgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;
  char* (*get_config)() = nullptr;
};

Blas load_blas(const char* path, int flags) {
  Blas b;
  b.handle = dlopen(path, flags);
  if (b.handle == nullptr) return b;
  b.sgemm = reinterpret_cast<SgemmFn>(dlsym(b.handle, "cblas_sgemm"));
  b.set_num_threads = reinterpret_cast<void (*)(int)>(dlsym(b.handle, "openblas_set_num_threads"));
  b.get_num_threads = reinterpret_cast<int (*)()>(dlsym(b.handle, "openblas_get_num_threads"));
  b.get_config = reinterpret_cast<char* (*)()>(dlsym(b.handle, "openblas_get_config"));
  return b;
}

struct Options {
  int threads = 2;
  int runs = 21;
  int gap_ms = 120;
  int calls = 4;  // GEMM calls per timed sample
  std::vector<int64_t> tile_targets;  // dygrad variants: tiles per GEMM call (empty: the library's default)
};
Options options;
Blas serial_blas, threaded_blas;

struct Shape {
  const char* name;
  int64_t batch, M, N, K;
};
const Shape kShapes[] = {
    {"1024x1024 @ 1024x1024", 1, 1024, 1024, 1024},
    {"2048x384 @ 384x1152", 1, 2048, 1152, 384},
    {"2048x1024 @ 1024x384", 1, 2048, 384, 1024},
    {"48 x (256x64 @ 64x256)", 48, 256, 256, 64},
};

struct Result {
  std::string name;
  double dygrad_gflops = 0, blas_gflops = 0, serial_gflops = 0;
  double paired_ratio = 0;  // median over iterations of (reference time / dygrad time) within one iteration
  std::vector<double> variant_gflops, variant_paired_ratio;  // per --tiles target
  double max_relative_error = 0;
};
std::vector<Result> results;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// C[b] = A[b] @ B[b] for every batch with a directly called BLAS (row-major, contiguous).
void blas_batched(SgemmFn sgemm, const Shape& s, const float* A, const float* B, float* C) {
  for (int64_t b = 0; b < s.batch; ++b)
    sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.M), int(s.N), int(s.K), 1.0f, A + b * s.M * s.K, int(s.K),
          B + b * s.K * s.N, int(s.N), 0.0f, C + b * s.M * s.N, int(s.N));
}

void bench_shape(benchmark::State& state, const Shape& s) {
  using clock = std::chrono::steady_clock;
  std::mt19937 gen(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> A(size_t(s.batch * s.M * s.K)), B(size_t(s.batch * s.K * s.N));
  for (float& x : A) x = dist(gen);
  for (float& x : B) x = dist(gen);
  std::vector<float> C_blas(size_t(s.batch * s.M * s.N)), C_serial(C_blas.size());
  std::vector<int64_t> a_shape = {s.M, s.K}, b_shape = {s.K, s.N};
  if (s.batch > 1) {
    a_shape.insert(a_shape.begin(), s.batch);
    b_shape.insert(b_shape.begin(), s.batch);
  }
  dg::Tensor a = dg::from_vector<float>(A, a_shape), b = dg::from_vector<float>(B, b_shape);
  const double flops = 2.0 * double(s.batch) * double(s.M) * double(s.N) * double(s.K);

  auto run_dygrad = [&] {
    dg::Tensor c = dg::matmul(a, b);
    dg::Stream::cpu().synchronize();
    return c;
  };
  // Warm up all three, and check that dygrad and both BLAS agree.
  std::vector<float> c_dygrad = run_dygrad().to_vector<float>();
  blas_batched(threaded_blas.sgemm, s, A.data(), B.data(), C_blas.data());
  blas_batched(serial_blas.sgemm, s, A.data(), B.data(), C_serial.data());
  double max_error = 0;
  for (size_t i = 0; i < C_blas.size(); ++i) {
    const double scale = std::max(1.0, double(std::fabs(C_blas[i])));
    max_error = std::max({max_error, std::fabs(double(c_dygrad[i]) - C_blas[i]) / scale,
                          std::fabs(double(C_serial[i]) - C_blas[i]) / scale});
  }
  if (max_error > 1e-3) state.SkipWithError("dygrad and the BLAS reference disagree");

  // Runners: dygrad with each tile target of --tiles (the first is reported as dygrad), the reference, the
  // serial BLAS. One iteration runs each once; the order rotates so none always follows the same one.
  const size_t variants = options.tile_targets.size(), runners = variants + 2;
  std::vector<std::vector<double>> times(runners);
  int iteration = 0;
  for (auto _ : state) {
    for (size_t k = 0; k < runners; ++k) {
      const size_t which = (k + size_t(iteration)) % runners;
      std::this_thread::sleep_for(std::chrono::milliseconds(options.gap_ms));
      if (which < variants) dg::cpu::set_gemm_target_tiles(options.tile_targets[which]);
      const auto t0 = clock::now();
      if (which < variants) {
        // Enqueued back to back, then one synchronize: how a training step issues its GEMMs.
        std::vector<dg::Tensor> outputs;
        for (int call = 0; call < options.calls; ++call) outputs.push_back(dg::matmul(a, b));
        dg::Stream::cpu().synchronize();
      } else {
        SgemmFn sgemm = which == variants ? threaded_blas.sgemm : serial_blas.sgemm;
        float* C = which == variants ? C_blas.data() : C_serial.data();
        for (int call = 0; call < options.calls; ++call) blas_batched(sgemm, s, A.data(), B.data(), C);
      }
      times[which].push_back(seconds_since(t0) / options.calls);
    }
    state.SetIterationTime(times[0].back());
    ++iteration;
  }
  dg::cpu::set_gemm_target_tiles(options.tile_targets[0]);
  auto paired = [&](size_t variant) {
    std::vector<double> ratios;
    for (size_t i = 0; i < times[variant].size(); ++i) ratios.push_back(times[variants][i] / times[variant][i]);
    return median(ratios);
  };
  Result r;
  r.name = s.name;
  r.dygrad_gflops = flops / median(times[0]) / 1e9;
  r.blas_gflops = flops / median(times[variants]) / 1e9;
  r.serial_gflops = flops / median(times[variants + 1]) / 1e9;
  r.max_relative_error = max_error;
  r.paired_ratio = paired(0);
  for (size_t v = 0; v < variants; ++v) {
    r.variant_gflops.push_back(flops / median(times[v]) / 1e9);
    r.variant_paired_ratio.push_back(paired(v));
  }
  state.counters["dygrad_GFLOPs"] = r.dygrad_gflops;
  state.counters["blas_GFLOPs"] = r.blas_gflops;
  state.counters["serial1_GFLOPs"] = r.serial_gflops;
  state.counters["ratio"] = r.dygrad_gflops / r.blas_gflops;
  state.counters["paired_ratio"] = r.paired_ratio;
  results.push_back(r);
}

// CPU time (clock ticks) of every thread of this process, from /proc/self/task/<tid>/stat.
std::map<int, long> thread_cpu_ticks() {
  std::map<int, long> ticks;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(entry.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream fields(text.substr(text.rfind(')') + 2));  // after "pid (name) "
    std::string field;
    long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::atol(field.c_str());
      if (i == 15) stime = std::atol(field.c_str());
    }
    ticks[std::atoi(entry.path().filename().c_str())] = utime + stime;
  }
  return ticks;
}

// How many threads of this process do a share of the work while `run` runs (a thread counts when it used at
// least a quarter of the busiest thread's CPU time).
template <typename F>
int busy_threads(F&& run) {
  run();
  std::map<int, long> before = thread_cpu_ticks();
  for (int i = 0; i < 10; ++i) run();
  std::map<int, long> after = thread_cpu_ticks();
  long busiest = 0;
  std::vector<long> used;
  for (const auto& [tid, t] : after) {
    const long delta = t - (before.count(tid) ? before[tid] : 0);
    used.push_back(delta);
    busiest = std::max(busiest, delta);
  }
  return static_cast<int>(std::count_if(used.begin(), used.end(), [&](long d) { return busiest > 0 && 4 * d >= busiest; }));
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  // Our flags first; the rest go to Google Benchmark.
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--threads=", 0) == 0) options.threads = std::atoi(arg.c_str() + 10);
    else if (arg.rfind("--runs=", 0) == 0) options.runs = std::atoi(arg.c_str() + 7);
    else if (arg.rfind("--gap_ms=", 0) == 0) options.gap_ms = std::atoi(arg.c_str() + 9);
    else if (arg.rfind("--calls=", 0) == 0) options.calls = std::max(1, std::atoi(arg.c_str() + 8));
    else if (arg.rfind("--tiles=", 0) == 0) {
      std::istringstream list(arg.substr(8));
      for (std::string item; std::getline(list, item, ',');) options.tile_targets.push_back(std::atoll(item.c_str()));
    }
    else rest.push_back(argv[i]);
  }
  int rest_count = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_count, rest.data());

  dg::set_num_threads(options.threads);
  if (options.tile_targets.empty()) options.tile_targets.push_back(dg::cpu::gemm_target_tiles());
  // The serial library must be the one libdygrad already loaded (RTLD_NOLOAD finds it).
  serial_blas = load_blas(kSerialPath, RTLD_NOW | RTLD_NOLOAD);
  if (serial_blas.handle == nullptr) {
    std::fprintf(stderr, "warning: libdygrad did not load %s; loading it privately for the serial column\n", kSerialPath);
    serial_blas = load_blas(kSerialPath, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  }
  threaded_blas = load_blas(kPthreadPath, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (serial_blas.sgemm == nullptr || threaded_blas.sgemm == nullptr || threaded_blas.set_num_threads == nullptr) {
    std::fprintf(stderr, "cannot load the OpenBLAS libraries: %s\n", dlerror());
    return 1;
  }
  threaded_blas.set_num_threads(options.threads);
  std::printf("dygrad: %d threads; serial BLAS: %s\n", options.threads, serial_blas.get_config());
  {
    const Shape s = kShapes[0];  // 1024^3
    std::vector<float> A(size_t(s.M * s.K), 0.5f), B(size_t(s.K * s.N), 0.25f), C(size_t(s.M * s.N));
    dg::Tensor a = dg::from_vector<float>(A, std::vector<int64_t>{s.M, s.K});
    dg::Tensor b = dg::from_vector<float>(B, std::vector<int64_t>{s.K, s.N});
    const int busy_blas = busy_threads([&] { blas_batched(threaded_blas.sgemm, s, A.data(), B.data(), C.data()); });
    const int busy_dygrad = busy_threads([&] {
      dg::Tensor c = dg::matmul(a, b);
      dg::Stream::cpu().synchronize();
    });
    std::printf("reference BLAS: %s, openblas_get_num_threads() = %d; threads busy at 1024^3: reference %d, dygrad %d\n",
                threaded_blas.get_config(), threaded_blas.get_num_threads(), busy_blas, busy_dygrad);
    if (threaded_blas.get_num_threads() != options.threads || busy_blas != options.threads || busy_dygrad != options.threads)
      std::fprintf(stderr, "warning: the runs do not all use %d threads\n", options.threads);
  }
  std::printf("machine: %s, %u cores online; %d interleaved runs per shape, %d ms gap; load average %s\n",
              cpu_model().c_str(), std::thread::hardware_concurrency(), options.runs, options.gap_ms,
              load_average().c_str());

  for (const Shape& s : kShapes)
    benchmark::RegisterBenchmark(s.name, [&s](benchmark::State& state) { bench_shape(state, s); })
        ->Iterations(options.runs)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  std::printf("\nload average at the end: %s\n", load_average().c_str());
  std::printf("\n| shape | dygrad GFLOP/s | BLAS-direct GFLOP/s (%d threads) | ratio | paired ratio | serial BLAS "
              "1 thread GFLOP/s |\n", options.threads);
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Result& r : results)
    std::printf("| %s | %.1f | %.1f | %.2f | %.2f | %.1f |\n", r.name.c_str(), r.dygrad_gflops, r.blas_gflops,
                r.dygrad_gflops / r.blas_gflops, r.paired_ratio, r.serial_gflops);
  if (options.tile_targets.size() > 1) {
    std::printf("\nTile targets (tiles per GEMM call), GFLOP/s and paired ratio to the reference:\n\n| shape |");
    for (int64_t t : options.tile_targets) std::printf(" %lld tiles |", static_cast<long long>(t));
    std::printf("\n| --- |");
    for (size_t v = 0; v < options.tile_targets.size(); ++v) std::printf(" ---: |");
    std::printf("\n");
    for (const Result& r : results) {
      std::printf("| %s |", r.name.c_str());
      for (size_t v = 0; v < r.variant_gflops.size(); ++v)
        std::printf(" %.1f (%.2f) |", r.variant_gflops[v], r.variant_paired_ratio[v]);
      std::printf("\n");
    }
  }
  return 0;
}
