// Process-wide execution flags (deterministic, synchronize, inline small ops, thread count) and the counter-based RNG's
// generator state. See docs/threading.md and docs/rng.md.
#pragma once
#include <cstdint>

namespace dg {

struct Context {
  bool deterministic = false;  // bitwise-identical results across runs and thread counts
  bool synchronize = false;    // run each Task inline on the calling thread (debugging)
  int num_threads = 0;         // intra-op pool size, the stream worker included
  bool inline_small_ops = true;  // run tiny Tasks on the host when the stream is idle (docs/stream.md)
};

Context get_context();
// Applies the flags; changing the thread count drains the stream first.
void set_context(const Context& context);
void set_deterministic(bool on);
void set_synchronize(bool on);
void set_num_threads(int n);
void set_inline_small_ops(bool on);
bool deterministic_enabled();
bool synchronize_enabled();
bool inline_small_ops_enabled();

// The RNG: Philox4x32-10 keyed by the seed; every random op reserves a range of counters on the host at
// enqueue, so results do not depend on the thread count and can be replayed (recompute, JIT).
struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // next unused counter
};
void manual_seed(uint64_t seed);
RngState rng_state();
void set_rng_state(const RngState& state);
// Reserves `count` counters and returns the first; each counter yields four 32-bit random numbers.
RngState reserve_rng(uint64_t count);

}  // namespace dg
