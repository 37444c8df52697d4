// The step breakdown (definitions and precedence in breakdown.h and docs/profiler.md): interval-set
// algebra over the session's device spans and ranges, clipped to each step.
#include "dygrad/profiler/breakdown.h"

#include <algorithm>
#include <cstring>
#include <cstdio>

#include "dygrad/profiler/format.h"

namespace dg::profiler {

// --- interval sets ------------------------------------------------------------------------------------------
IntervalSet union_of(IntervalSet intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin_ns < b.begin_ns; });
  IntervalSet out;
  for (const Interval& i : intervals) {
    if (i.end_ns <= i.begin_ns) continue;
    if (!out.empty() && i.begin_ns <= out.back().end_ns) out.back().end_ns = std::max(out.back().end_ns, i.end_ns);
    else out.push_back(i);
  }
  return out;
}

IntervalSet intersect(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin_ns, b[j].begin_ns);
    const int64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (lo < hi) out.push_back({lo, hi});
    if (a[i].end_ns < b[j].end_ns) ++i;
    else ++j;
  }
  return out;
}

IntervalSet subtract(const IntervalSet& a, const IntervalSet& b) {
  IntervalSet out;
  size_t j = 0;
  for (const Interval& x : a) {
    int64_t cursor = x.begin_ns;
    while (j < b.size() && b[j].end_ns <= cursor) ++j;
    size_t k = j;
    while (k < b.size() && b[k].begin_ns < x.end_ns) {
      if (b[k].begin_ns > cursor) out.push_back({cursor, b[k].begin_ns});
      cursor = std::max(cursor, b[k].end_ns);
      ++k;
    }
    if (cursor < x.end_ns) out.push_back({cursor, x.end_ns});
  }
  return out;
}

int64_t measure(const IntervalSet& s) {
  int64_t total = 0;
  for (const Interval& i : s) total += i.end_ns - i.begin_ns;
  return total;
}

const char* StepBreakdown::dominant_bucket() const {
  const std::pair<double, const char*> buckets[] = {{compute_ns, "compute"},
                                                    {exposed_comm_ns, "exposed_comm"},
                                                    {data_wait_ns, "data_wait"},
                                                    {host_bound_ns, "host_bound"},
                                                    {other_idle_ns, "other_idle"}};
  const auto* best = &buckets[0];
  for (const auto& b : buckets)
    if (b.first > best->first) best = &b;
  return best->second;
}

// --- the session's sets -------------------------------------------------------------------------------------
namespace {

IntervalSet device_busy(const ProfileData& data) {
  IntervalSet spans;
  for (const OpRecord& r : data.ops)  // comm_wait: the device blocked on communication (M), not computing
    if (r.ran() && std::strcmp(r.name, "comm_wait") != 0) spans.push_back({r.device_begin_ns, r.device_end_ns});
  return union_of(std::move(spans));
}

IntervalSet ranges_of(const ProfileData& data, RangeKind kind) {
  IntervalSet out;
  for (const RangeRecord& r : data.ranges)
    if (r.kind == kind) out.push_back({r.begin_ns, r.end_ns});
  return union_of(std::move(out));
}

IntervalSet host_dispatch(const ProfileData& data) {
  IntervalSet out;
  for (const OpRecord& r : data.ops)
    if (r.host_thread >= 0) out.push_back({r.host_begin_ns, r.enqueue_ns});
  for (const RangeRecord& r : data.ranges)
    if (r.kind == RangeKind::HostOp) out.push_back({r.begin_ns, r.end_ns});
  return union_of(std::move(out));
}

double clipped(const IntervalSet& s, Interval window) { return double(measure(intersect(s, {window}))); }

}  // namespace

