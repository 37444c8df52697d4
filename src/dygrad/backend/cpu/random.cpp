// CPU kernels of the random factories: Philox4x32-10 blocks mapped to uniform, normal, integer and
// Bernoulli values, and arange. Every element depends only on (seed, offset, its index), so results are
// identical for any thread count and a Task can be replayed from its attributes. See docs/rng.md.
//
// Notation: out[N] contiguous; c = offset + counter index; word(c, w) = word w of philox_block(seed, c).
//   float/half/bf16 (4 elements per counter):  element i <- word(offset + i / 4, i % 4)
//   double (2 elements per counter):           element i <- words 2 (i % 2), 2 (i % 2) + 1 of counter
//                                              offset + i / 2, joined as (high << 32) | low
#include "dygrad/backend/cpu/random.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/op_attrs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "dygrad/core/error.h"

#include "dygrad/runtime/scratch.h"
#include "dygrad/runtime/thread_pool.h"

// The kernels: one contiguous output out[N], no inputs; the Philox counter in the attributes (RngCounter).
//   rand_kernel (RandomAttrs): uniform [0, 1);  randn_kernel (RandomAttrs): standard normal (Box-Muller);
//   randint_kernel (RandintAttrs): uniform integers in [low, high);  bernoulli_kernel (BernoulliAttrs): 1 with
//   probability p, else 0;  arange_kernel (ArangeAttrs): out[i] = start + i * step;
//   linspace_kernel (LinspaceAttrs): out[N] from start to end (base ** that for logspace).
// bernoulli_tensor_kernel: input p[N] contiguous (floating), output out[N] of p's dtype: 1 where word(i) < p[i] 2^32.
// multinomial_kernel: input w[R, C] (floating, any strides), output out[R, S] int64 contiguous (MultinomialAttrs);
//   row r draws uniforms u(r, j) = 53 bits of element r * J + j in the double layout (J = S with replacement,
//   C without): with replacement sample j is the first category whose running sum of w exceeds u(r, j) * total;
//   without, the categories ordered by -log(1 - u(r, c)) / w[r, c] (the exponential race: the order in which
//   sequential draws without replacement pick them), the first S.
namespace dg::cpu {

namespace {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;  // key bumps (golden ratio, sqrt(3) - 1)
constexpr int64_t kCountersPerChunk = 4096;

inline PhiloxCounter philox_round(const PhiloxCounter& c, const PhiloxKey& k) {
  const uint64_t p0 = uint64_t{kPhiloxM0} * c[0], p1 = uint64_t{kPhiloxM1} * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

inline PhiloxCounter philox(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kPhiloxW0;
      k[1] += kPhiloxW1;
    }
    c = philox_round(c, k);
  }
  return c;
}

inline PhiloxCounter block(uint64_t seed, uint64_t counter) {
  return philox({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u},
                {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Uniform [0, 1) from the top `bits` bits of a word (bits <= 24 so that float holds it exactly).
template <int Bits>
inline float uniform_from_word(uint32_t w) {
  return static_cast<float>(w >> (32 - Bits)) * (1.0f / static_cast<float>(1u << Bits));
}
// Uniform [0, 1) with 53 bits from two words.
inline double uniform_from_words(uint32_t high, uint32_t low) {
  const uint64_t u = (uint64_t{high} << 32 | low) >> 11;
  return static_cast<double>(u) * (1.0 / 9007199254740992.0);  // 2^-53
}
// Bits of randomness per element for each float type: the mantissa width (plus the implicit bit) so
// that rounding to the type never produces 1.0.
template <typename T> constexpr int uniform_bits() {
  if constexpr (std::is_same_v<T, Half>) return 11;
  else if constexpr (std::is_same_v<T, BFloat16>) return 8;
  else return 24;
}

// Calls fill(c, words, first, count) for every counter index c of the Task: `per_counter` elements
// starting at element `first` (the last counter may fill fewer). Split over the pool by counters.
template <typename Fill>
void for_each_counter(const Task& task, RngCounter rng, int64_t per_counter, Fill&& fill) {
  const int64_t n = task.outputs[0].numel();
  const int64_t counters = (n + per_counter - 1) / per_counter;
  const uint64_t seed = rng.seed, offset = rng.offset;
  parallel_for(0, counters, kCountersPerChunk, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const PhiloxCounter words = block(seed, offset + static_cast<uint64_t>(c));
      const int64_t first = c * per_counter;
      fill(words, first, std::min(per_counter, n - first));
    }
  });
}
}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) { return philox(counter, key); }
PhiloxCounter philox_block(uint64_t seed, uint64_t counter) { return block(seed, counter); }

