// CPU kernels of the random factories and arange (ops/random.cpp declares their OpDefs), and the
// Philox4x32-10 counter-based generator they share. See docs/rng.md.
#pragma once
#include <array>
#include <cstdint>

#include "dygrad/ops/op_def.h"

namespace dg::cpu {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): ten rounds of
// a bijection of the 128-bit counter keyed by 64 bits. Pure function: same (counter, key), same output.
using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The four 32-bit words of counter number `counter` of the stream keyed by `seed` (the counter's high
// 64 bits are 0; the seed's low and high words are the key).
PhiloxCounter philox_block(uint64_t seed, uint64_t counter);

// All random kernels: attrs.rng_seed, attrs.rng_offset = first counter reserved for the Task; one
// contiguous output out[N]. Element i reads counter (offset + i / 4), word i % 4 (float outputs);
// double outputs use two words per element, so counter (offset + i / 2), words 2 (i % 2) and 2 (i % 2) + 1.
void rand_kernel(Task& task);      // uniform [0, 1)
void randn_kernel(Task& task);     // standard normal (Box-Muller)
void randint_kernel(Task& task);   // attrs.i[0] = low, attrs.i[1] = high: uniform integers in [low, high)
void bernoulli_kernel(Task& task); // attrs.scalars[0] = p: 1 with probability p, else 0
// attrs.scalars[0] = start, attrs.scalars[1] = step; out[N] = start + i * step (no inputs)
void arange_kernel(Task& task);

// Counters a random Task with `numel` elements consumes: 4 elements per counter, or 2 when `wide`
// (float64 outputs, randint ranges above 2^32).
uint64_t random_counters(int64_t numel, bool wide);

}  // namespace dg::cpu
