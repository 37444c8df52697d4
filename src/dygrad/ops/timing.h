// Timing marks (docs/stream.md, "Timing marks"): what dygrad.cpu.Event(enable_timing=True).record() enqueues. A
// stream runs its Tasks in order, so a mark's Task runs once every Task enqueued before it has run.
#pragma once
#include "dygrad/core/tensor.h"

namespace dg {

// A Task on the CPU's stream that writes, when it runs, an int64 [2] tensor: the steady clock's nanoseconds then
// (CLOCK_MONOTONIC, Python's time.monotonic_ns) and the stream's busy time so far (Stream::busy_ns). Between two
// marks the clock's difference is the stream's wall time, never less than the busy difference (the Tasks between
// them run one after another on the stream).
Tensor record_time();

}  // namespace dg
