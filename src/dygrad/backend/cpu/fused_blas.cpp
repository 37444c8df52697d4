// Typed serial GEMM calls: the one place that picks the BLAS. float32 goes to oneDNN's dnnl_sgemm when the
// build found it (CMakeLists.txt: DYGRAD_ONEDNN), else to the serial OpenBLAS; float64 always to OpenBLAS.
// Callers (matmul tiles, fused kernels) call these from several pool threads at once: each call is serial
// (oneDNN's OpenMP team is one thread on every calling thread) and thread safe. Debian's openblas-serial
// (0.3.21) is built without USE_LOCKING: blas_memory_alloc claims a packing buffer with an unlocked
// test-then-set, so two threads in ?gemm at once can share a buffer and silently compute wrong results
// (measured: 2.7% of 200,000 concurrent 128^3 sgemm calls on two threads). OpenBLAS calls therefore run one at
// a time, under openblas_mutex: float64 (the reference dtype; oneDNN has no float64 GEMM on the CPU) and the
// float32 fallback without oneDNN are serial across the pool.
#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dygrad/backend/cpu/blas.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/library_allocation.h"
#include "dygrad/runtime/cpu_isa.h"
#include "dygrad/runtime/op_def.h"

#if DYGRAD_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
// Exported by libdnnl 2.x (row-major like dnnl_sgemm) but not declared in its public header; bfloat16_t is a
// struct of one uint16_t, so a pointer to uint16_t is the same argument.
extern "C" dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
                                               float alpha, const uint16_t* A, dnnl_dim_t lda, const uint16_t* B,
                                               dnnl_dim_t ldb, float beta, float* C, dnnl_dim_t ldc);
#endif

