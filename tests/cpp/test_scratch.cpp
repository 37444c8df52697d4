// Kernel scratch (runtime/scratch.h): every kernel takes its temporary memory from the Task's arena, which the stream
// takes from the caching allocator for the span of the Task, and allocates nothing itself.
// This binary replaces the global operator new/delete with counting versions; a stream observer turns the count on
// at each Task's begin and off at its end (synchronize mode: the kernel runs on the host thread and the pool's
// helpers, and nothing else allocates meanwhile). The bytes a kernel allocates itself (the peak live on all threads
// above the level at the begin) must be 0 for every op, and the bytes it took from its arena (the arena's
// high-water mark) at most the declaration (op.scratch(task)), and more than 0 for the ops that use scratch.
// Memory that BLAS libraries take for themselves is not counted: through malloc (oneDNN, OpenBLAS) it is not seen,
// through operator new inside a library call it is marked (runtime/library_allocation.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <array>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "dygrad/dygrad.h"
#include "dygrad/runtime/allocator.h"
#include "dygrad/runtime/library_allocation.h"
#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/stream.h"
#include "harness.h"

namespace {
std::atomic<int64_t> live_bytes{0}, peak_bytes{0};
std::atomic<bool> counting{false};

// Each block carries its counted size and the address malloc returned, in the 64 bytes before the pointer handed
// out. A block a library makes for itself inside a kernel (runtime/library_allocation.h: oneDNN's primitives and
// the bookkeeping of their execution) is not counted: its counted size is 0.
constexpr size_t kHeader = 64;
void* counted_new(size_t size, size_t alignment, bool nothrow) {
  const size_t align = std::max(alignment, kHeader);
  void* base = std::aligned_alloc(align, (size + align + align - 1) / align * align);
  if (!base) {
    if (nothrow) return nullptr;
    throw std::bad_alloc();
  }
  char* p = static_cast<char*>(base) + align;
  const size_t counted = dg::in_library_allocation_scope() ? 0 : size;
  reinterpret_cast<size_t*>(p)[-1] = counted;
  reinterpret_cast<void**>(p)[-2] = base;
  const int64_t now = live_bytes.fetch_add(static_cast<int64_t>(counted)) + static_cast<int64_t>(counted);
  if (counting.load(std::memory_order_relaxed)) {
    int64_t peak = peak_bytes.load();
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {}
  }
  return p;
}
void counted_delete(void* p) {
  if (!p) return;
  live_bytes.fetch_sub(static_cast<int64_t>(reinterpret_cast<size_t*>(p)[-1]));
  std::free(reinterpret_cast<void**>(p)[-2]);
}
}  // namespace

void* operator new(size_t n) { return counted_new(n, alignof(std::max_align_t), false); }
void* operator new[](size_t n) { return counted_new(n, alignof(std::max_align_t), false); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_new(n, alignof(std::max_align_t), true); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_new(n, alignof(std::max_align_t), true); }
void* operator new(size_t n, std::align_val_t a) { return counted_new(n, static_cast<size_t>(a), false); }
void* operator new[](size_t n, std::align_val_t a) { return counted_new(n, static_cast<size_t>(a), false); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return counted_new(n, static_cast<size_t>(a), true); }
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return counted_new(n, static_cast<size_t>(a), true); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, size_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { counted_delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_delete(p); }

