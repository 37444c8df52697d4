// Chrome Trace Event Format export: tracks built from the session's records, complete events assigned to
// lanes so that events on one track nest, flow arrows host -> device, memory counters. Also the CSV and
// JSON file exports. See docs/profiler.md, "Trace format".
#include "dygrad/profiler/trace_export.h"

#include <algorithm>
#include <map>

#include "dygrad/profiler/format.h"

namespace dg::profiler {

namespace {

constexpr int kHostPid = 1;
constexpr int kDevicePid = 2;

// One complete ("X") event before lane assignment.
struct Slice {
  std::string name;
  const char* category;
  int64_t begin_ns, end_ns;
  std::string args;         // a JSON object
  uint64_t flow_out = 0;    // seq: this slice starts the flow (host span)
  uint64_t flow_in = 0;     // seq: this slice ends the flow (device span)
};

// A logical track: its slices go to lanes (one trace thread each) so that slices on a lane nest.
struct Track {
  int pid;
  std::string name;
  int sort_index;
  std::vector<Slice> slices;
};

struct FlowPoint {
  int pid = 0, tid = 0;
  int64_t ts_ns = 0;
};

class TraceWriter {
 public:
  explicit TraceWriter(int64_t origin_ns) : origin_ns_(origin_ns) {}

  void metadata(const char* what, int pid, int tid, const std::string& args) {
    event("{\"name\": \"" + std::string(what) + "\", \"ph\": \"M\", \"ts\": 0, \"pid\": " + std::to_string(pid) +
          ", \"tid\": " + std::to_string(tid) + ", \"args\": " + args + "}");
  }
  void complete(const Slice& s, int pid, int tid) {
    event("{\"name\": " + json_quote(s.name) + ", \"cat\": \"" + s.category + "\", \"ph\": \"X\", \"ts\": " +
          ts(s.begin_ns) + ", \"dur\": " + ns_to_us(s.end_ns - s.begin_ns) + ", \"pid\": " + std::to_string(pid) +
          ", \"tid\": " + std::to_string(tid) + ", \"args\": " + (s.args.empty() ? "{}" : s.args) + "}");
  }
  void flow(const char* phase, uint64_t id, const FlowPoint& p) {
    std::string e = "{\"name\": \"launch\", \"cat\": \"flow\", \"ph\": \"" + std::string(phase) +
                    "\", \"id\": " + std::to_string(id) + ", \"ts\": " + ts(p.ts_ns) +
                    ", \"pid\": " + std::to_string(p.pid) + ", \"tid\": " + std::to_string(p.tid);
    if (phase[0] == 'f') e += ", \"bp\": \"e\"";
    event(e + "}");
  }
  void counter(const char* name, int64_t ts_ns, const std::string& args) {
    event("{\"name\": \"" + std::string(name) + "\", \"ph\": \"C\", \"ts\": " + ts(ts_ns) + ", \"pid\": " +
          std::to_string(kDevicePid) + ", \"tid\": 0, \"args\": " + args + "}");
  }
  std::string finish(const ProfileData& data) {
    return "{\"traceEvents\": [\n" + body_ + "\n], \"displayTimeUnit\": \"ns\", \"otherData\": {\"producer\": " +
           "\"dygrad profiler\", \"origin_steady_ns\": " + std::to_string(origin_ns_) +
           ", \"session_ns\": " + std::to_string(data.stop_ns - data.start_ns) + "}}\n";
  }

