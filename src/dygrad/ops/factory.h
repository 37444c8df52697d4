// Factories: new tensors filled on the stream (zeros, ones, full, arange, random).
#pragma once
#include <optional>
#include <vector>

#include "dygrad/core/tensor.h"

namespace dg {

struct TensorOptions {
  DType dtype = DType::Float32;
  bool requires_grad = false;
  Device device = Device::cpu();
  bool pinned = false;  // pin_memory=True: page-locked host memory (a CPU tensor; ops/device.h, pin_memory)
};

Tensor empty(IntSpan shape, TensorOptions options = {});
Tensor full(IntSpan shape, Scalar value, TensorOptions options = {});
Tensor zeros(IntSpan shape, TensorOptions options = {});
Tensor ones(IntSpan shape, TensorOptions options = {});
Tensor empty_like(const Tensor& a);
Tensor zeros_like(const Tensor& a);
Tensor ones_like(const Tensor& a);
Tensor full_like(const Tensor& a, Scalar value);
// A tensor holding `values` (row-major) with the given shape; the copy happens on the host, now.
template <typename T>
Tensor from_vector(const std::vector<T>& values, IntSpan shape, DType dtype = dtype_of<T>::value);

// [start, end) in steps; the dtype is int64 when all three are integers, else float32 (torch.arange).
// The factories make their tensor on `device` (options.device), the CPU by default.
Tensor arange(Scalar start, Scalar end, Scalar step = 1, std::optional<DType> dtype = std::nullopt,
              Device device = Device::cpu());
Tensor arange(Scalar end, Device device = Device::cpu());
// `generator_seed`: the draws of a torch-style Generator= argument. Given, the op's counters start at 0 under that
// seed and the process generator is not advanced; absent, they are reserved from the process generator.
using GeneratorSeed = std::optional<uint64_t>;
// Uniform [0, 1) and standard normal, from the counter-based generator (runtime/context.h).
Tensor rand(IntSpan shape, TensorOptions options = {}, GeneratorSeed generator_seed = std::nullopt);
Tensor randn(IntSpan shape, TensorOptions options = {}, GeneratorSeed generator_seed = std::nullopt);
Tensor randint(int64_t low, int64_t high, IntSpan shape, DType dtype = DType::Int64, Device device = Device::cpu(),
               GeneratorSeed generator_seed = std::nullopt);
// 1 with probability p, else 0 (dropout masks), from the same generator.
Tensor bernoulli_mask(IntSpan shape, double p, DType dtype = DType::Bool, GeneratorSeed generator_seed = std::nullopt,
                      Device device = Device::cpu());
// out[i] = 1 with probability p[i], else 0, in p's (floating) dtype; p in [0, 1] (checked by the kernel).
Tensor bernoulli(const Tensor& p, GeneratorSeed generator_seed = std::nullopt);
// Per row of `weights` ([C] or [R, C], non-negative, finite, not all zero; checked by the kernel): num_samples
// category indices drawn with probability proportional to the weights, with or without replacement (int64).
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement = false,
                   GeneratorSeed generator_seed = std::nullopt);

// `steps` values from start to end, evenly spaced; computed from both ends as torch (the first half from start,
// the second from end) so the values are torch's. logspace: base ** those values.
Tensor linspace(Scalar start, Scalar end, int64_t steps, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor logspace(Scalar start, Scalar end, int64_t steps, double base = 10.0, DType dtype = DType::Float32,
                Device device = Device::cpu());

}  // namespace dg
