// Random factories and arange: Philox known answers, reproducibility from the seed, independence from
// the thread count, statistics of rand/randn/randint/bernoulli_mask, arange values and dtypes.
#include "harness.h"

#include "dygrad/backend/cpu/random.h"

using namespace dg;
using namespace dg::test;

namespace {
template <typename F>
void expect_error(F&& f, const std::string& op, ErrorKind kind) {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
  }
}

struct Moments {
  double mean = 0, var = 0, min = 1e300, max = -1e300;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= double(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= double(v.size() - 1);
  return m;
}
}  // namespace

TEST(Random, PhiloxKnownAnswers) {
  // Random123's kat_vectors for philox4x32-10.
  EXPECT_EQ(cpu::philox4x32_10({0, 0, 0, 0}, {0, 0}), (cpu::PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(cpu::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (cpu::PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(cpu::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (cpu::PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Random, ElementsFollowTheCounterLayout) {
  manual_seed(0x1234567890abcdefULL);
  Tensor r = rand(std::vector<int64_t>{10}, {DType::Float32});
  std::vector<float> v = r.to_vector<float>();
  for (int64_t i = 0; i < 10; ++i) {
    const uint32_t word = cpu::philox_block(0x1234567890abcdefULL, static_cast<uint64_t>(i / 4))[static_cast<size_t>(i % 4)];
    EXPECT_EQ(v[static_cast<size_t>(i)], static_cast<float>(word >> 8) * (1.0f / 16777216.0f)) << i;
  }
  // The next op continues at the next unused counter (10 floats use 3 counters).
  EXPECT_EQ(rng_state().offset, 3u);
  Tensor d = rand(std::vector<int64_t>{3}, {DType::Float64});
  EXPECT_EQ(rng_state().offset, 5u);
  const auto w = cpu::philox_block(0x1234567890abcdefULL, 3);
  const uint64_t bits = (uint64_t{w[2]} << 32 | w[3]) >> 11;
  EXPECT_EQ(d.to_vector<double>()[1], static_cast<double>(bits) / 9007199254740992.0);
}

TEST(Random, ManualSeedReproduces) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16}) {
    manual_seed(42);
    std::vector<double> a = rand(std::vector<int64_t>{1000}, {dtype}).to_vector<double>();
    std::vector<double> b = randn(std::vector<int64_t>{7, 9}, {dtype}).to_vector<double>();
    manual_seed(42);
    EXPECT_EQ(rand(std::vector<int64_t>{1000}, {dtype}).to_vector<double>(), a);
    EXPECT_EQ(randn(std::vector<int64_t>{7, 9}, {dtype}).to_vector<double>(), b);
    EXPECT_NE(rand(std::vector<int64_t>{1000}, {dtype}).to_vector<double>(), a);  // the stream moved on
  }
  // A saved state replays.
  manual_seed(7);
  RngState state = rng_state();
  std::vector<int64_t> x = randint(-5, 5, std::vector<int64_t>{100}).to_vector<int64_t>();
  set_rng_state(state);
  EXPECT_EQ(randint(-5, 5, std::vector<int64_t>{100}).to_vector<int64_t>(), x);
  manual_seed(8);
  EXPECT_NE(randint(-5, 5, std::vector<int64_t>{100}).to_vector<int64_t>(), x);
}

TEST(Random, IndependentOfThreadCount) {
  const int threads = get_context().num_threads;
  const std::vector<int64_t> shape{3, 100003};  // many chunks of counters
  std::vector<std::vector<double>> results[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : 2);
    manual_seed(99);
    results[run].push_back(rand(shape, {DType::Float32}).to_vector<double>());
    results[run].push_back(randn(shape, {DType::Float64}).to_vector<double>());
    results[run].push_back(randint(0, 1000, shape).to_vector<double>());
    results[run].push_back(bernoulli_mask(shape, 0.3, DType::Float32).to_vector<double>());
  }
  set_num_threads(threads);
  for (size_t k = 0; k < results[0].size(); ++k) EXPECT_TRUE(results[0][k] == results[1][k]) << "op " << k;
}

TEST(Random, UniformStatistics) {
  manual_seed(2024);
  const int64_t n = 200000;
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Moments m = moments(rand(std::vector<int64_t>{n}, {dtype}).to_vector<double>());
    // mean 1/2 and variance 1/12; standard errors ~0.00065 and ~0.0002: bounds at ~6 sigma.
    EXPECT_NEAR(m.mean, 0.5, 0.004) << dtype_name(dtype);
    EXPECT_NEAR(m.var, 1.0 / 12.0, 0.0015) << dtype_name(dtype);
    EXPECT_GE(m.min, 0.0);
    EXPECT_LT(m.max, 1.0);
  }
}

TEST(Random, NormalStatistics) {
  manual_seed(31337);
  const int64_t n = 200001;  // odd: the last pair is incomplete
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16}) {
    std::vector<double> v = randn(std::vector<int64_t>{n}, {dtype}).to_vector<double>();
    Moments m = moments(v);
    EXPECT_NEAR(m.mean, 0.0, 0.015) << dtype_name(dtype);
    EXPECT_NEAR(m.var, 1.0, 0.02) << dtype_name(dtype);
    double within_one = 0;
    for (double x : v) within_one += std::fabs(x) < 1.0;
    EXPECT_NEAR(within_one / double(n), 0.682689, 0.01) << dtype_name(dtype);
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
  }
  Tensor g = randn(std::vector<int64_t>{4, 5}, {DType::Float32, true});
  EXPECT_TRUE(g.requires_grad());
}