void rand_kernel(Task& task) {
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() {
    T* out = task.outputs[0].data<T>();
    if constexpr (std::is_same_v<T, double>) {
      for_each_counter(task, task.attrs.get<RandomAttrs>().rng, 2, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; ++k) out[first + k] = uniform_from_words(w[2 * k], w[2 * k + 1]);
      });
    } else {
      for_each_counter(task, task.attrs.get<RandomAttrs>().rng, 4, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; ++k) out[first + k] = static_cast<T>(uniform_from_word<uniform_bits<T>()>(w[k]));
      });
    }
  });
}

// Box-Muller: a pair of elements (2j, 2j + 1) takes uniforms u1 in (0, 1] (as 1 - u) and u2 in [0, 1);
// r = sqrt(-2 ln u1): element 2j = r cos(2 pi u2), element 2j + 1 = r sin(2 pi u2).
// float/half/bf16: a counter's words (0, 1) and (2, 3) give u1, u2 of its two pairs (24 bits each);
// double: a counter gives one pair, u1 from words (0, 1) and u2 from words (2, 3) (53 bits each).
void randn_kernel(Task& task) {
  visit_floating(task.outputs[0].dtype(), [&]<typename T>() {
    T* out = task.outputs[0].data<T>();
    if constexpr (std::is_same_v<T, double>) {
      for_each_counter(task, task.attrs.get<RandomAttrs>().rng, 2, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
        const double u1 = 1.0 - uniform_from_words(w[0], w[1]), u2 = uniform_from_words(w[2], w[3]);
        const double r = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * std::numbers::pi * u2;
        out[first] = r * std::cos(theta);
        if (count > 1) out[first + 1] = r * std::sin(theta);
      });
    } else {
      for_each_counter(task, task.attrs.get<RandomAttrs>().rng, 4, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
        for (int64_t pair = 0; 2 * pair < count; ++pair) {
          const float u1 = 1.0f - uniform_from_word<24>(w[2 * pair]), u2 = uniform_from_word<24>(w[2 * pair + 1]);
          const float r = std::sqrt(-2.0f * std::log(u1)), theta = 2.0f * std::numbers::pi_v<float> * u2;
          out[first + 2 * pair] = static_cast<T>(r * std::cos(theta));
          if (2 * pair + 1 < count) out[first + 2 * pair + 1] = static_cast<T>(r * std::sin(theta));
        }
      });
    }
  });
}

// Integers in [low, high): range r = high - low. r <= 2^32: low + (word * r) >> 32 from one word per
// element; larger ranges: low + (u64 * r) >> 64 from two words (the double layout). Multiply-shift keeps
// the bias below r / 2^32 (resp. r / 2^64) without rejection loops, so the counter use stays fixed.
void randint_kernel(Task& task) {
  const RandintAttrs& attrs = task.attrs.get<RandintAttrs>();
  const int64_t low = attrs.low, high = attrs.high;
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    T* out = task.outputs[0].data<T>();
    auto store = [&](int64_t i, uint64_t offset_in_range) {
      const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(low) + offset_in_range);
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) out[i] = T(static_cast<float>(v));
      else out[i] = static_cast<T>(v);
    };
    if (range <= (uint64_t{1} << 32)) {
      for_each_counter(task, attrs.rng, 4, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; ++k) store(first + k, (uint64_t{w[k]} * range) >> 32);
      });
    } else {
      __extension__ typedef unsigned __int128 uint128;
      for_each_counter(task, attrs.rng, 2, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
        for (int64_t k = 0; k < count; ++k) {
          const uint64_t u = uint64_t{w[2 * k]} << 32 | w[2 * k + 1];
          store(first + k, static_cast<uint64_t>((static_cast<uint128>(u) * range) >> 64));
        }
      });
    }
  });
}

// 1 where word < p * 2^32 (probability p, exact to 2^-32), else 0; one word per element.
void bernoulli_kernel(Task& task) {
  const BernoulliAttrs& attrs = task.attrs.get<BernoulliAttrs>();
  const double p = attrs.p;
  const uint64_t threshold = p >= 1.0 ? (uint64_t{1} << 32) : static_cast<uint64_t>(p * 4294967296.0);
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    T* out = task.outputs[0].data<T>();
    const T one = T(1), zero = T(0);
    for_each_counter(task, attrs.rng, 4, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
      for (int64_t k = 0; k < count; ++k) out[first + k] = uint64_t{w[k]} < threshold ? one : zero;
    });
  });
}