namespace dg::test {
namespace {

// Per op: the most bytes one Task allocated itself (operator new), the most it took from its arena, and that
// Task's declaration.
struct OpRecord {
  int64_t tasks = 0, most_allocated = 0;
  size_t most_taken = 0, declared_then = 0;
  std::string worst;  // the first Task that allocated, took more than declared, or whose scratch was not live
};

std::string operands_of(const Task& task) {
  std::string s = "(";
  for (const Tensor& t : task.inputs) s += std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + " ";
  return s + ")";
}

struct ScratchObserver : StreamObserver {
  int64_t level = 0;
  std::map<std::string, OpRecord> ops;
  void on_task_begin(const Task&) override {
    level = live_bytes.load();
    peak_bytes.store(level);
    counting.store(true);
  }
  void on_task_end(const Task& task, bool) override {
    counting.store(false);
    const int64_t allocated = peak_bytes.load() - level;
    const size_t declared = task.op->scratch ? task.op->scratch(task) : 0;
    const size_t taken = task.scratch ? task.scratch->high_water() : 0;
    // While the Task runs, its declared scratch is a live block of the caching allocator, in its own category.
    const int64_t live_scratch =
        CachingAllocator::cpu().stats().allocated_by_category[static_cast<size_t>(MemoryCategory::Scratch)];
    OpRecord& r = ops[task.op->name];
    ++r.tasks;
    r.most_allocated = std::max(r.most_allocated, allocated);
    if (taken >= r.most_taken) r.most_taken = taken, r.declared_then = declared;
    if (!r.worst.empty()) return;
    if (allocated > 0) r.worst = "allocated " + std::to_string(allocated) + " bytes itself " + operands_of(task);
    else if (taken > declared)
      r.worst = "took " + std::to_string(taken) + " > declared " + std::to_string(declared) + " " + operands_of(task);
    else if (live_scratch != static_cast<int64_t>(declared))
      r.worst = "scratch live in the allocator " + std::to_string(live_scratch) + " != declared " +
                std::to_string(declared) + " " + operands_of(task);
  }
};

// The ops whose kernels allocate, each at shapes that take their allocating paths (partial blocks, 16-bit
// accumulators, full reductions over several chunks), plus ops that must allocate nothing.
void run_workload(DType dtype) {
  const bool wide = dtype == DType::Float32 || dtype == DType::Float64;
  {  // rms_norm, forward and backward, with and without weight
    Tensor x = random_tensor({70, 300}, dtype, 1), w = random_tensor({300}, dtype, 2), g = random_tensor({70, 300}, dtype, 3);
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    sum(mul(rms_norm(x, w), g)).backward();
    sum(mul(rms_norm(x), g)).backward();
    Tensor lin = random_tensor({20, 300}, dtype, 3);  // a linear layer after the norm: rms_norm_apply recomputes y
    lin.set_requires_grad(true);
    sum(linear(rms_norm(x, w), lin)).backward();
    sum(linear(rms_norm(x), lin)).backward();
  }
  {  // rotary embedding, forward and backward
    Tensor x = random_tensor({2, 3, 10, 16}, dtype, 4), cos = random_tensor({10, 8}, dtype, 5), sin = random_tensor({10, 8}, dtype, 6);
    x.set_requires_grad(true);
    sum(rotary_position_embedding(x, cos, sin, RopeMode::RotateHalf)).backward();
  }
  {  // attention: partial query and key blocks, causal and not, forward and backward
    for (bool causal : {false, true}) {
      Tensor q = random_tensor({2, 2, 100, 24}, dtype, 7), k = random_tensor({2, 2, 150, 24}, dtype, 8),
             v = random_tensor({2, 2, 150, 20}, dtype, 9);
      q.set_requires_grad(true);
      k.set_requires_grad(true);
      v.set_requires_grad(true);
      if (causal) k = random_tensor({2, 2, 100, 24}, dtype, 8), v = random_tensor({2, 2, 100, 20}, dtype, 9);
      k.set_requires_grad(true);
      v.set_requires_grad(true);
      sum(scaled_dot_product_attention(transpose(transpose(q, 2, 3), 2, 3), k, v, Tensor(), 0.0, causal)).backward();
    }
  }
  {  // rotary attention from a fused projection: partial blocks, both pair layouts, causal and not, forward and backward
    for (bool causal : {false, true}) {
      Tensor qkv = random_tensor({2, 100, 3 * 2 * 24}, dtype, 12), cos = random_tensor({100, 12}, dtype, 13),
             sin = random_tensor({100, 12}, dtype, 14);
      qkv.set_requires_grad(true);
      sum(rotary_attention(qkv, cos, sin, 2, causal ? RopeMode::Interleaved : RopeMode::RotateHalf, causal)).backward();
    }
  }
  {  // embedding backward, cross-entropy forward and backward
    Tensor weight = random_tensor({50, 12}, dtype, 10);
    weight.set_requires_grad(true);
    Tensor indices = from_vector<int64_t>({3, 7, 3, 49, 0, 7, 7, 12}, Shape{8}, DType::Int64);
    sum(embedding(weight, indices)).backward();
    Tensor logits = random_tensor({40, 30}, dtype, 11);
    logits.set_requires_grad(true);
    std::vector<int64_t> t(40);
    for (int64_t i = 0; i < 40; ++i) t[static_cast<size_t>(i)] = (i * 7) % 30;
    cross_entropy(logits, from_vector<int64_t>(t, Shape{40}, DType::Int64)).backward();
    cross_entropy(logits, from_vector<int64_t>(t, Shape{40}, DType::Int64), "none");
    nll_loss(logits, from_vector<int64_t>(t, Shape{40}, DType::Int64));
  }
  {  // the gradient norm of several tensors (pieces of kGradNormPiece), and clipping by it
    std::vector<Tensor> grads = {random_tensor({40000}, dtype, 40), random_tensor({7, 3}, dtype, 41)};
    Tensor norm = grad_norm(grads);
    grad_norm(grads, 0.0);
    clip_grads_with_norm_(grads, 0.5, norm);
  }
  {  // reductions: to one output over several chunks, over a dim, and over a leading dim
    Tensor big = random_tensor({70000}, dtype, 12), mat = random_tensor({300, 70}, dtype, 13);
    sum(big), max(big), min(big), argmax(big), amax(mat, std::vector<int64_t>{0}), logsumexp(big, std::vector<int64_t>{0}),
        logsumexp(mat, std::vector<int64_t>{1}), logsumexp(mat, std::vector<int64_t>{0}), var(big), var(mat, std::vector<int64_t>{0}),
        std_dev(mat, std::vector<int64_t>{1}), max(mat, 1), sum(mat, std::vector<int64_t>{0});
    if (wide) sum(random_tensor({70000}, DType::Int32, 14));
  }
  {  // AdamW over three tensors, one of several pieces
    std::vector<Tensor> params, grads, ms, vs, steps;
    for (int64_t n : {40000, 100, 7}) {
      params.push_back(random_tensor({n}, dtype, 15));
      grads.push_back(random_tensor({n}, dtype, 16));
      ms.push_back(zeros(Shape{n}, {dtype}));
      vs.push_back(zeros(Shape{n}, {dtype}));
      steps.push_back(zeros(Shape{}, {DType::Float32}));
    }
    adamw_step(params, grads, ms, vs, steps);
  }
  {  // SGD with momentum over three tensors, one of several pieces
    std::vector<Tensor> params, grads, buffers, initialized;
    for (int64_t n : {40000, 100, 7}) {
      params.push_back(random_tensor({n}, dtype, 17));
      grads.push_back(random_tensor({n}, dtype, 18));
      buffers.push_back(zeros(Shape{n}, {dtype}));
      initialized.push_back(zeros(Shape{}, {DType::Bool}));
    }
    sgd_step(params, grads, buffers, initialized, SgdOptions{.lr = 0.1, .momentum = 0.9});
  }
  {  // matmul: batched with broadcast batch offsets, a transposed A of an aliasing leading dim, 16-bit tiles
    Tensor a = random_tensor({3, 130, 260}, dtype, 19), b = random_tensor({260, 140}, dtype, 20);
    matmul(a, b), matmul(random_tensor({2, 1, 40, 30}, dtype, 21), random_tensor({3, 30, 20}, dtype, 22));
    Tensor g = random_tensor({300, 1024}, dtype, 23), x = random_tensor({300, 384}, dtype, 24);
    matmul(transpose(g, 0, 1), x);
    if (dtype == DType::Float32) matmul(from_vector<int64_t>({1, 2, 3, 4, 5, 6}, Shape{2, 3}), from_vector<int64_t>({1, 2, 3}, Shape{3, 1}));
  }
  {  // cat of several pieces, advanced indexing (read and accumulating write), nonzero
    const Tensor pieces[4] = {random_tensor({5, 3}, dtype, 25), random_tensor({2, 3}, dtype, 26),
                              random_tensor({7, 3}, dtype, 27), random_tensor({1, 3}, dtype, 28)};
    cat(pieces, 0);
    Tensor table = random_tensor({50, 40}, dtype, 29);
    Tensor rows = from_vector<int64_t>({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, Shape{12});
    const TensorIndex by_rows[1] = {TensorIndex::tensor_index(rows)};
    index(table, by_rows);
    index_put_(table, by_rows, random_tensor({12, 40}, dtype, 30), true);
    nonzero(gt(random_tensor({70000}, dtype, 31), 0.0));
    Tensor positions = from_vector<int64_t>({0, 2, 1, 0, 3, 3}, Shape{2, 3});
    Tensor source = random_tensor({2, 3}, dtype, 32);
    gather(table, 0, positions), index_select(table, 0, rows), scatter_add(table, 0, positions, source);
    index_add(table, 0, from_vector<int64_t>({4, 0}, Shape{2}), random_tensor({2, 40}, dtype, 33));
  }
  {  // sort, topk (line buffers), cumsum, cumprod and its backward (none), flip (a view), multinomial (row buffers)
    Tensor x = random_tensor({30, 257}, dtype, 34);
    x.set_requires_grad(true);
    Tensor y = random_tensor({3, 5}, dtype, 35);
    y.set_requires_grad(true);
    sum(add(add(sort(x, 1).values, transpose(sort(transpose(x, 0, 1), 0, true).values, 0, 1)), flip(x, Dims{0, 1}))).backward();
    sum(add(sum(topk(x, 7, 1).values), sum(cumsum(x, 1)))).backward();
    sum(cumprod(y, 1)).backward();
    multinomial(abs(random_tensor({40, 300}, dtype, 36)), 5);
    multinomial(abs(random_tensor({3, 7}, dtype, 37)), 20, true);
  }
  {  // ops declared without scratch: softmax family, elementwise, swiglu
    Tensor x = random_tensor({64, 200}, dtype, 17);
    x.set_requires_grad(true);
    sum(mul(softmax(x, 1), log_softmax(x, 0))).backward();
    exp(x), sigmoid(x), gelu(x), swiglu(x, x), add(x, transpose(random_tensor({200, 64}, dtype, 18), 0, 1));
    // an elementwise result laid out like its permuted input: the iteration orders the dims itself
    Tensor permuted = transpose(random_tensor({3, 40, 50}, dtype, 39), 0, 2);
    exp(permuted), add(permuted, permuted);
  }
  Stream::cpu().synchronize();
}

TEST(Scratch, KernelsAllocateNothingAndTakeAtMostTheirDeclaration) {
  ScratchObserver observer;
  const Context saved = get_context();
  set_synchronize(true);
  // Once unobserved first: what a library keeps after its first call (oneDNN's JIT-generated GEMM kernels, made
  // with the replaced operator new, at the first product of each kind) is not a kernel's scratch.
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float64}) run_workload(dtype);
  }
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Stream::cpu().set_observer(&observer);
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float64}) run_workload(dtype);
    Stream::cpu().set_observer(nullptr);
  }
  set_context(saved);
  // Every Task's scratch went back to the allocator.
  EXPECT_EQ(CachingAllocator::cpu().stats().allocated_by_category[static_cast<size_t>(MemoryCategory::Scratch)], 0);
  // The ops that must be covered: those that declare scratch, and some that need none.
  for (const char* name : {"rms_norm", "rms_norm_backward", "rms_norm_apply", "rotary_position_embedding", "rotary_position_embedding_backward",
                           "scaled_dot_product_attention", "scaled_dot_product_attention_backward", "rotary_attention",
                           "rotary_attention_backward", "embedding_backward", "sgd_step",
                           "cross_entropy", "sum", "amax", "max_dim", "argmax", "logsumexp", "var", "std", "adamw_step",
                           "softmax", "softmax_backward", "log_softmax_backward", "exp", "swiglu", "add", "matmul",
                           "cat", "index", "index_put", "nonzero", "gather", "index_select", "scatter_add", "index_add",
                           "sort", "topk", "cumsum", "cumprod", "cumprod_backward", "flip", "multinomial", "nll_loss",
                           "grad_norm", "clip_grads_with_norm"})
    EXPECT_GT(observer.ops[name].tasks, 0) << name << " did not run";
  for (const auto& [name, r] : observer.ops) {
    EXPECT_TRUE(r.worst.empty()) << name << ": " << r.worst;
    std::printf("%-40s %4lld tasks, allocated itself %6lld bytes, most scratch taken %8zu bytes (declared %8zu)\n",
                name.c_str(), static_cast<long long>(r.tasks), static_cast<long long>(r.most_allocated), r.most_taken,
                r.declared_then);
  }
  // The arena's count sees the kernels that use scratch (a hook that counted nothing would pass everything), and the
  // operator-new count sees allocations at all (checked below, ScratchCounter.SeesAnAllocation).
  for (const char* name : {"rms_norm", "rms_norm_backward", "rms_norm_apply", "rotary_position_embedding",
                           "scaled_dot_product_attention", "scaled_dot_product_attention_backward", "rotary_attention",
                           "rotary_attention_backward", "embedding_backward", "cross_entropy", "sum", "amax", "argmax",
                           "logsumexp", "var", "std", "adamw_step", "matmul", "cat", "index_put", "nonzero", "sort",
                           "topk", "multinomial", "nll_loss", "grad_norm", "clip_grads_with_norm"})
    EXPECT_GT(observer.ops[name].most_taken, 0u) << name << " took no scratch";
}

