// Autograd engine: accumulation, retain_graph, graph freeing, no_grad/detach, hooks, version counters,
// autograd::grad, higher order, in-place rules, and gradients through views.
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
Tensor leaf(const std::vector<double>& v, const Shape& shape) {
  Tensor t = tensor_from(v, shape);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST(Autograd, AccumulatesAcrossBackwardCalls) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  expect_close(x.grad(), {2, 4, 6}, 0, 0);
  y.backward();
  expect_close(x.grad(), {4, 8, 12}, 0, 0);
}

TEST(Autograd, SecondBackwardWithoutRetainRaises) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(mul(x, x));
  y.backward();
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
}

TEST(Autograd, DiamondSumsBothPaths) {
  Tensor x = leaf({2, 3}, {2});
  Tensor a = mul(x, 3.0), b = mul(x, x);
  sum(add(a, b)).backward();
  expect_close(x.grad(), {3 + 4, 3 + 6}, 0, 0);
}

TEST(Autograd, NoGradAndDetachStopHistory) {
  Tensor x = leaf({1, 2}, {2});
  {
    NoGradGuard no_grad;
    Tensor y = mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
  }
  Tensor d = detach(x);
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(x));
  Tensor z = mul(x, 2.0);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_FALSE(z.is_leaf());
  EXPECT_STREQ(z.grad_fn()->name(), "mul_scalar");
}

TEST(Autograd, RequiresGradOnlyForFloating) {
  Tensor i = from_vector<int64_t>({1, 2}, Shape{2});
  EXPECT_THROW(i.set_requires_grad(true), Error);
  Tensor x = leaf({1, 2}, {2});
  Tensor c = to(x, DType::Int64);
  EXPECT_FALSE(c.requires_grad());
}

TEST(Autograd, HooksSeeAndReplaceGradients) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = mul(x, 2.0);
  std::vector<double> seen;
  y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 10.0);
  });
  x.register_hook([](const Tensor& g) { return add(g, 1.0); });
  sum(y).backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1, 1}));
  expect_close(x.grad(), {21, 21, 21}, 0, 0);
}

TEST(Autograd, RetainGradOnNonLeaf) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 3.0);
  y.retain_grad();
  sum(mul(y, y)).backward();
  expect_close(y.grad(), {6, 12}, 0, 0);
}

TEST(Autograd, InPlaceModificationOfSavedTensorRaises) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 1.0);
  Tensor z = mul(y, y);  // saves y
  add_(y, 1.0);          // modifies y in place: version bump
  try {
    sum(z).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("[mul]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("modified by an inplace operation"), std::string::npos) << msg;
  }
}

TEST(Autograd, InPlaceOnLeafRequiringGradRaises) {
  Tensor x = leaf({1, 2}, {2});
  EXPECT_THROW(add_(x, 1.0), Error);
  NoGradGuard no_grad;
  add_(x, 1.0);  // allowed under no_grad (an optimizer step)
  expect_close(x, {2, 3}, 0, 0);
}

TEST(Autograd, InPlaceOnNonLeafRebasesHistory) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  mul_(y, 3.0);
  Tensor w = tensor_from({5, 7}, {2});
  mul_(y, w);
  sum(y).backward();
  expect_close(x.grad(), {30, 42}, 0, 0);
}

TEST(Autograd, GradFunctionDoesNotAccumulate) {
  Tensor x = leaf({1, 2}, {2});
  Tensor u = leaf({5, 5}, {2});
  Tensor y = sum(mul(mul(x, x), x));
  Tensor outs[1] = {y};
  Tensor ins[2] = {x, u};
  EXPECT_THROW(grad(outs, ins, {}, /*retain_graph=*/true), Error);  // u is unused
  std::vector<Tensor> g = grad(outs, ins, {}, false, false, /*allow_unused=*/true);
  expect_close(g[0], {3, 12}, 0, 0);
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, SecondOrderWithCreateGraph) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(mul(mul(x, x), x));  // sum x^3
  Tensor outs[1] = {y};
  Tensor ins[1] = {x};
  std::vector<Tensor> g = grad(outs, ins, {}, false, /*create_graph=*/true);
  expect_close(g[0], {3, 12}, 0, 0);
  ASSERT_TRUE(g[0].requires_grad());
  sum(g[0]).backward();  // d/dx sum(3x^2) = 6x
  expect_close(x.grad(), {6, 12}, 0, 0);
}

