// The stream's run-ahead bound (docs/stream.md, "Run-ahead bound"). An asynchronous stream lets the host enqueue
// work far ahead of its execution, so a program that reads the wall clock without synchronizing (a training loop
// timing its steps, as every CPU script written for PyTorch does) measures its host, not its steps. The stream
// therefore estimates how long the Tasks it holds will take and the host waits at enqueue while the estimate would
// exceed a bound: the wall clock then stays within the bound of the device's. The estimate is the op table's cost
// model (FLOPs and bytes, runtime/op_def.h) turned into time by each op's own measured rate: the thread that runs
// Tasks times each one and keeps per-op means (OpDef::timing).
#pragma once
#include <cstdint>

#include "dygrad/runtime/op_def.h"

namespace dg::run_ahead {

// A Task's cost in units: FLOPs plus kBytesWeight per byte read or written (one scale for compute- and memory-bound
// ops; each op's measured rate turns its units into time).
constexpr double kBytesWeight = 4.0;
// An op that has not run yet: a Task's fixed cost and a nominal rate (16 G units/s).
constexpr double kNominalTaskNs = 1000.0;
constexpr double kNominalNsPerUnit = 1.0 / 16.0;
// The default bound (Stream::set_run_ahead_limit_ns); 0 turns the bound off. Measured in bench/step_timing.py: long
// enough that the host's wake-ups at the bound cost no throughput (5 ms cost `bench` 3-10% on 2 cores, 20 ms ~2%),
// while a loop that syncs every step gets a tenth of its step (below), so its steps read within a tenth of the
// stream's.
constexpr uint64_t kDefaultLimitNs = 50'000'000;
// A program that synchronizes often (a loop reading each step's loss) may run steps not much longer than that: the
// bound is at most 1/kSyncWindowShare of the estimated work enqueued between its last two sync points (the last
// step's), so a step of 10 ms or more still reads within a tenth of the stream's; never below kMinLimitNs (a queue of
// 0.1 ms cost a sub-millisecond step 10% of its throughput, bench/RESULTS.md: the host's wake-ups and the device
// idling at each gap of the host's).
constexpr uint64_t kSyncWindowShare = 10;
constexpr uint64_t kMinLimitNs = 1'000'000;

inline float units_of(const OpCost& cost) { return static_cast<float>(cost.flops + kBytesWeight * cost.bytes); }

// The estimated run time of a Task of `op` costing `units`.
uint64_t estimate_ns(const OpDef& op, float units);
// A Task of `op` costing `units` ran for `ns` (the thread that ran it).
void observe(const OpDef& op, float units, uint64_t ns);

}  // namespace dg::run_ahead
