// Meta evaluation (ops/meta_eval.h: buffers without memory, no kernel, the allocator's accounting replayed) and
// the profiler's extras (profiler/extras.h: module scopes on Tasks and autograd nodes, storage lifetimes).
// docs/memory.md "Dry run", docs/profiler.md "Module scopes" and "Storage lifetimes".
#include <cstdint>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/linalg.h"
#include "dygrad/ops/meta_eval.h"
#include "dygrad/profiler/extras.h"
#include "dygrad/profiler/profiler.h"
#include "harness.h"

using namespace dg;

TEST(MetaEval, CountsAsTheAllocatorWouldWithoutMemoryOrKernels) {
  Stream::cpu().synchronize();
  Tensor a = Tensor::empty(dg::test::Shape{256, 128});
  Tensor b = Tensor::empty(dg::test::Shape{128, 64});
  Stream::cpu().synchronize();
  const MemoryStats before = CachingAllocator::cpu().stats();
  const uint64_t enqueued = Stream::cpu().enqueued();
  meta::begin();
  {
    Tensor c = matmul(a, b);          // 256 x 64 floats
    Tensor d = add(c, c);             // another
    const meta::Stats s = meta::current();
    EXPECT_EQ(s.allocated, 2 * 256 * 64 * 4);
    EXPECT_EQ(s.by_category[static_cast<int>(MemoryCategory::Activation)], 2 * 256 * 64 * 4);
    EXPECT_EQ(s.tasks, 2);
  }
  const meta::Stats s = meta::end();
  EXPECT_EQ(s.allocated, 0);                  // both freed when their last reference went
  EXPECT_EQ(s.peak, 2 * 256 * 64 * 4);
  EXPECT_EQ(Stream::cpu().enqueued(), enqueued);  // no Task reached the stream
  const MemoryStats after = CachingAllocator::cpu().stats();
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.num_allocs, before.num_allocs);  // the caching allocator was never asked
  EXPECT_FALSE(meta::active());
}

TEST(MetaEval, OutputsAreFreedWhenTheHostDropsThem) {
  const int64_t bytes = 64 * 64 * 4;
  meta::begin();
  Tensor a = Tensor::empty(dg::test::Shape{64, 64});  // meta too
  for (int i = 0; i < 4; ++i) (void)add(a, a);  // outputs dropped at once by the host: no queue keeps them
  EXPECT_EQ(meta::current().allocated, bytes);
  EXPECT_EQ(meta::current().peak, 2 * bytes);
  a = Tensor();
  EXPECT_EQ(meta::end().allocated, 0);
  EXPECT_THROW({ meta::begin(); meta::begin(); }, std::exception);
  meta::end();
}

TEST(ProfilerExtras, ModuleScopesTagTasksAndBackwardNodes) {
  Tensor w = Tensor::empty(dg::test::Shape{32, 32});
  w.set_requires_grad(true);
  Tensor x = Tensor::empty(dg::test::Shape{8, 32});
  Stream::cpu().synchronize();
  profiler::Profiler p({.profile_memory = true});
  p.start();
  p.step();
  const uint32_t prev = profiler::set_module_scope(7);
  Tensor y = matmul(x, w);
  profiler::set_module_scope(prev);
  sum(y).backward();
  p.step();
  p.stop();
  const profiler::SessionExtras& ex = profiler::extras_of(p);
  int forward = 0, backward = 0;
  for (auto [seq, scope] : ex.op_modules) {
    if (scope == 7) ++forward;
    if (scope == (7 | profiler::kBackwardScope)) ++backward;
  }
  EXPECT_EQ(forward, 1);   // the matmul
  EXPECT_GE(backward, 1);  // its backward GEMM for w's gradient
  int allocs = 0, in_scope = 0;
  for (const profiler::StorageEvent& e : ex.storage)
    if (e.kind == profiler::StorageEventKind::Allocate) {
      ++allocs;
      if (e.module == 7) ++in_scope;
    }
  EXPECT_GE(allocs, 3);
  EXPECT_EQ(in_scope, 1);  // y
  EXPECT_EQ(profiler::module_scope(), 0u);
}