TEST(Autograd, ImplicitGradientOnlyForScalars) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.backward(), Error);
  y.backward(tensor_from({1, 10}, {2}));
  expect_close(x.grad(), {2, 20}, 0, 0);
}

TEST(Autograd, GraphIsFreedAfterBackward) {
  Tensor x = leaf(random_values(1000, 3), {1000});
  Stream::cpu().synchronize();
  const int64_t before = CachingAllocator::cpu().stats().allocated;
  Tensor y = sum(mul(mul(x, x), x));  // saves x*x and x
  y.backward();
  x.set_grad(Tensor());
  Stream::cpu().synchronize();
  // Only y (one float64) is still alive: the saved activations went with the graph.
  EXPECT_EQ(CachingAllocator::cpu().stats().allocated - before, 8);
}

TEST(Autograd, GradientsThroughViews) {
  gradcheck([](const std::vector<Tensor>& v) { return mul(permute(reshape(v[0], std::vector<int64_t>{2, 3, 4}), std::vector<int64_t>{2, 0, 1}), 2.0); },
            {random_tensor({6, 4})}, 1e-6, 1e-7, 1e-6, "reshape/permute");
  gradcheck([](const std::vector<Tensor>& v) { return mul(expand(v[0], std::vector<int64_t>{3, 2, 4}), v[1]); },
            {random_tensor({2, 1}), random_tensor({3, 2, 4}, DType::Float64, 5)}, 1e-6, 1e-7, 1e-6, "expand");
  gradcheck([](const std::vector<Tensor>& v) { return add(transpose(v[0], 0, 1), v[1]); },
            {random_tensor({3, 2}), random_tensor({2, 3}, DType::Float64, 6)}, 1e-6, 1e-7, 1e-6, "transpose");
}

TEST(Autograd, ArithmeticGradcheckWithBroadcastAndScalars) {
  gradcheck([](const std::vector<Tensor>& v) { return sub(div(v[0], add(mul(v[1], v[1]), 1.0)), v[1], 0.5); },
            {random_tensor({2, 3}), random_tensor({3}, DType::Float64, 9)}, 1e-6, 1e-6, 1e-5, "sub/div/add");
  gradcheck([](const std::vector<Tensor>& v) { return rdiv(add(v[0], 3.0), 2.0); }, {random_tensor({4})}, 1e-6, 1e-6,
            1e-5, "rdiv");
  gradcheck([](const std::vector<Tensor>& v) { return rsub(neg(v[0]), 2.0); }, {random_tensor({4})}, 1e-6, 1e-6, 1e-5,
            "rsub/neg");
  gradcheck([](const std::vector<Tensor>& v) { return to(mul(to(v[0], DType::Float32), 2.0), DType::Float64); },
            {random_tensor({4})}, 1e-3, 1e-3, 1e-3, "cast");
  gradcheck([](const std::vector<Tensor>& v) { return mean(v[0], std::vector<int64_t>{1}, true); },
            {random_tensor({3, 4})}, 1e-6, 1e-7, 1e-6, "mean");
}

TEST(Autograd, OverwritingANonLeafWithAConstantSendsZerosBack) {
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor x = mul(a, 2.0);
  fill_(x, 5.0);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_FALSE(x.is_leaf());
  sum(mul(x, x)).backward();
  expect_close(a.grad(), {0, 0, 0}, 0, 0);  // torch's FillBackward0: zeros for the overwritten value
  Tensor b = leaf({1, 2}, {2});
  Tensor y = mul(b, 3.0);
  Tensor c = zeros(std::vector<int64_t>{2}, {DType::Float64});
  copy_(y, c);
  sum(mul(y, b)).backward();
  expect_close(b.grad(), {0, 0}, 0, 0);  // only the direct use of b contributes (y is 0)
}

TEST(Autograd, InPlaceOnAViewRebasesTheBase) {
  // y = 2a; y[0:2] *= 3 (CopySlices on y); the view's history is regenerated from y.
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor y = mul(a, 2.0);
  Tensor v = slice(y, 0, 0, 2, 1);
  mul_(v, 3.0);
  EXPECT_STREQ(y.grad_fn()->display_name().c_str(), "CopySlices");
  EXPECT_EQ(v.grad_fn()->display_name(), "AsStridedBackward0");
  add(sum(y), sum(v)).backward();
  expect_close(a.grad(), {12, 12, 2}, 0, 0);
}

