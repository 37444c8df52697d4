// The harness itself: non-contiguous copies keep values, and gradcheck catches a wrong gradient.
#include "harness.h"

using namespace dg;
using namespace dg::test;

TEST(Harness, NonContiguousKeepsValues) {
  Tensor a = random_tensor({3, 4, 5});
  Tensor b = non_contiguous(a);
  EXPECT_FALSE(b.is_contiguous());
  expect_close(b, a.to_vector<double>(), 0, 0);
}

TEST(Harness, GradcheckArithmetic) {
  gradcheck([](const std::vector<Tensor>& x) { return div(mul(x[0], x[1]), add(x[1], 3.0)); },
            {random_tensor({2, 3}, DType::Float64, 1), random_tensor({3}, DType::Float64, 2)}, 1e-6, 1e-6, 1e-5, "mul/div");
}