IntervalSet host_bound_intervals(const ProfileData& data, int64_t tolerance_ns) {
  // The Tasks that ran, by device start: the Task that ends each idle gap.
  std::vector<const OpRecord*> started;
  for (const OpRecord& r : data.ops)
    if (r.ran()) started.push_back(&r);
  std::sort(started.begin(), started.end(),
            [](const OpRecord* a, const OpRecord* b) { return a->device_begin_ns < b->device_begin_ns; });
  const int64_t session_end = std::max(data.stop_ns, started.empty() ? data.stop_ns : started.back()->device_end_ns);
  const IntervalSet gaps = subtract({{data.start_ns, session_end}}, device_busy(data));
  IntervalSet out;
  size_t next = 0;
  for (const Interval& gap : gaps) {
    while (next < started.size() && started[next]->device_begin_ns < gap.end_ns) ++next;
    if (next == started.size() || started[next]->device_begin_ns != gap.end_ns) continue;  // the session's tail
    const OpRecord& task = *started[next];
    if (task.host_thread < 0) continue;  // enqueued before the session: it was waiting, not the device
    const int64_t enqueue = task.enqueue_ns;
    if (gap.end_ns - enqueue <= tolerance_ns) out.push_back(gap);
    else if (enqueue > gap.begin_ns) out.push_back({gap.begin_ns, enqueue});
  }
  return out;
}

Breakdown compute_breakdown(const ProfileData& data, int64_t tolerance_ns) {
  if (tolerance_ns < 0) tolerance_ns = data.options.host_bound_tolerance_ns;
  Breakdown result;
  std::vector<Interval> windows;
  if (data.step_markers.size() >= 2) {
    result.from_markers = true;
    for (size_t i = 0; i + 1 < data.step_markers.size(); ++i)
      windows.push_back({data.step_markers[i], data.step_markers[i + 1]});
  } else {
    windows.push_back({data.start_ns, std::max(data.start_ns, data.stop_ns)});
  }
  // Each label's set, less every label above it in the precedence.
  const IntervalSet compute = device_busy(data);
  const IntervalSet comm = ranges_of(data, RangeKind::Comm);
  const IntervalSet exposed_comm = subtract(comm, compute);
  const IntervalSet overlapped_comm = intersect(comm, compute);
  const IntervalSet above_data = union_of([&] {
    IntervalSet both = compute;
    both.insert(both.end(), comm.begin(), comm.end());
    return both;
  }());
  const IntervalSet data_wait = subtract(ranges_of(data, RangeKind::DataWait), above_data);
  const IntervalSet above_host = union_of([&] {
    IntervalSet all = above_data;
    all.insert(all.end(), data_wait.begin(), data_wait.end());
    return all;
  }());
  const IntervalSet host_bound = subtract(union_of(host_bound_intervals(data, tolerance_ns)), above_host);
  const IntervalSet dispatch = host_dispatch(data);

  for (size_t w = 0; w < windows.size(); ++w) {
    const Interval window = windows[w];
    StepBreakdown s;
    s.index = static_cast<int>(w);
    s.begin_ns = double(window.begin_ns);
    s.end_ns = double(window.end_ns);
    s.compute_ns = clipped(compute, window);
    s.exposed_comm_ns = clipped(exposed_comm, window);
    s.data_wait_ns = clipped(data_wait, window);
    s.host_bound_ns = clipped(host_bound, window);
    // The rest of the step: exact, since the four sets above are disjoint by construction.
    s.other_idle_ns = s.step_ns() - s.compute_ns - s.exposed_comm_ns - s.data_wait_ns - s.host_bound_ns;
    s.overlapped_comm_ns = clipped(overlapped_comm, window);
    s.host_dispatch_ns = clipped(dispatch, window);
    for (const OpRecord& r : data.ops) {
      if (!r.ran()) continue;
      const int64_t lo = std::max(r.device_begin_ns, window.begin_ns);
      const int64_t hi = std::min(r.device_end_ns, window.end_ns);
      const int64_t span = r.device_end_ns - r.device_begin_ns;
      if (r.device_begin_ns >= window.begin_ns && r.device_begin_ns < window.end_ns) s.num_ops += 1;
      double share = 0;
      if (span > 0) share = hi > lo ? double(hi - lo) / double(span) : 0;
      else share = (r.device_begin_ns >= window.begin_ns && r.device_begin_ns < window.end_ns) ? 1 : 0;
      s.flops += r.flops * share;
      s.bytes += r.bytes * share;
    }
    result.steps.push_back(s);
  }

  StepBreakdown& m = result.mean;
  m.index = -1;
  const double n = double(result.steps.size());
  for (const StepBreakdown& s : result.steps) {
    m.end_ns += s.step_ns() / n;
    m.compute_ns += s.compute_ns / n;
    m.exposed_comm_ns += s.exposed_comm_ns / n;
    m.data_wait_ns += s.data_wait_ns / n;
    m.host_bound_ns += s.host_bound_ns / n;
    m.other_idle_ns += s.other_idle_ns / n;
    m.overlapped_comm_ns += s.overlapped_comm_ns / n;
    m.host_dispatch_ns += s.host_dispatch_ns / n;
    m.num_ops += s.num_ops / n;
    m.flops += s.flops / n;
    m.bytes += s.bytes / n;
  }
  return result;
}