TEST(Autograd, TakenGradientBuffersAreNotModifiedWhileStillRead) {
  // add passes the same gradient to several edges: a takes it as .grad, and more gradient for a arrives
  // while mul(a, v)'s formula, which runs later, still reads that buffer.
  Tensor a = leaf({1, 2, 3}, {3});
  Tensor w = tensor_from({10, 20, 30}, {3});
  Tensor v = tensor_from({100, 200, 300}, {3});
  Tensor z = add(add(a, mul(a, w)), mul(a, v));
  Tensor g = tensor_from({1, 2, 3}, {3});
  z.backward(g, /*retain_graph=*/true);
  expect_close(a.grad(), {1 * 111, 2 * 221, 3 * 331}, 0, 0);
  expect_close(g, {1, 2, 3}, 0, 0);  // the caller's gradient is untouched
  z.backward(g);                      // accumulates into the taken buffer in place now
  expect_close(a.grad(), {2 * 111, 4 * 221, 6 * 331}, 0, 0);
  expect_close(g, {1, 2, 3}, 0, 0);
}

// ~Node frees the chain it alone keeps alive iteratively: a 1M-node graph does not overflow the stack,
// through edges (y * 1.0) and through saved tensors (y * x saves y).
TEST(Autograd, DeepGraphIsFreedIteratively) {
  Tensor x = from_vector<float>({1}, Shape{1});
  x.set_requires_grad(true);
  Tensor y = x;
  for (int i = 0; i < 1000000; ++i) y = mul(y, 1.0);
  y = Tensor();
  y = x;
  for (int i = 0; i < 200000; ++i) y = mul(y, x);
  y = Tensor();
  SUCCEED();
}

TEST(Autograd, RetainGradHoldsNoCycle) {
  Tensor x = from_vector<float>({1}, Shape{1});
  x.set_requires_grad(true);
  Ref<Node> node;
  {
    Tensor y = mul(x, 2.0);
    y.retain_grad();
    node = y.grad_fn();
    EXPECT_EQ(node->retained_outputs.at(0), y.impl());
  }  // y dies: its slot is cleared, the node is held only by `node`
  EXPECT_EQ(node->use_count(), 1);
  EXPECT_EQ(node->retained_outputs.at(0), nullptr);
}

namespace {
// A pack hook that keeps a scaled copy; unpacking divides it back, counting both.
struct CountingPacked final : PackedTensor {
  Tensor kept;
  int* unpacks;
  CountingPacked(Tensor t, int* u) : kept(std::move(t)), unpacks(u) {}
  Tensor unpack() override {
    ++*unpacks;
    return mul(kept, 0.5);
  }
};
}  // namespace

TEST(Autograd, SavedTensorHooksPackAndUnpackWhatNodesSave) {
  int packs = 0, unpacks = 0;
  Tensor x = leaf({1, 2, 3}, {3});
  push_saved_tensor_hook([&](const Tensor& t) -> std::shared_ptr<PackedTensor> {
    ++packs;
    return std::make_shared<CountingPacked>(mul(t, 2.0), &unpacks);  // mul inside the hook saves unhooked
  });
  Tensor y = sum(mul(x, x));  // mul saves both operands
  pop_saved_tensor_hook();
  Tensor z = sum(mul(x, x));  // no hook any more
  EXPECT_EQ(packs, 2);
  y.backward();
  EXPECT_EQ(unpacks, 2);
  expect_close(x.grad(), {2, 4, 6}, 0, 0);
  z.backward();
  EXPECT_EQ(unpacks, 2);
  expect_close(x.grad(), {4, 8, 12}, 0, 0);
  EXPECT_THROW(pop_saved_tensor_hook(), Error);
}

TEST(Autograd, AnomalyModeNamesTheNodeThatProducedNan) {
  Tensor x = leaf({0, 1}, {2});
  set_anomaly_mode(true);
  Tensor y;
  {
    CallSiteScope site({"model.py", "forward", 12});
    y = sum(div(x, x));
  }
  try {
    y.backward();
    set_anomaly_mode(false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    set_anomaly_mode(false);
    const std::string message = e.what();
    EXPECT_NE(message.find("Function 'DivBackward0' returned nan values in its 1th output"), std::string::npos) << message;
    EXPECT_NE(message.find("model.py:12, in forward"), std::string::npos) << message;
  }
  Tensor w = leaf({0, 1}, {2});
  sum(div(w, w)).backward();  // off: the NaN goes through
  EXPECT_TRUE(std::isnan(w.grad().to_vector<double>()[0]));
}