// The operator-new count is live: an allocation between a Task's begin and end is seen (so "allocated 0 bytes"
// above is a measurement, not a hook that never runs).
TEST(Scratch, TheCounterSeesAnAllocation) {
  const int64_t level = live_bytes.load();
  peak_bytes.store(level);
  counting.store(true);
  auto* block = new std::array<char, 4096>();
  counting.store(false);
  EXPECT_GE(peak_bytes.load() - level, 4096);
  delete block;
}

// A take past the declaration is an internal error naming the op and the bytes, and writes nothing.
TEST(Scratch, TakingMoreThanDeclaredRaises) {
  alignas(64) static char block[256];
  ScratchArena arena("some_op", block, sizeof(block));
  EXPECT_NE(arena.take<float>(16), nullptr);  // 64 bytes
  EXPECT_NE(arena.take<double>(9), nullptr);  // 72 bytes, rounded to 128: 192 taken
  EXPECT_EQ(arena.high_water(), 192u);
  try {
    arena.take<float>(17);  // 68 bytes, rounded to 128, with 64 left
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("[some_op]"), std::string::npos) << m;
    EXPECT_NE(m.find("takes 128 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("192 of its declared 256"), std::string::npos) << m;
  }
  EXPECT_EQ(arena.used(), 192u);  // nothing handed out
  {
    ScratchRewind rewind(arena);
    arena.take<char>(64);
    EXPECT_EQ(arena.used(), 256u);
  }
  EXPECT_EQ(arena.used(), 192u);
  EXPECT_EQ(arena.high_water(), 256u);
}

// Per-worker slots: as many holders at once as slots; one more is an internal error, never a shared buffer.
TEST(Scratch, PerWorkerSlotsAreHeldOneEach) {
  alignas(64) static char block[1024];
  ScratchArena arena("some_op", block, sizeof(block));
  const size_t slots = scratch_workers(1000);
  ASSERT_LE(slots * 64, sizeof(block));
  auto buffers = arena.per_worker<float>(10, 1000);  // 40 bytes: one 64-byte line per slot
  EXPECT_EQ(buffers.slots(), slots);
  EXPECT_EQ(arena.used(), slots * 64);
  {
    std::vector<std::unique_ptr<ScratchSlots<float>::Held>> held;
    std::set<float*> distinct;
    for (size_t i = 0; i < slots; ++i) {
      held.push_back(std::make_unique<ScratchSlots<float>::Held>(buffers.acquire()));
      distinct.insert(held.back()->data());
    }
    EXPECT_EQ(distinct.size(), slots);
    EXPECT_THROW(buffers.acquire(), Error);
  }
  const auto again = buffers.acquire();  // released: free again
  EXPECT_NE(again.data(), nullptr);
}

// A Task's scratch is a block of the caching allocator, in the scratch category, taken at the enqueue. In
// synchronize mode it is live while the Task runs and returned after it; out of memory there is the op's error,
// raised at the call (never a crash), and the stream goes on.
TEST(Scratch, TheStreamTakesTheScratchFromTheAllocator) {
  const Context saved = get_context();
  set_synchronize(true);
  CachingAllocator& allocator = CachingAllocator::cpu();
  const auto scratch_live = [&] {
    return allocator.stats().allocated_by_category[static_cast<size_t>(MemoryCategory::Scratch)];
  };
  struct Seen : StreamObserver {
    int64_t live = -1, declared = -1;
    void on_task_begin(const Task&) override {}
    void on_task_end(const Task& task, bool) override {
      if (std::string(task.op->name) != "var") return;
      live = CachingAllocator::cpu().stats().allocated_by_category[static_cast<size_t>(MemoryCategory::Scratch)];
      declared = static_cast<int64_t>(task.op->scratch(task));
    }
  } seen;
  Tensor x = random_tensor({1 << 20, 2}, DType::Float32, 1);
  Stream::cpu().set_observer(&seen);
  var(x, std::vector<int64_t>{1});
  Stream::cpu().set_observer(nullptr);
  EXPECT_EQ(seen.declared, int64_t{8} << 20);  // a float64 mean per output
  EXPECT_EQ(seen.live, seen.declared);
  EXPECT_EQ(scratch_live(), 0);
  // A memory limit with room for the output (4 MiB) but not the scratch (8 MiB).
  allocator.empty_cache();
  allocator.set_memory_limit(static_cast<size_t>(allocator.stats().reserved) + (6 << 20));
  try {
    var(x, std::vector<int64_t>{1});
    ADD_FAILURE() << "expected OutOfMemory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::OutOfMemory);
    EXPECT_NE(e.message().find("[var] its scratch of 8388608 bytes"), std::string::npos) << e.message();
  }
  allocator.set_memory_limit(0);
  EXPECT_EQ(scratch_live(), 0);
  Tensor again = var(x, std::vector<int64_t>{1});  // the stream goes on
  Stream::cpu().synchronize();
  EXPECT_EQ(again.numel(), 1 << 20);
  set_context(saved);
}

// Asynchronously the block is taken at the enqueue and given back stream-ordered right after it (busy until the Task
// has run, like a temporary the program drops): the allocator counts it at the enqueue, as the meta evaluation
// (dg.memory.estimate) predicts, however far the worker lags.
TEST(Scratch, AsynchronouslyTheScratchIsCountedAtTheEnqueue) {
  const Context saved = get_context();
  set_synchronize(false);
  CachingAllocator& allocator = CachingAllocator::cpu();
  Tensor x = random_tensor({1 << 20, 2}, DType::Float32, 2);
  Stream::cpu().synchronize();
  allocator.reset_peak();
  const int64_t before = allocator.stats().allocated;
  Tensor y = var(x, std::vector<int64_t>{1});  // a 4 MiB output, 8 MiB of scratch
  const MemoryStats enqueued = allocator.stats();
  EXPECT_EQ(enqueued.allocated - before, int64_t{4} << 20);  // the scratch went back at once
  EXPECT_EQ(enqueued.peak_allocated - before, int64_t{12} << 20);  // after it was counted with the output
  EXPECT_EQ(enqueued.peak_by_category[static_cast<size_t>(MemoryCategory::Scratch)], int64_t{8} << 20);
  Stream::cpu().synchronize();
  Tensor ref = var(to(x, DType::Float64), std::vector<int64_t>{1});
  EXPECT_TRUE(allclose(to(y, DType::Float64), ref, 1e-5, 1e-6));
  EXPECT_EQ(allocator.stats().allocated_by_category[static_cast<size_t>(MemoryCategory::Scratch)], 0);
  set_context(saved);
}

}  // namespace
}  // namespace dg::test
