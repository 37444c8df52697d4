// The step breakdown: each step's wall time partitioned into compute, exposed communication, data wait,
// host-bound idle and other idle, plus MFU and throughput helpers. See docs/profiler.md, "Step breakdown".
//
// Definitions (one step = the interval between two consecutive step() markers; the whole session when
// there are fewer than two markers):
//   C  device busy: the union of the device spans of every Task that ran (any device thread), except
//      comm_wait's (the device blocked on a collective: that time is communication)
//   M  communication: the union of the record_comm ranges
//   D  data wait: the union of the record_data_wait ranges
//   H  host-bound idle: the parts of the device's idle gaps (the complement of C) spent waiting for the host,
//      by the host-bound rule: take a gap [g0, g1] and the Task whose device span starts at g1, enqueued at
//      e. If g1 - e <= tolerance, the Task started as soon as it was issued: the whole gap is host-bound.
//      Otherwise, if e > g0, the device waited for the host over [g0, e] only (the rest, [e, g1], is launch
//      or wake-up latency: other idle). Otherwise (the Task was queued before the gap began) nothing is
//      host-bound. A gap that no Task ends (the session's tail) is never host-bound.
// Every instant of a step gets the first label that covers it, in the precedence
//   compute (C) > exposed comm (M) > data wait (D) > host-bound idle (H) > other idle (the rest),
// so the five buckets partition the step and sum exactly to its wall time. Communication under compute
// is reported beside the partition as overlapped_comm; so is host dispatch (the union of host op spans),
// whose exposed part is the host-bound bucket.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dygrad/profiler/events.h"

namespace dg::profiler {

// Half-open [begin, end) in ns. An IntervalSet is sorted, disjoint and has no empty intervals.
struct Interval {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};
using IntervalSet = std::vector<Interval>;
IntervalSet union_of(IntervalSet intervals);  // any list in, a normalized set out
IntervalSet intersect(const IntervalSet& a, const IntervalSet& b);
IntervalSet subtract(const IntervalSet& a, const IntervalSet& b);
int64_t measure(const IntervalSet& s);

struct StepBreakdown {
  int index = 0;  // -1 for the mean
  double begin_ns = 0, end_ns = 0;
  // The partition: these five sum to step_ns().
  double compute_ns = 0;
  double exposed_comm_ns = 0;
  double data_wait_ns = 0;
  double host_bound_ns = 0;
  double other_idle_ns = 0;
  // Beside the partition.
  double overlapped_comm_ns = 0;  // communication hidden under compute
  double host_dispatch_ns = 0;    // union of the host spans of ops and HostOp ranges
  double num_ops = 0;             // Tasks whose device span starts in the step
  double flops = 0;               // flops of the Tasks that ran, prorated by their device span's overlap
  double bytes = 0;

  double step_ns() const { return end_ns - begin_ns; }
  double partition_sum_ns() const {
    return compute_ns + exposed_comm_ns + data_wait_ns + host_bound_ns + other_idle_ns;
  }
  // Executed flops over the step's wall time.
  double achieved_flops_per_second() const { return step_ns() > 0 ? flops / (step_ns() * 1e-9) : 0; }
  // The largest bucket: "compute", "exposed_comm", "data_wait", "host_bound" or "other_idle".
  const char* dominant_bucket() const;
};

struct Breakdown {
  std::vector<StepBreakdown> steps;
  StepBreakdown mean;        // every field averaged over the steps
  bool from_markers = false; // false: one step spanning the whole session
};

// tolerance_ns < 0: the session's ProfilerOptions::host_bound_tolerance_ns.
Breakdown compute_breakdown(const ProfileData& data, int64_t tolerance_ns = -1);
// The host-bound set H over the whole session (exposed for tests and the trace).
IntervalSet host_bound_intervals(const ProfileData& data, int64_t tolerance_ns);

// {"definitions": ..., "steps": [{...}], "mean": {...}}: times in ns, fractions of the step in [0, 1].
std::string breakdown_json(const Breakdown& breakdown);
// A short text table: one row per step and the mean, times in ms and percent of the step.
std::string breakdown_table(const Breakdown& breakdown);

// MFU helpers. The peak comes from the caller (a calibration GEMM per dtype), never a constant.
inline double mfu(double achieved_flops_per_second, double peak_flops_per_second) {
  return peak_flops_per_second > 0 ? achieved_flops_per_second / peak_flops_per_second : 0;
}
// Samples per second: batch_size per data-parallel rank * ranks / step time.
inline double throughput(double batch_size, int ranks, double step_seconds) {
  return step_seconds > 0 ? batch_size * ranks / step_seconds : 0;
}

}  // namespace dg::profiler
