// dygrad.jit's O1 passes (jit/fusion.h, docs/jit-fusion.md) on the C++ core: CSE, DCE and elementwise fusion on a
// captured graph, a fused sub-op run by the interpreter (no compiler involved) equal to eager bit for bit, the arena
// smaller, the generated source naming its ops; row programs (a reduction read back into its row) likewise. The compile, the cache and the Python API:
// tests/python/test_jit_fusion.py.
#include <functional>
#include <string>
#include <vector>

#include "dygrad/jit/graph.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/runtime/stream.h"
#include "harness.h"

namespace dg::test {
namespace {
using jit::Capture;
using jit::Graph;

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(JitFusion, PassesFuseAChainAndTheInterpreterEqualsEager) {
  Stream::cpu().synchronize();
  Tensor w = full(Shape{64}, 0.75);  // a fixed buffer, broadcast over rows
  auto body = [&](const Tensor& x) {
    Tensor a = mul(x, 2.0);
    Tensor dead = exp(x);  // nothing reads it
    (void)dead;
    Tensor b = mul(x, 2.0);  // a again
    return mul(tanh(rsqrt(add(add(a, b), 1.0))), w);
  };
  Tensor x0 = add(full(Shape{16, 64}, 0.5), 0.0);
  std::shared_ptr<Graph> graph;
  {
    Capture capture({x0});
    Tensor y = body(x0);
    capture.end();
    graph = capture.build({y});
    ASSERT_TRUE(graph);
  }
  EXPECT_EQ(graph->num_ops(), 8u);
  std::vector<jit::PassLog> log;
  std::shared_ptr<Graph> o1 = graph->optimized(jit::PassConfig{}, &log);
  ASSERT_EQ(log.size(), 9u);  // captured, versions, cse, dce, fold, patterns, rematerialize, fusion, inplace
  EXPECT_EQ(log[2].pass, "cse");
  EXPECT_EQ(log[3].pass, "dce");
  EXPECT_EQ(log[7].pass, "fusion");
  EXPECT_EQ(log[7].lines.size(), 1u) << log[7].note;
  EXPECT_EQ(log[8].pass, "inplace");
  EXPECT_EQ(log[8].note, "nothing to reuse");  // the run reads the argument
  EXPECT_EQ(o1->num_ops(), 1u);
  ASSERT_EQ(o1->programs().size(), 1u);
  EXPECT_EQ(o1->programs()[0]->name, "mul_scalar+add+add_scalar+rsqrt+tanh+mul");
  EXPECT_LT(o1->arena_bytes(), graph->arena_bytes());
  EXPECT_NE(o1->source().find("dg::math::tanh"), std::string::npos);
  EXPECT_FALSE(o1->kernels_loaded());  // the interpreter runs it
  for (float v : {0.25f, 1.5f, 3.0f}) {
    Tensor x = add(full(Shape{16, 64}, v), rand(Shape{16, 64}));
    EXPECT_EQ(values(o1->launch({x})[0]), values(body(x)));
    EXPECT_EQ(values(graph->launch({x})[0]), values(body(x)));
  }
}


// A leaky ReLU through where, clamped, with its mask returned and a second mask combined: one sub-op whose records
// take a boolean condition (a three-operand where) and store a bool output, interpreted with eager's bits.
TEST(JitFusion, ComparisonsWhereAndClampFuseWithABooleanOutput) {
  Stream::cpu().synchronize();
  auto body = [&](const Tensor& x) {
    Tensor m = gt(x, 0.0);
    Tensor y = clamp(where(m, x, mul(x, 0.01)), Scalar(-0.5), Scalar(0.5));
    Tensor keep = logical_and(m, lt(x, 0.75));
    return std::vector<Tensor>{where(keep, y, 2.0), m};
  };
  Tensor x0 = sub(rand(Shape{16, 40}), 0.5);
  std::shared_ptr<Graph> graph;
  {
    Capture capture({x0});
    std::vector<Tensor> out = body(x0);
    capture.end();
    graph = capture.build(out);
    ASSERT_TRUE(graph);
  }
  std::shared_ptr<Graph> o1 = graph->optimized(jit::PassConfig{});
  EXPECT_EQ(o1->num_ops(), 1u);
  ASSERT_EQ(o1->programs().size(), 1u);
  EXPECT_EQ(o1->programs()[0]->name, "gt_scalar+mul_scalar+where+clamp_scalar+lt_scalar+logical_and+where_scalar");
  EXPECT_NE(o1->source().find("dg::math::clamp_below"), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    Tensor x = mul(sub(rand(Shape{16, 40}), 0.5), 4.0);
    std::vector<Tensor> got = o1->launch({x}), want = body(x);
    EXPECT_EQ(values(got[0]), values(want[0]));
    EXPECT_EQ(got[1].dtype(), DType::Bool);
    EXPECT_EQ(got[1].to_vector<bool>(), want[1].to_vector<bool>());
  }
}

// The composed RMSNorm and softmax over rows of 37 (whole groups of eight lanes and a tail), a log-softmax through
// logsumexp, a standardisation through var and a shift by amin: one sub-op each, a row program of two or three
// passes, interpreted with eager's bits.
TEST(JitFusion, RowProgramsRunAReductionAndWhatReadsItBackAsOneSubOp) {
  Stream::cpu().synchronize();
  Tensor w = add(full(Shape{37}, 0.5), rand(Shape{37}));
  const int64_t last = 1;
  auto rmsnorm = [&](const Tensor& x) { return mul(mul(x, rsqrt(add(mean(mul(x, x), IntSpan(&last, 1), true), 1e-6))), w); };
  auto softmax = [&](const Tensor& x) {
    Tensor e = exp(sub(x, amax(x, IntSpan(&last, 1), true)));
    return div(e, sum(e, IntSpan(&last, 1), true));
  };
  auto log_softmax = [&](const Tensor& x) { return sub(x, logsumexp(x, IntSpan(&last, 1), true)); };
  auto standardise = [&](const Tensor& x) {
    Tensor d = sub(x, mean(x, IntSpan(&last, 1), true));
    return div(d, sqrt(add(var(x, IntSpan(&last, 1), 1, true), 1e-5)));
  };
  auto shifted = [&](const Tensor& x) {
    Tensor d = sub(x, max(x, 1, true).values);
    return mul(d, amin(x, IntSpan(&last, 1), true));
  };
  struct Case {
    std::function<Tensor(const Tensor&)> body;
    const char* name;
    int32_t passes;
  };
  for (const Case& c : {Case{rmsnorm, "mul+sum+div_scalar+add_scalar+rsqrt+mul+mul", 2},
                        Case{softmax, "amax+add+exp+sum+div", 3}, Case{log_softmax, "logsumexp+add", 2},
                        Case{standardise, "sum+div_scalar+add+var+add_scalar+sqrt+div", 3},
                        Case{shifted, "max_dim+add+amin+mul", 3}}) {
    Tensor x0 = mul(rand(Shape{12, 37}), 4.0);
    std::shared_ptr<Graph> graph;
    {
      Capture capture({x0});
      Tensor y = c.body(x0);
      capture.end();
      graph = capture.build({y});
      ASSERT_TRUE(graph);
    }
    std::shared_ptr<Graph> o1 = graph->optimized(jit::PassConfig{});
    EXPECT_EQ(o1->num_ops(), 1u);
    ASSERT_EQ(o1->programs().size(), 1u);
    EXPECT_EQ(o1->programs()[0]->name, c.name);
    EXPECT_TRUE(o1->programs()[0]->row_reduction);
    EXPECT_EQ(o1->programs()[0]->passes, c.passes);
    for (float shift : {-2.0f, 0.0f, 3.0f}) {
      Tensor x = add(mul(rand(Shape{12, 37}), 4.0), shift);
      EXPECT_EQ(values(o1->launch({x})[0]), values(c.body(x)));
    }
  }
}

// Loss tails: a chain ending in a sum over every element and the ops on its value, one full-reduction program, eager's
// chunked order (three chunks of 16384, the last partial, summed in parallel), over one dim and over rows of 32 with a
// broadcast bias (the second x - y merged by CSE); interpreted with eager's bits.
TEST(JitFusion, FullReductionProgramsSumEveryElementInEagersOrder) {
  Stream::cpu().synchronize();
  Tensor b = rand(Shape{32});
  auto mse = [&](const Tensor& x, const Tensor& y) { return div(sum(mul(sub(x, y), sub(x, y))), 5.0); };
  auto biased = [&](const Tensor& x, const Tensor& y) { return mul(sum(mul(add(x, b), y)), 0.5); };
  struct Case {
    std::function<Tensor(const Tensor&, const Tensor&)> body;
    Shape shape;
    const char* name;
  };
  for (const Case& c : {Case{mse, Shape{2 * 16384 + 37}, "add+mul+sum+div_scalar"},
                        Case{biased, Shape{1100, 32}, "add+mul+sum+mul_scalar"}}) {
    Tensor x0 = rand(c.shape), y0 = rand(c.shape);
    std::shared_ptr<Graph> graph;
    {
      Capture capture({x0, y0});
      Tensor loss = c.body(x0, y0);
      capture.end();
      graph = capture.build({loss});
      ASSERT_TRUE(graph);
    }
    std::shared_ptr<Graph> o1 = graph->optimized(jit::PassConfig{});
    EXPECT_EQ(o1->num_ops(), 1u);
    ASSERT_EQ(o1->programs().size(), 1u);
    EXPECT_EQ(o1->programs()[0]->name, c.name);
    EXPECT_TRUE(o1->programs()[0]->full_reduction);
    for (float shift : {-2.0f, 0.5f}) {
      Tensor x = add(mul(rand(c.shape), 4.0), shift), y = rand(c.shape);
      EXPECT_EQ(values(o1->launch({x, y})[0]), values(c.body(x, y)));
    }
  }
}

}  // namespace
}  // namespace dg::test