namespace dg::cpu {

namespace {
std::mutex openblas_mutex;  // see the file's header: the serial OpenBLAS is not thread safe
#if DYGRAD_HAVE_ONEDNN
// DYGRAD_SGEMM=openblas selects OpenBLAS at run time (side-by-side benchmarks); read once.
bool use_onednn() {
  static const bool onednn = [] {
    const char* choice = std::getenv("DYGRAD_SGEMM");
    return choice == nullptr || std::strcmp(choice, "openblas") != 0;
  }();
  return onednn;
}

// oneDNN parallelises a call over omp_get_max_threads() threads of the calling thread: one here, since dygrad's
// pool already runs one GEMM tile per thread. Set once per thread (the OpenMP setting is per thread).
void make_onednn_serial() {
  thread_local bool serial = false;
  if (!serial) {
    omp_set_num_threads(1);
    serial = true;
  }
}
#endif
}  // namespace

const char* sgemm_library() {
#if DYGRAD_HAVE_ONEDNN
  if (use_onednn()) return "onednn";
#endif
  return "openblas";
}

const char* bf16_gemm_library() {
#if DYGRAD_HAVE_ONEDNN
  static const bool native = [] {
    const char* choice = std::getenv("DYGRAD_BF16_GEMM");
    if (choice != nullptr && std::strcmp(choice, "convert") == 0) return false;
    // oneDNN picks its own kernels at run time; dygrad only decides whether to call it: without AVX512-BF16
    // oneDNN emulates bf16 dot products and is slower than converting to float32 (runtime/cpu_isa.h). Below the
    // avx512 level (DYGRAD_CPU_ISA=avx2 or baseline) the convert path too, as on a CPU of that level. (Asked while
    // the plugin loads: cpu_kernel_isa() answers with the loading plugin's level then.)
    const std::string level = dg::cpu_kernel_isa();
    return use_onednn() && dg::cpu_has_avx512_bf16() && (level == "avx512" || level == "native");
  }();
  if (native) return "onednn";
#endif
  return nullptr;
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if DYGRAD_HAVE_ONEDNN
  make_onednn_serial();
  const dnnl_status_t status = dnnl_gemm_bf16bf16f32(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda,
                                                     b, ldb, beta, c, ldc);
  DG_CHECK(status == dnnl_success, Runtime, "[matmul] oneDNN bf16 gemm failed (status ", static_cast<int>(status),
           ") for m=", m, " n=", n, " k=", k);
#else
  (void)trans_a, (void)trans_b, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c,
      (void)ldc;
  fail(ErrorKind::Runtime, "[matmul] internal error: bf16 GEMM called without oneDNN");
#endif
}

#if DYGRAD_HAVE_ONEDNN
namespace {
// The bf16 matmul primitives (matmul_bf16). A primitive is made for one problem: shapes, transpositions and
// leading dims (the brgemm kernels are generated for it), ~30-60 us each, so each pool thread keeps the ones it
// made, keyed by the problem: a model's GEMM tiles are a few dozen problems, made once and reused every step.
// Per thread, so no lock, and each is made while the thread's OpenMP team is one thread (make_onednn_serial):
// a primitive plans its parallel split when it is made, and a serial plan is what makes a tile's sum the same
// operations in the same order on every thread (bitwise results for any thread count). Scratchpad in user mode:
// the thread's own buffer, grown to the largest problem, rather than a buffer oneDNN allocates per call.
struct MatmulKey {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  bool operator==(const MatmulKey&) const = default;
};
struct MatmulKeyHash {
  size_t operator()(const MatmulKey& k) const {
    size_t h = static_cast<size_t>(k.trans_a) * 2 + static_cast<size_t>(k.trans_b);
    for (int64_t v : {k.m, k.n, k.k, k.lda, k.ldb, k.ldc}) h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};

dnnl_engine_t onednn_engine() {
  static const dnnl_engine_t engine = [] {  // never destroyed: thread-local primitives may outlive statics
    dnnl_engine_t e = nullptr;
    DG_CHECK(dnnl_engine_create(&e, dnnl_cpu, 0) == dnnl_success, Runtime, "[matmul] oneDNN: no CPU engine");
    return e;
  }();
  return engine;
}

// One cached problem: the primitive and its three memory objects (their data handles are set on every call).
struct MatmulPrimitive {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t src = nullptr, weights = nullptr, dst = nullptr;
  size_t scratchpad_bytes = 0;
  std::string impl;
  MatmulPrimitive() = default;
  MatmulPrimitive(const MatmulPrimitive&) = delete;
  MatmulPrimitive& operator=(const MatmulPrimitive&) = delete;
  ~MatmulPrimitive() {
    for (dnnl_memory_t mem : {src, weights, dst})
      if (mem) dnnl_memory_destroy(mem);
    if (primitive) dnnl_primitive_destroy(primitive);
  }
};

void check_onednn(dnnl_status_t status, const char* what, const MatmulKey& key) {
  DG_CHECK(status == dnnl_success, Runtime, "[matmul] oneDNN bf16 matmul: ", what, " failed (status ",
           static_cast<int>(status), ") for m=", key.m, " n=", key.n, " k=", key.k);
}

std::unique_ptr<MatmulPrimitive> make_matmul_primitive(const MatmulKey& key) {
  auto made = std::make_unique<MatmulPrimitive>();
  const dnnl_dims_t src_dims = {key.m, key.k}, weights_dims = {key.k, key.n}, dst_dims = {key.m, key.n};
  const dnnl_dims_t src_strides = {key.trans_a ? 1 : key.lda, key.trans_a ? key.lda : 1};
  const dnnl_dims_t weights_strides = {key.trans_b ? 1 : key.ldb, key.trans_b ? key.ldb : 1};
  const dnnl_dims_t dst_strides = {key.ldc, 1};
  dnnl_memory_desc_t src_md, weights_md, dst_md;
  check_onednn(dnnl_memory_desc_init_by_strides(&src_md, 2, src_dims, dnnl_bf16, src_strides), "src desc", key);
  check_onednn(dnnl_memory_desc_init_by_strides(&weights_md, 2, weights_dims, dnnl_bf16, weights_strides),
               "weights desc", key);
  check_onednn(dnnl_memory_desc_init_by_strides(&dst_md, 2, dst_dims, dnnl_bf16, dst_strides), "dst desc", key);
  dnnl_matmul_desc_t desc;
  check_onednn(dnnl_matmul_desc_init(&desc, &src_md, &weights_md, nullptr, &dst_md), "desc", key);
  dnnl_primitive_attr_t attr = nullptr;
  check_onednn(dnnl_primitive_attr_create(&attr), "attr", key);
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t made_pd = dnnl_primitive_desc_create(&pd, &desc, attr, onednn_engine(), nullptr);
  dnnl_primitive_attr_destroy(attr);
  check_onednn(made_pd, "primitive desc", key);
  const char* impl = "";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  made->impl = impl ? impl : "";
  made->scratchpad_bytes = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
  const dnnl_status_t made_primitive = dnnl_primitive_create(&made->primitive, pd);
  dnnl_primitive_desc_destroy(pd);
  check_onednn(made_primitive, "primitive", key);
  check_onednn(dnnl_memory_create(&made->src, &src_md, onednn_engine(), DNNL_MEMORY_NONE), "src memory", key);
  check_onednn(dnnl_memory_create(&made->weights, &weights_md, onednn_engine(), DNNL_MEMORY_NONE), "weights memory", key);
  check_onednn(dnnl_memory_create(&made->dst, &dst_md, onednn_engine(), DNNL_MEMORY_NONE), "dst memory", key);
  return made;
}

// A thread's primitives, its stream and its scratchpad. Bounded: a program of many one-off shapes (a test
// sweep) drops them all at kMaxMatmulPrimitives and starts again.
constexpr size_t kMaxMatmulPrimitives = 256;
struct ThreadMatmuls {
  std::unordered_map<MatmulKey, std::unique_ptr<MatmulPrimitive>, MatmulKeyHash> primitives;
  dnnl_stream_t stream = nullptr;
  dnnl_memory_t scratchpad = nullptr;
  std::vector<unsigned char> scratchpad_buffer;
  ~ThreadMatmuls() {
    primitives.clear();
    if (scratchpad) dnnl_memory_destroy(scratchpad);
    if (stream) dnnl_stream_destroy(stream);
  }
};
}  // namespace

void matmul_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                 const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const MatmulKey key{trans_a, trans_b, m, n, k, lda, ldb, ldc};
  thread_local ThreadMatmuls mine;
  MatmulPrimitive* primitive;
  {  // the thread's cache of primitives, its stream and scratchpad outlive the Task: oneDNN's, not its scratch
    LibraryAllocationScope library;
    make_onednn_serial();  // before the primitive is made: it plans for the calling thread's team
    auto found = mine.primitives.find(key);
    if (found == mine.primitives.end()) {
      if (mine.primitives.size() >= kMaxMatmulPrimitives) mine.primitives.clear();
      found = mine.primitives.emplace(key, make_matmul_primitive(key)).first;
    }
    primitive = found->second.get();
    if (!mine.stream)
      check_onednn(dnnl_stream_create(&mine.stream, onednn_engine(), dnnl_stream_default_flags), "stream", key);
    if (primitive->scratchpad_bytes > mine.scratchpad_buffer.size()) {
      mine.scratchpad_buffer.resize(primitive->scratchpad_bytes);
      if (mine.scratchpad) dnnl_memory_destroy(mine.scratchpad);
      mine.scratchpad = nullptr;
    }
    if (!mine.scratchpad && !mine.scratchpad_buffer.empty()) {
      const dnnl_dims_t bytes = {static_cast<int64_t>(mine.scratchpad_buffer.size())};
      dnnl_memory_desc_t md;
      check_onednn(dnnl_memory_desc_init_by_tag(&md, 1, bytes, dnnl_u8, dnnl_a), "scratchpad desc", key);
      check_onednn(dnnl_memory_create(&mine.scratchpad, &md, onednn_engine(), mine.scratchpad_buffer.data()),
                   "scratchpad", key);
    }
  }
  MatmulPrimitive& p = *primitive;
  check_onednn(dnnl_memory_set_data_handle(p.src, const_cast<uint16_t*>(a)), "src handle", key);
  check_onednn(dnnl_memory_set_data_handle(p.weights, const_cast<uint16_t*>(b)), "weights handle", key);
  check_onednn(dnnl_memory_set_data_handle(p.dst, c), "dst handle", key);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_DST, p.dst},
                             {DNNL_ARG_SCRATCHPAD, mine.scratchpad}};
  LibraryAllocationScope library;  // oneDNN's bookkeeping of the execution (its map of arguments)
  check_onednn(dnnl_primitive_execute(p.primitive, mine.stream, mine.scratchpad ? 4 : 3, args), "execute", key);
}