 private:
  std::string ts(int64_t ns) const { return ns_to_us(ns - origin_ns_); }
  void event(const std::string& e) {
    if (!body_.empty()) body_ += ",\n";
    body_ += e;
  }
  int64_t origin_ns_;
  std::string body_;
};

std::string site_string(const CallSite& site) {
  if (!site.file) return "";
  std::string s = std::string(site.file) + ":" + std::to_string(site.line);
  if (site.function) s += std::string(" (") + site.function + ")";
  return s;
}

std::string op_args(const OpRecord& r, bool device) {
  std::string a = "{\"seq\": " + std::to_string(r.seq) + ", \"flops\": " + json_number(r.flops) +
                  ", \"bytes\": " + json_number(r.bytes);
  if (device) {
    const double ns = double(r.device_ns());
    a += ", \"gflops_per_second\": " + json_number(ns > 0 ? r.flops / ns : 0);
    if (r.failed) a += ", \"failed\": true";
  } else {
    a += ", \"host_ns\": " + std::to_string(r.host_ns());
  }
  if (!r.input_shapes.empty() || !r.output_shapes.empty()) {
    a += ", \"input_shapes\": " + json_quote(shapes_to_string(r.input_shapes));
    a += ", \"output_shapes\": " + json_quote(shapes_to_string(r.output_shapes));
    std::string dtypes = "[";
    for (size_t i = 0; i < r.input_dtypes.size(); ++i) dtypes += std::string(i ? ", " : "") + dtype_name(r.input_dtypes[i]);
    a += ", \"input_dtypes\": " + json_quote(dtypes + "]");
  }
  if (r.site.file) a += ", \"call_site\": " + json_quote(site_string(r.site));
  if (!device && !r.stack.empty()) a += ", \"stack\": " + json_quote(r.stack);
  return a + "}";
}

// Assigns each slice a lane such that the slices on a lane are disjoint or nested: sorted by begin (longer
// first on ties), a slice goes to the first lane whose innermost open slice contains it.
std::vector<int> assign_lanes(std::vector<Slice>& slices, int* num_lanes) {
  std::stable_sort(slices.begin(), slices.end(), [](const Slice& a, const Slice& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
  std::vector<std::vector<int64_t>> open_ends;  // per lane: ends of the open slices, innermost last
  std::vector<int> lane_of(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    size_t lane = 0;
    for (;; ++lane) {
      if (lane == open_ends.size()) open_ends.emplace_back();
      auto& stack = open_ends[lane];
      while (!stack.empty() && stack.back() <= s.begin_ns) stack.pop_back();
      if (stack.empty() || stack.back() >= s.end_ns) break;
    }
    open_ends[lane].push_back(s.end_ns);
    lane_of[i] = static_cast<int>(lane);
  }
  *num_lanes = static_cast<int>(open_ends.size());
  return lane_of;
}

}  // namespace

std::string chrome_trace_json(const ProfileData& data) {
  // Tracks: host threads, then the fixed tracks.
  std::map<int, Track> host_tracks, device_tracks;  // by ThreadInfo::index
  for (const ThreadInfo& t : data.threads) {
    if (t.host)
      host_tracks[t.index] = {kHostPid, "host thread " + std::to_string(t.index) + " (tid " + std::to_string(t.os_tid) + ")",
                              t.index, {}};
    if (t.device)
      device_tracks[t.index] = {kDevicePid,
                                std::string("stream cpu:0") + (t.host ? " (inline on host thread " : " (worker tid ") +
                                    std::to_string(t.host ? t.index : static_cast<int64_t>(t.os_tid)) + ")",
                                t.index, {}};
  }
  Track data_track{kHostPid, "data loading", 1000, {}};
  Track comm_blocking{kHostPid, "communication (blocking)", 1001, {}};
  Track steps{kHostPid, "steps", -1, {}};
  Track comm_stream{kDevicePid, "communication stream", 1000, {}};

  int64_t origin = data.start_ns;
  for (const OpRecord& r : data.ops) {
    if (r.host_thread >= 0) {
      origin = std::min(origin, r.host_begin_ns);
      host_tracks[r.host_thread].slices.push_back({r.name, "host_op", r.host_begin_ns, r.enqueue_ns, op_args(r, false), r.seq, 0});
    }
    if (r.ran()) {
      origin = std::min(origin, r.device_begin_ns);
      device_tracks[r.device_thread].slices.push_back(
          {r.name, "kernel", r.device_begin_ns, r.device_end_ns, op_args(r, true), 0, r.host_thread >= 0 ? r.seq : 0});
    }
  }
  for (const RangeRecord& r : data.ranges) {
    origin = std::min(origin, r.begin_ns);
    switch (r.kind) {
      case RangeKind::User: host_tracks[r.thread].slices.push_back({r.name, "user", r.begin_ns, r.end_ns, "", 0, 0}); break;
      case RangeKind::HostOp: host_tracks[r.thread].slices.push_back({r.name, "host_op", r.begin_ns, r.end_ns, "", 0, 0}); break;
      case RangeKind::DataWait:
        data_track.slices.push_back({r.name, "data", r.begin_ns, r.end_ns, "{\"thread\": " + std::to_string(r.thread) + "}", 0, 0});
        break;
      case RangeKind::Comm:
        (r.async ? comm_stream : comm_blocking)
            .slices.push_back({r.name, "comm", r.begin_ns, r.end_ns, r.async ? "{\"async\": true}" : "{\"async\": false}", 0, 0});
        break;
      case RangeKind::Backpressure:
        host_tracks[r.thread].slices.push_back({"wait (" + r.name + ")", "backpressure", r.begin_ns, r.end_ns, "", 0, 0});
        break;
      case RangeKind::Sync:
        host_tracks[r.thread].slices.push_back({"sync (" + r.name + ")", "sync", r.begin_ns, r.end_ns, "", 0, 0});
        break;
      case RangeKind::SubOp:  // inside its jit_graph / jit_segment kernel slice, on the same device track
        device_tracks[r.thread].slices.push_back({r.name, "sub_op", r.begin_ns, r.end_ns, "", 0, 0});
        break;
    }
  }
  for (size_t i = 0; i + 1 < data.step_markers.size(); ++i)
    steps.slices.push_back({"step " + std::to_string(i), "step", data.step_markers[i], data.step_markers[i + 1], "", 0, 0});
  for (const MemorySample& m : data.memory) origin = std::min(origin, m.ts_ns);

  TraceWriter out(origin);
  out.metadata("process_name", kHostPid, 0, "{\"name\": \"host\"}");
  out.metadata("process_sort_index", kHostPid, 0, "{\"sort_index\": 0}");
  out.metadata("process_name", kDevicePid, 0, "{\"name\": \"device cpu:0\"}");
  out.metadata("process_sort_index", kDevicePid, 0, "{\"sort_index\": 1}");

  std::map<uint64_t, FlowPoint> flow_out, flow_in;
  std::map<int, int> next_tid = {{kHostPid, 1}, {kDevicePid, 1}};
  auto emit_track = [&](Track& track) {
    if (track.slices.empty()) return;
    int lanes = 0;
    const std::vector<int> lane_of = assign_lanes(track.slices, &lanes);
    const int first_tid = next_tid[track.pid];
    next_tid[track.pid] += lanes;
    for (int lane = 0; lane < lanes; ++lane) {
      const std::string name = lane == 0 ? track.name : track.name + " (lane " + std::to_string(lane + 1) + ")";
      out.metadata("thread_name", track.pid, first_tid + lane, "{\"name\": " + json_quote(name) + "}");
      out.metadata("thread_sort_index", track.pid, first_tid + lane,
                   "{\"sort_index\": " + std::to_string(track.sort_index * 100 + lane) + "}");
    }
    for (size_t i = 0; i < track.slices.size(); ++i) {
      const Slice& s = track.slices[i];
      const int tid = first_tid + lane_of[i];
      out.complete(s, track.pid, tid);
      // Flow points at the slice's middle, where it is the innermost slice of its lane.
      const FlowPoint p{track.pid, tid, s.begin_ns + (s.end_ns - s.begin_ns) / 2};
      if (s.flow_out) flow_out[s.flow_out] = p;
      if (s.flow_in) flow_in[s.flow_in] = p;
    }
  };
  emit_track(steps);
  for (auto& [index, track] : host_tracks) emit_track(track);
  emit_track(data_track);
  emit_track(comm_blocking);
  for (auto& [index, track] : device_tracks) emit_track(track);
  emit_track(comm_stream);

  // Flow arrows: only for ops with both spans.
  for (const auto& [seq, start] : flow_out) {
    auto end = flow_in.find(seq);
    if (end == flow_in.end()) continue;
    out.flow("s", seq, start);
    out.flow("f", seq, end->second);
  }

  // Memory counters, consecutive duplicates dropped.
  const MemorySample* last = nullptr;
  for (const MemorySample& m : data.memory) {
    if (last && last->allocated == m.allocated && last->reserved == m.reserved && last->by_category == m.by_category)
      continue;
    last = &m;
    out.counter("memory", m.ts_ns,
                "{\"allocated\": " + std::to_string(m.allocated) + ", \"reserved\": " + std::to_string(m.reserved) + "}");
    std::string args = "{";
    for (int c = 0; c < kNumMemoryCategories; ++c)
      args += std::string(c ? ", " : "") + "\"" + memory_category_name(static_cast<MemoryCategory>(c)) +
              "\": " + std::to_string(m.by_category[c]);
    out.counter("memory by category", m.ts_ns, args + "}");
  }
  return out.finish(data);
}

void export_chrome_trace(const ProfileData& data, const std::string& path) {
  write_text_file(path, chrome_trace_json(data));
}

void export_op_stats_csv(const std::vector<OpStat>& stats, const std::string& path) {
  write_text_file(path, op_stats_csv(stats));
}

void export_breakdown_json(const Breakdown& breakdown, const std::string& path) {
  write_text_file(path, breakdown_json(breakdown));
}

}  // namespace dg::profiler