// out[i] = start + i * step: integers exactly in int64, floating values computed in double and rounded
// once (torch.arange's accumulate type on CPU).
void arange_kernel(Task& task) {
  const ArangeAttrs& attrs = task.attrs.get<ArangeAttrs>();
  const Scalar start = attrs.start, step = attrs.step;
  const int64_t n = task.outputs[0].numel();
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    T* out = task.outputs[0].data<T>();
    const bool exact_integers = !is_floating(dtype_of<T>::value) && start.is_integral() && step.is_integral();
    parallel_for(0, n, kCountersPerChunk * 4, [&](int64_t lo, int64_t hi) {
      if (exact_integers) {
        const int64_t s = start.to_int(), d = step.to_int();
        for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<T>(s + i * d);
      } else {
        const double s = start.to_double(), d = step.to_double();
        for (int64_t i = lo; i < hi; ++i) {
          const double v = s + static_cast<double>(i) * d;
          if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) out[i] = T(static_cast<float>(v));
          else out[i] = static_cast<T>(v);
        }
      }
    });
  });
}

// out[i] = 1 where word(i) < p[i] 2^32 (exact to 2^-32); p outside [0, 1] (or NaN) is a deferred RuntimeError.
void bernoulli_tensor_kernel(Task& task) {
  const Tensor& p = task.inputs[0];
  visit_floating(p.dtype(), [&]<typename T>() {
    const T* prob = p.data<T>();
    T* out = task.outputs[0].data<T>();
    for_each_counter(task, task.attrs.get<BernoulliTensorAttrs>().rng, 4, [&](const PhiloxCounter& w, int64_t first, int64_t count) {
      for (int64_t k = 0; k < count; ++k) {
        const double q = static_cast<double>(static_cast<compute_t<T>>(prob[first + k]));
        if (!(q >= 0.0 && q <= 1.0))
          fail(ErrorKind::Runtime, "[bernoulli] Expected p_in >= 0 && p_in <= 1 to be true, but got p = ", q);
        const uint64_t threshold = q >= 1.0 ? (uint64_t{1} << 32) : static_cast<uint64_t>(q * 4294967296.0);
        out[first + k] = uint64_t{w[k]} < threshold ? T(1) : T(0);
      }
    });
  });
}

// Rows in parallel (each row's draws are its own elements of the counter stream, whatever the thread).
void multinomial_kernel(Task& task) {
  const Tensor& weights = task.inputs[0];
  const Tensor& out = task.outputs[0];
  const MultinomialAttrs& attrs = task.attrs.get<MultinomialAttrs>();
  const int64_t rows = weights.shape()[0], categories = weights.shape()[1], samples = attrs.num_samples;
  const int64_t per_row = attrs.replacement ? samples : categories;
  const int64_t sr = weights.strides()[0], sc = weights.strides()[1];
  const uint64_t seed = attrs.rng.seed, offset = attrs.rng.offset;
  // The 53-bit uniform of element e of the Task's stream (two words of counter offset + e / 2).
  auto uniform = [&](int64_t e) {
    const PhiloxCounter w = block(seed, offset + static_cast<uint64_t>(e / 2));
    const int k = static_cast<int>(e % 2);
    return uniform_from_words(w[2 * k], w[2 * k + 1]);
  };
  visit_floating(weights.dtype(), [&]<typename T>() {
    ScratchArena& scratch = task_scratch(task);
    auto keys = scratch.per_worker<double>(categories, rows);    // per pool thread: a key per category
    auto orders = scratch.per_worker<int64_t>(categories, rows);  // and an index per category
    parallel_for(0, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(categories, 1)), [&](int64_t lo, int64_t hi) {
      const auto held_key = keys.acquire();
      const auto held_order = orders.acquire();
      double* key = held_key.data();
      int64_t* order = held_order.data();
      for (int64_t r = lo; r < hi; ++r) {
        const T* w = weights.data<T>() + r * sr;
        int64_t* sample = out.data<int64_t>() + r * samples;
        double total = 0;
        for (int64_t c = 0; c < categories; ++c) {
          const double v = static_cast<double>(static_cast<compute_t<T>>(w[c * sc]));
          if (!(v >= 0.0) || std::isinf(v))
            fail(ErrorKind::Runtime, "[multinomial] probability tensor contains either `inf`, `nan` or element < 0");
          total += v;
          key[c] = total;  // the running sum (with replacement)
        }
        if (!(total > 0.0))
          fail(ErrorKind::Runtime, "[multinomial] invalid multinomial distribution (sum of probabilities <= 0)");
        if (attrs.replacement) {
          for (int64_t j = 0; j < samples; ++j) {
            const double target = uniform(r * per_row + j) * total;
            const double* it = std::upper_bound(key, key + categories, target);
            sample[j] = std::min<int64_t>(it - key, categories - 1);
          }
          continue;
        }
        for (int64_t c = 0; c < categories; ++c) {
          const double v = static_cast<double>(static_cast<compute_t<T>>(w[c * sc]));
          const double arrival = -std::log1p(-uniform(r * per_row + c));  // Exp(1), finite: 1 - u > 0
          // Zero weights come last, in index order (torch draws them once the positive ones run out).
          key[c] = v > 0.0 ? arrival / v : std::numeric_limits<double>::infinity();
          order[c] = c;
        }
        std::partial_sort(order, order + samples, order + categories, [&](int64_t a, int64_t b) {
          return key[a] < key[b] || (key[a] == key[b] && a < b);
        });
        for (int64_t j = 0; j < samples; ++j) sample[j] = order[j];
      }
    });
  });
}