std::string matmul_bf16_impl(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                             int64_t ldc) {
  make_onednn_serial();
  return make_matmul_primitive({trans_a, trans_b, m, n, k, lda, ldb, ldc})->impl;
}
#else
void matmul_bf16(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, int64_t, uint16_t*,
                 int64_t) {
  fail(ErrorKind::Runtime, "[matmul] internal error: bf16 matmul called without oneDNN");
}
std::string matmul_bf16_impl(bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) { return "none"; }
#endif

namespace {
[[maybe_unused]] const bool bf16_reported =
    (set_backend_info(Device::Type::CPU, "bf16_gemm", bf16_gemm_library() ? "onednn" : "convert"), true);
[[maybe_unused]] const bool sgemm_reported = (set_backend_info(Device::Type::CPU, "sgemm", sgemm_library()), true);
}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
#if DYGRAD_HAVE_ONEDNN
  if (use_onednn()) {
    make_onednn_serial();
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                                            beta, c, ldc);
    DG_CHECK(status == dnnl_success, Runtime, "[matmul] oneDNN sgemm failed (status ", static_cast<int>(status),
             ") for m=", m, " n=", n, " k=", k);
    return;
  }
#endif
  std::lock_guard<std::mutex> lock(openblas_mutex);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  std::lock_guard<std::mutex> lock(openblas_mutex);
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace dg::cpu
