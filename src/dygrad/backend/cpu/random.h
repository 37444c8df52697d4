// The Philox4x32-10 counter-based generator the CPU random kernels share (random.cpp). See docs/rng.md.
#pragma once
#include <array>
#include <cstdint>


namespace dg::cpu {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): ten rounds of
// a bijection of the 128-bit counter keyed by 64 bits. Pure function: same (counter, key), same output.
using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The four 32-bit words of counter number `counter` of the stream keyed by `seed` (the counter's high
// 64 bits are 0; the seed's low and high words are the key).
PhiloxCounter philox_block(uint64_t seed, uint64_t counter);

}  // namespace dg::cpu
