// Exports of a profiling session: Chrome Trace Event Format JSON (opens in Perfetto and chrome://tracing),
// the op statistics as CSV and the step breakdown as JSON. See docs/profiler.md, "Trace format".
#pragma once
#include <string>

#include "dygrad/profiler/breakdown.h"
#include "dygrad/profiler/events.h"
#include "dygrad/profiler/op_stats.h"

namespace dg::profiler {

// Process 1 "host": one track per host thread (op host spans, HostOp and user ranges), the data loading,
// blocking communication and step tracks. Process 2 "device cpu:0": the stream track (device spans), the
// communication stream track and the memory counters. Flow arrows link each op's host span to its device
// span. Complete events on one track never partially overlap: a range that would is moved to an extra
// lane of its track ("name (lane 2)").
std::string chrome_trace_json(const ProfileData& data);

void export_chrome_trace(const ProfileData& data, const std::string& path);
void export_op_stats_csv(const std::vector<OpStat>& stats, const std::string& path);
void export_breakdown_json(const Breakdown& breakdown, const std::string& path);

}  // namespace dg::profiler
