// Symbolic shapes (jit/symbolic.h): captures at two sizes fitted into one graph whose instance at a size never
// captured plans its own arena and runs as one Task equal to eager; the refusals that keep it from guessing. The Python
// API and the bitwise training steps: tests/python/test_jit_symbolic.py.
#include <string>
#include <vector>

#include "dygrad/jit/symbolic.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/runtime/context.h"
#include "harness.h"

namespace dg::test {
namespace {
using jit::Capture;
using jit::Graph;
using jit::SymbolicGraph;

void drain() { Stream::cpu().synchronize(); }

// x [N, 3] -> [3]: a mean over the dynamic dim (its divisor N is an attribute) of exp(x) * w.
const Dims kRows{0};
Tensor body(const Tensor& x, const Tensor& w) { return mean(mul(exp(x), w), kRows); }

std::shared_ptr<Graph> capture_at(int64_t n, const Tensor& w, std::vector<Tensor>& args) {
  args = {randn(Shape{n, 3})};
  Capture capture(args);
  Tensor y = body(args[0], w);
  capture.end();
  return capture.build({y});
}

TEST(JitSymbolic, TwoCapturesServeSizesNeverCapturedAsOneTaskEqualToEager) {
  drain();
  Tensor w = randn(Shape{3});
  SymbolicGraph symbolic({"x dim 0", "x dim 1"});
  std::vector<Tensor> args;
  std::shared_ptr<Graph> at4 = capture_at(4, w, args);
  ASSERT_TRUE(at4);
  EXPECT_EQ(symbolic.add(at4, {4, 3}, args), "");
  Tensor x = randn(Shape{8, 3});
  SymbolicGraph::Instance one = symbolic.instantiate({8, 3}, {x});
  EXPECT_FALSE(one.graph);  // one capture cannot say which sizes follow N
  EXPECT_TRUE(one.more_samples);
  std::shared_ptr<Graph> at8 = capture_at(8, w, args);
  EXPECT_EQ(symbolic.add(at8, {8, 3}, args), "");
  for (int64_t n : {16, 100, 7}) {
    Tensor xn = randn(Shape{n, 3});
    SymbolicGraph::Instance inst = symbolic.instantiate({n, 3}, {xn});
    ASSERT_TRUE(inst.graph) << inst.reason;
    EXPECT_GT(inst.graph->arena_bytes(), at4->arena_bytes());  // planned at its own sizes
    xn.wait_readable();
    const uint64_t before = Stream::cpu().enqueued();
    std::vector<Tensor> out = inst.graph->launch({xn});
    EXPECT_EQ(Stream::cpu().enqueued(), before + 1);
    EXPECT_EQ(out[0].to_vector<float>(), body(xn, w).to_vector<float>());
  }
  // dim 1 never varied: its other sizes are refused, asking for a capture
  SymbolicGraph::Instance wide = symbolic.instantiate({8, 5}, {randn(Shape{8, 5})});
  EXPECT_FALSE(wide.graph);
  EXPECT_TRUE(wide.more_samples);
  EXPECT_NE(wide.reason.find("x dim 1 = 5 has not been varied alone"), std::string::npos) << wide.reason;
  // an argument laid out otherwise than the fits expect
  Tensor transposed = transpose(randn(Shape{3, 16}), 0, 1);
  SymbolicGraph::Instance strided = symbolic.instantiate({16, 3}, {transposed});
  EXPECT_FALSE(strided.graph);
  EXPECT_NE(strided.reason.find("tensor argument 0 has the strides"), std::string::npos) << strided.reason;
}

TEST(JitSymbolic, ExtrasAreFittedAndAnUndefinedArgumentTakesThePredictedGeometry) {
  drain();
  Tensor w = randn(Shape{3});
  SymbolicGraph symbolic({"x dim 0", "x dim 1"});
  std::vector<Tensor> args;
  // extras: integers the caller fits beside the graph's own (Python's reads of sizes): 2 N and 3
  EXPECT_EQ(symbolic.add(capture_at(4, w, args), {4, 3}, args, {8, 3}), "");
  EXPECT_EQ(symbolic.add(capture_at(8, w, args), {8, 3}, args, {16, 3}), "");
  EXPECT_NE(symbolic.add(capture_at(6, w, args), {6, 3}, args, {7}).find("Python compared 1 sizes"), std::string::npos);
  SymbolicGraph::Instance inst = symbolic.instantiate({8, 3}, {randn(Shape{8, 3})});
  ASSERT_TRUE(inst.graph) << inst.reason;
  SymbolicGraph::Instance at = symbolic.instantiate({20, 3}, {Tensor()});  // before the argument exists
  ASSERT_TRUE(at.graph) << at.reason;
  EXPECT_EQ(at.extras, (std::vector<int64_t>{40, 3}));
  ASSERT_EQ(at.arg_geometry.size(), 1u);
  EXPECT_EQ(at.arg_geometry[0].first, (Dims{20, 3}));
  EXPECT_EQ(at.arg_geometry[0].second, (Dims{3, 1}));
  Tensor x = randn(Shape{20, 3});
  x.wait_readable();
  EXPECT_EQ(at.graph->launch({x})[0].to_vector<float>(), body(x, w).to_vector<float>());
}

TEST(JitSymbolic, CapturesThatDifferInMoreThanSizesCannotJoin) {
  drain();
  Tensor w = randn(Shape{3});
  SymbolicGraph symbolic({"x dim 0"});
  std::vector<Tensor> args;
  EXPECT_EQ(symbolic.add(capture_at(4, w, args), {4}, args), "");
  // another op sequence at 8
  args = {randn(Shape{8, 3})};
  std::shared_ptr<Graph> other;
  {
    Capture capture(args);
    Tensor y = mean(mul(relu(args[0]), w), kRows);
    capture.end();
    other = capture.build({y});
  }
  ASSERT_TRUE(other);
  const std::string why = symbolic.add(other, {8}, args);
  EXPECT_NE(why.find("Python chose its ops by the sizes"), std::string::npos) << why;
  // a scalar Python computed from the size that is no whole number
  SymbolicGraph scaled({"x dim 0"});
  for (int64_t n : {4, 9}) {
    args = {randn(Shape{n, 3})};
    Capture capture(args);
    Tensor y = mul(args[0], Scalar(1.0 / static_cast<double>(n)));
    capture.end();
    const std::string reason = scaled.add(capture.build({y}), {n}, args);
    if (n == 9) {
      EXPECT_NE(reason.find("[mul_scalar] has the attributes"), std::string::npos) << reason;
    }
  }
}

}  // namespace
}  // namespace dg::test