// torch's CPU linspace: step = (end - start) / (steps - 1) in the output type (double for integers); element i
// is start + i step for i < steps / 2, else end - (steps - 1 - i) step, computed in double from the typed start,
// end and step and rounded once. 16-bit outputs compute as float32 does. logspace (torch's logspace_cpu): step =
// double(end - start) / (steps - 1) from the typed ends, element i = base ** (the same two-ended value).
// torch's build contracts linspace's start + step * i into one fused multiply-add (its float64 values are
// those) and logspace's not: written out here, with contraction off for the rest.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
void linspace_kernel(Task& task) {
  const LinspaceAttrs& attrs = task.attrs.get<LinspaceAttrs>();
  const int64_t n = task.outputs[0].numel();
  if (n == 0) return;
  const bool logarithmic = attrs.logarithmic;
  visit_dtype(task.outputs[0].dtype(), [&]<typename T>() {
    using C = compute_t<T>;
    T* out = task.outputs[0].data<T>();
    const C s = attrs.start.to<C>(), e = attrs.end.to<C>();
    const double start = static_cast<double>(s), end = static_cast<double>(e);
    double step = 0.0;
    if (n > 1 && (logarithmic || !std::is_floating_point_v<C>)) step = static_cast<double>(static_cast<C>(e - s)) / static_cast<double>(n - 1);
    else if (n > 1) step = static_cast<double>(static_cast<C>((e - s) / static_cast<C>(n - 1)));
    if (n > 1 && !logarithmic && !std::is_floating_point_v<C>) step = (end - start) / static_cast<double>(n - 1);
    const int64_t halfway = n == 1 ? 1 : n / 2;  // one step: start
    const double base = attrs.base;
    parallel_for(0, n, kCountersPerChunk * 4, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const double k = static_cast<double>(i < halfway ? i : n - 1 - i);
        double v;
        if (logarithmic) v = std::pow(base, i < halfway ? start + step * k : end - step * k);
        else v = i < halfway ? std::fma(step, k, start) : std::fma(-step, k, end);
        out[i] = static_cast<T>(static_cast<C>(v));
      }
    });
  });
}
#pragma GCC pop_options

DG_REGISTER_KERNEL(bernoulli, Device::Type::CPU, bernoulli_tensor_kernel);
DG_REGISTER_KERNEL(multinomial, Device::Type::CPU, multinomial_kernel);
DG_REGISTER_KERNEL(linspace, Device::Type::CPU, linspace_kernel);
DG_REGISTER_KERNEL(rand, Device::Type::CPU, rand_kernel);
DG_REGISTER_KERNEL(randn, Device::Type::CPU, randn_kernel);
DG_REGISTER_KERNEL(randint, Device::Type::CPU, randint_kernel);
DG_REGISTER_KERNEL(bernoulli_mask, Device::Type::CPU, bernoulli_kernel);
DG_REGISTER_KERNEL(arange, Device::Type::CPU, arange_kernel);

}  // namespace dg::cpu
