// Core smoke tests: tensors, views, arithmetic with broadcasting, sum, autograd.
#include <gtest/gtest.h>

#include "dygrad/dygrad.h"

using namespace dg;

TEST(Core, AddBroadcastAndSum) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, std::vector<int64_t>{2, 3});
  Tensor b = from_vector<float>({10, 20, 30}, std::vector<int64_t>{3});
  Tensor c = add(a, b);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  Tensor s = sum(c, std::vector<int64_t>{0});
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{25, 47, 69}));
  EXPECT_EQ(sum(c).item<float>(), 141.0f);
}

TEST(Core, Autograd) {
  Tensor a = from_vector<double>({1, 2, 3}, std::vector<int64_t>{3});
  a.set_requires_grad(true);
  Tensor b = from_vector<double>({4, 5, 6}, std::vector<int64_t>{3});
  b.set_requires_grad(true);
  Tensor loss = sum(mul(mul(a, b), a));
  loss.backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{8, 20, 36}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 4, 9}));
}

TEST(Core, ErrorsNameTheOp) {
  Tensor a = zeros(std::vector<int64_t>{2, 3});
  Tensor b = zeros(std::vector<int64_t>{4});
  try {
    add(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("[add]"), std::string::npos) << e.what();
  }
}
