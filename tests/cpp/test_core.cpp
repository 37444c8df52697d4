// Core smoke tests: tensors, views, arithmetic with broadcasting, sum, autograd.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "dygrad/core/shape.h"
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

// Elementwise outputs are laid out like their inputs (ops/layout.h): values are those of the logical result,
// strides those torch gives (dims ordered by the first input's strides; broadcast dims decide nothing).
TEST(Core, ElementwiseOutputFollowsInputLayout) {
  std::vector<float> values(2 * 3 * 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  Tensor x = from_vector<float>(values, std::vector<int64_t>{2, 3, 4});
  Tensor p = permute(x, std::vector<int64_t>{2, 0, 1});  // [4, 2, 3], strides (1, 12, 4)
  Tensor y = mul(p, 2.0);
  EXPECT_EQ(std::vector<int64_t>(y.strides().begin(), y.strides().end()), (std::vector<int64_t>{1, 12, 4}));
  Tensor row = from_vector<float>({1, 2, 3}, std::vector<int64_t>{3});  // broadcast: decides nothing
  Tensor z = add(row, p);
  EXPECT_EQ(std::vector<int64_t>(z.strides().begin(), z.strides().end()), (std::vector<int64_t>{1, 12, 4}));
  std::vector<float> expected_y, expected_z;
  for (int64_t c = 0; c < 4; ++c)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 3; ++b) {
        const float v = values[static_cast<size_t>(a * 12 + b * 4 + c)];
        expected_y.push_back(2 * v);
        expected_z.push_back(v + static_cast<float>(b + 1));
      }
  EXPECT_EQ(y.to_vector<float>(), expected_y);
  EXPECT_EQ(z.to_vector<float>(), expected_z);
  // Contiguous inputs give a contiguous output; so does a contiguous first input with a permuted second one.
  EXPECT_TRUE(mul(x, x).is_contiguous());
  EXPECT_TRUE(add(contiguous(p), p).is_contiguous());
  EXPECT_EQ(add(contiguous(p), p).to_vector<float>(), add(p, p).to_vector<float>());
}

// core/shape.h: one validation for every factory and view (docs/tensor.md, "Sizes").
TEST(CoreShape, SizesAreCheckedForNegativesAndOverflow) {
  EXPECT_EQ(checked_numel("t", std::vector<int64_t>{2, 3}), 6);
  EXPECT_EQ(checked_numel("t", std::vector<int64_t>{0, 5}), 0);
  EXPECT_THROW(checked_numel("t", std::vector<int64_t>{-7}), Error);
  EXPECT_THROW(checked_numel("t", std::vector<int64_t>{int64_t{1} << 32, int64_t{1} << 32}), Error);
  EXPECT_THROW(checked_numel("t", std::vector<int64_t>{int64_t{1} << 62, int64_t{1} << 40, 0}), Error);  // as torch
  EXPECT_THROW(Tensor::empty(std::vector<int64_t>{int64_t{1} << 62, 4}), Error);
  Tensor base = Tensor::empty(std::vector<int64_t>{4});
  EXPECT_THROW(Tensor::make_view(base, Dims{2, 2}, Dims{int64_t{1} << 62, 1}, 0), Error);
  EXPECT_THROW(Tensor::make_view(base, Dims{5}, Dims{1}, 0), Error);
  EXPECT_THROW(Tensor::make_view(base, Dims{2}, Dims{1}, -1), Error);
  EXPECT_NO_THROW(Tensor::make_view(base, Dims{int64_t{1} << 40}, Dims{0}, 3));  // broadcast: reaches one element
  EXPECT_TRUE(has_internal_overlap(std::vector<int64_t>{3}, std::vector<int64_t>{0}));
  EXPECT_FALSE(has_internal_overlap(std::vector<int64_t>{1}, std::vector<int64_t>{0}));
}

TEST(CoreDType, ScalarConversionsAreChecked) {
  EXPECT_TRUE(scalar_fits(Scalar(int64_t{-1}), DType::UInt8));
  EXPECT_FALSE(scalar_fits(Scalar(int64_t{256}), DType::UInt8));
  EXPECT_FALSE(scalar_fits(Scalar(int64_t{1} << 62), DType::Int32));
  EXPECT_FALSE(scalar_fits(Scalar(std::nan("")), DType::Int64));
  EXPECT_FALSE(scalar_fits(Scalar(1e19), DType::Int64));
  EXPECT_TRUE(scalar_fits(Scalar(1e300), DType::Float16));
  const Scalar min = Scalar(std::numeric_limits<int64_t>::min());
  EXPECT_TRUE(min.negated().is_uint());  // 2**63: torch's integers reach 2**64 - 1
  EXPECT_EQ(min.negated().to_double(), 9223372036854775808.0);
}