// --- output -------------------------------------------------------------------------------------------------
namespace {

std::string step_json(const StepBreakdown& s) {
  const double t = s.step_ns();
  auto frac = [t](double v) { return json_number(t > 0 ? v / t : 0); };
  std::string o = "{";
  o += "\"index\": " + std::to_string(s.index);
  o += ", \"begin_ns\": " + json_number(s.begin_ns);
  o += ", \"step_ns\": " + json_number(t);
  o += ", \"buckets_ns\": {\"compute\": " + json_number(s.compute_ns) +
       ", \"exposed_comm\": " + json_number(s.exposed_comm_ns) + ", \"data_wait\": " + json_number(s.data_wait_ns) +
       ", \"host_bound\": " + json_number(s.host_bound_ns) + ", \"other_idle\": " + json_number(s.other_idle_ns) + "}";
  o += ", \"fractions\": {\"compute\": " + frac(s.compute_ns) + ", \"exposed_comm\": " + frac(s.exposed_comm_ns) +
       ", \"data_wait\": " + frac(s.data_wait_ns) + ", \"host_bound\": " + frac(s.host_bound_ns) +
       ", \"other_idle\": " + frac(s.other_idle_ns) + "}";
  o += ", \"overlapped_comm_ns\": " + json_number(s.overlapped_comm_ns);
  o += ", \"host_dispatch_ns\": " + json_number(s.host_dispatch_ns);
  o += ", \"num_ops\": " + json_number(s.num_ops);
  o += ", \"flops\": " + json_number(s.flops);
  o += ", \"bytes\": " + json_number(s.bytes);
  o += ", \"achieved_flops_per_second\": " + json_number(s.achieved_flops_per_second());
  o += ", \"dominant\": " + json_quote(s.dominant_bucket());
  return o + "}";
}

}  // namespace

std::string breakdown_json(const Breakdown& breakdown) {
  std::string o = "{\n  \"definitions\": " +
                  json_quote("buckets partition each step's wall time with the precedence compute > exposed_comm > "
                             "data_wait > host_bound > other_idle; see docs/profiler.md") +
                  ",\n  \"from_markers\": " + (breakdown.from_markers ? "true" : "false") + ",\n  \"steps\": [";
  for (size_t i = 0; i < breakdown.steps.size(); ++i) o += std::string(i ? ",\n    " : "\n    ") + step_json(breakdown.steps[i]);
  o += "\n  ],\n  \"mean\": " + step_json(breakdown.mean) + "\n}\n";
  return o;
}

std::string breakdown_table(const Breakdown& breakdown) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-6s %11s %16s %16s %16s %16s %16s %11s\n", "step", "time (ms)", "compute",
                "exposed comm", "data wait", "host-bound", "other idle", "GFLOP/s");
  out += line;
  auto row = [&](const StepBreakdown& s, const std::string& label) {
    const double t = s.step_ns() > 0 ? s.step_ns() : 1;
    auto cell = [&](double v) {
      char c[32];
      std::snprintf(c, sizeof c, "%8.3f (%4.1f%%)", v * 1e-6, 100.0 * v / t);
      return std::string(c);
    };
    std::snprintf(line, sizeof line, "%-6s %11.3f %16s %16s %16s %16s %16s %11.2f\n", label.c_str(), s.step_ns() * 1e-6,
                  cell(s.compute_ns).c_str(), cell(s.exposed_comm_ns).c_str(), cell(s.data_wait_ns).c_str(),
                  cell(s.host_bound_ns).c_str(), cell(s.other_idle_ns).c_str(), s.achieved_flops_per_second() * 1e-9);
    out += line;
  };
  for (const StepBreakdown& s : breakdown.steps) row(s, std::to_string(s.index));
  if (!breakdown.steps.empty()) row(breakdown.mean, "mean");
  return out;
}

}  // namespace dg::profiler
