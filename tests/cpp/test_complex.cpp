// Complex ops (ops/complex.h): the views between complex tensors and their float pairs, the composed arithmetic
// against std::complex references, the gradient convention (dL/dre + i dL/dim) and the refusal of other ops.
#include <complex>

#include "dygrad/ops/complex.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
// A complex128 tensor [n] from (re, im) pairs.
Tensor complex_from(const std::vector<double>& pairs) {
  return view_as_complex(from_vector<double>(pairs, Dims{static_cast<int64_t>(pairs.size() / 2), 2}, DType::Float64));
}
std::vector<std::complex<double>> read(const Tensor& z) {
  const std::vector<double> parts = to(view_as_real(detach(z)), DType::Float64).to_vector<double>();
  std::vector<std::complex<double>> out;
  for (size_t i = 0; i + 1 < parts.size(); i += 2) out.emplace_back(parts[i], parts[i + 1]);
  return out;
}
}  // namespace

TEST(Complex, ViewsShareStorageWithDoubledStrides) {
  Tensor pairs = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, Dims{2, 2, 2}, DType::Float32);
  Tensor z = view_as_complex(pairs);
  EXPECT_EQ(z.dtype(), DType::Complex64);
  EXPECT_EQ(z.stride(0), 2);
  EXPECT_EQ(z.stride(1), 1);
  Tensor back = view_as_real(transpose(z, 0, 1));
  EXPECT_EQ(back.stride(0), 2);
  EXPECT_EQ(back.stride(1), 4);
  EXPECT_EQ(back.stride(2), 1);
  EXPECT_TRUE(back.shares_storage(pairs));
  Tensor im = imag(z);
  EXPECT_EQ(im.stride(0), 4);
  EXPECT_EQ(im.stride(1), 2);
  EXPECT_EQ(im.storage_offset(), 1);
  EXPECT_THROW(view_as_complex(transpose(pairs, 1, 2)), Error);  // the pair's stride is not 1
  EXPECT_THROW(view_as_real(pairs), Error);
}

TEST(Complex, ArithmeticMatchesStdComplex) {
  const Tensor a = complex_from({1, 2, -3, 0.5, 0, -1}), b = complex_from({0.5, -2, 4, 1, -1.5, 2});
  const auto av = read(a), bv = read(b);
  const auto total_ab = read(add(a, b, 2)), product = read(mul(a, b)), quotient = read(div(a, b)), e = read(exp(a));
  const auto magnitude = abs(a).to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_NEAR(std::abs(total_ab[i] - (av[i] + 2.0 * bv[i])), 0, 1e-15) << i;
    EXPECT_NEAR(std::abs(product[i] - av[i] * bv[i]), 0, 1e-14) << i;
    EXPECT_NEAR(std::abs(quotient[i] - av[i] / bv[i]), 0, 1e-14) << i;
    EXPECT_NEAR(std::abs(e[i] - std::exp(av[i])), 0, 1e-13) << i;
    EXPECT_NEAR(magnitude[i], std::abs(av[i]), 1e-15) << i;
  }
  const auto total = read(dg::sum(a));
  EXPECT_NEAR(std::abs(total[0] - (av[0] + av[1] + av[2])), 0, 1e-15);
}

TEST(Complex, GradientIsTorchsConvention) {
  // L = sum |z|^2: dL/dre + i dL/dim = 2 z.
  Tensor z = complex_from({1, 2, -3, 0.5});
  z.set_requires_grad(true);
  Tensor magnitude = abs(z);
  sum(mul(magnitude, magnitude)).backward();
  const auto grad = read(z.grad()), value = read(z);
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(std::abs(grad[i] - 2.0 * value[i]), 0, 1e-14) << i;
}

TEST(Complex, OtherOpsRefuseNamingOpAndDtype) {
  const Tensor z = complex_from({1, 2, 3, 4});
  try {
    relu(z);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::NotImplemented);
    EXPECT_NE(std::string(e.what()).find("[relu] not implemented for 'ComplexDouble'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cumsum(z, 0), Error);  // (matmul of complex tensors runs: composed of real products)
}