TEST(Random, RandintAndBernoulli) {
  manual_seed(5);
  std::vector<int64_t> v = randint(-3, 4, std::vector<int64_t>{70000}).to_vector<int64_t>();
  std::vector<int64_t> counts(7, 0);
  for (int64_t x : v) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    ++counts[static_cast<size_t>(x + 3)];
  }
  for (int64_t c : counts) EXPECT_NEAR(double(c), 10000.0, 600.0);
  // A range above 2^32 uses two words per element.
  std::vector<int64_t> wide = randint(-(int64_t{1} << 40), int64_t{1} << 40, std::vector<int64_t>{1000}).to_vector<int64_t>();
  double mean = 0;
  for (int64_t x : wide) mean += double(x) / double(int64_t{1} << 40);
  EXPECT_NEAR(mean / 1000.0, 0.0, 0.2);
  EXPECT_EQ(randint(0, 10, std::vector<int64_t>{2, 3}, DType::Int32).dtype(), DType::Int32);
  EXPECT_EQ(randint(0, 10, std::vector<int64_t>{2, 3}, DType::Float32).dtype(), DType::Float32);

  Tensor mask = bernoulli_mask(std::vector<int64_t>{100000}, 0.25);
  EXPECT_EQ(mask.dtype(), DType::Bool);
  double ones_count = 0;
  for (bool b : mask.to_vector<bool>()) ones_count += b;
  EXPECT_NEAR(ones_count / 100000.0, 0.25, 0.01);
  EXPECT_EQ(sum(bernoulli_mask(std::vector<int64_t>{1000}, 0.0)).item<int64_t>(), 0);
  EXPECT_EQ(sum(bernoulli_mask(std::vector<int64_t>{1000}, 1.0)).item<int64_t>(), 1000);
}

TEST(Random, ZeroSize) {
  manual_seed(1);
  EXPECT_EQ(rand(std::vector<int64_t>{0, 5}).numel(), 0);
  EXPECT_EQ(randn(std::vector<int64_t>{0}).to_vector<float>().size(), 0u);
  EXPECT_EQ(rng_state().offset, 0u);
  EXPECT_EQ(rand(std::vector<int64_t>{}).dim(), 0);
}

TEST(Random, Errors) {
  expect_error([] { rand(std::vector<int64_t>{2}, {DType::Int64}); }, "rand", ErrorKind::Type);
  expect_error([] { randn(std::vector<int64_t>{2}, {DType::Bool}); }, "randn", ErrorKind::Type);
  expect_error([] { randint(3, 3, std::vector<int64_t>{2}); }, "randint", ErrorKind::Value);
  expect_error([] { bernoulli_mask(std::vector<int64_t>{2}, 1.5); }, "bernoulli_mask", ErrorKind::Value);
  expect_error([] { arange(0, 10, 0); }, "arange", ErrorKind::Value);
  expect_error([] { arange(0, 10, -1); }, "arange", ErrorKind::Value);
  expect_error([] { arange(10.0, 0.0, 0.5); }, "arange", ErrorKind::Value);
}

TEST(Random, Arange) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::Int64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(2, 11, 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(arange(10, 2, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4}));
  EXPECT_EQ(arange(-2, -2).numel(), 0);
  Tensor f = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(arange(1, 2.5).to_vector<float>(), (std::vector<float>{1, 2}));  // size ceil(1.5) = 2
  EXPECT_EQ(arange(0, 1, 0.1).numel(), 10);
  Tensor d = arange(0, 5, 1, DType::Float64);
  EXPECT_EQ(d.dtype(), DType::Float64);
  expect_close(d, {0, 1, 2, 3, 4}, 0, 0);
  EXPECT_EQ(arange(0, 4, 1, DType::Int32).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
  // Floating values are start + i * step, rounded once (no accumulated error).
  std::vector<double> big = arange(0.0, 100000.0, 0.1, DType::Float64).to_vector<double>();
  ASSERT_EQ(big.size(), 1000000u);
  EXPECT_EQ(big[999999], 999999 * 0.1);
}
