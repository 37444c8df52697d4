// Profiler tests: recording (op counts, spans, shapes, memory, ranges), the step breakdown (exact on a
// synthetic session; host-bound and device-bound programs classified), and the exports, with a Trace
// Event Format validator built on a small JSON reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dygrad/dygrad.h"
#include "dygrad/profiler/breakdown.h"
#include "dygrad/profiler/op_stats.h"
#include "dygrad/profiler/profiler.h"
#include "dygrad/profiler/trace_export.h"

using namespace dg;
namespace prof = dg::profiler;

namespace {

// --- a small JSON reader ----------------------------------------------------------------------------------
struct Json {
  enum Type { Null, Bool, Number, String, Array, Object } type = Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;

  bool has(const std::string& key) const { return type == Object && fields.count(key) > 0; }
  const Json& operator[](const std::string& key) const { return fields.at(key); }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}
  Json parse() {
    Json v = value();
    skip();
    if (pos_ != s_.size()) error("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool take(char c) {
    skip();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) error(std::string("expected '") + c + "'");
  }
  std::string string_literal() {
    expect('"');
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) error("bad escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u':
          if (pos_ + 4 > s_.size()) error("bad \\u escape");
          out += static_cast<char>(std::stoi(s_.substr(pos_, 4), nullptr, 16) & 0x7f);
          pos_ += 4;
          break;
        default: error("bad escape");
      }
    }
    expect('"');
    return out;
  }
  Json value() {
    skip();
    if (pos_ >= s_.size()) error("unexpected end");
    Json v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.type = Json::Object;
      if (take('}')) return v;
      do {
        skip();
        std::string key = string_literal();
        expect(':');
        if (v.fields.count(key)) error("duplicate key " + key);
        v.fields[key] = value();
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      v.type = Json::Array;
      if (take(']')) return v;
      do v.items.push_back(value());
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.type = Json::String;
      v.text = string_literal();
    } else if (s_.compare(pos_, 4, "true") == 0 || s_.compare(pos_, 5, "false") == 0) {
      v.type = Json::Bool;
      v.boolean = s_[pos_] == 't';
      pos_ += v.boolean ? 4 : 5;
    } else if (s_.compare(pos_, 4, "null") == 0) {
      pos_ += 4;
    } else {
      size_t end = pos_;
      while (end < s_.size() && std::string_view("+-0123456789.eE").find(s_[end]) != std::string_view::npos) ++end;
      if (end == pos_) error("unexpected character");
      v.type = Json::Number;
      v.number = std::stod(s_.substr(pos_, end - pos_));
      pos_ = end;
    }
    return v;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

// --- the Trace Event Format validator ---------------------------------------------------------------------
// Returns the problems found (empty: valid): required fields per phase, complete events nested per
// (pid, tid), every flow start matched by exactly one flow end that follows it and lands in a slice.
std::vector<std::string> validate_trace(const std::string& text) {
  std::vector<std::string> problems;
  Json root;
  try {
    root = JsonReader(text).parse();
  } catch (const std::exception& e) {
    return {e.what()};
  }
  if (!root.has("traceEvents") || root["traceEvents"].type != Json::Array) return {"no traceEvents array"};
  struct Span { double ts, end; std::string name; };
  std::map<std::pair<int64_t, int64_t>, std::vector<Span>> complete;
  struct FlowEnd { double ts; int64_t pid, tid; };
  std::map<std::string, std::vector<FlowEnd>> starts, ends;
  const std::set<std::string> known = {"X", "B", "E", "i", "I", "C", "M", "s", "t", "f"};
  size_t index = 0;
  for (const Json& e : root["traceEvents"].items) {
    const std::string where = "event " + std::to_string(index++);
    if (e.type != Json::Object) { problems.push_back(where + ": not an object"); continue; }
    bool ok = true;
    for (const char* key : {"name", "ph", "ts", "pid", "tid"})
      if (!e.has(key)) { problems.push_back(where + ": missing " + key); ok = false; }
    if (!ok) continue;
    if (e["name"].type != Json::String || e["ph"].type != Json::String) problems.push_back(where + ": name/ph not strings");
    if (e["ts"].type != Json::Number || e["pid"].type != Json::Number || e["tid"].type != Json::Number)
      problems.push_back(where + ": ts/pid/tid not numbers");
    const std::string ph = e["ph"].text;
    if (!known.count(ph)) problems.push_back(where + ": unknown phase " + ph);
    const auto track = std::make_pair(static_cast<int64_t>(e["pid"].number), static_cast<int64_t>(e["tid"].number));
    if (ph == "X") {
      if (!e.has("dur") || e["dur"].type != Json::Number || e["dur"].number < 0) {
        problems.push_back(where + ": X without a non-negative dur");
        continue;
      }
      complete[track].push_back({e["ts"].number, e["ts"].number + e["dur"].number, e["name"].text});
    } else if (ph == "s" || ph == "f") {
      if (!e.has("id")) { problems.push_back(where + ": flow event without id"); continue; }
      if (!e.has("cat")) problems.push_back(where + ": flow event without cat");
      if (ph == "f" && (!e.has("bp") || e["bp"].text != "e")) problems.push_back(where + ": flow end without bp e");
      const Json& id = e["id"];
      const std::string key = id.type == Json::String ? id.text : std::to_string(static_cast<int64_t>(id.number));
      (ph == "s" ? starts : ends)[key].push_back({e["ts"].number, track.first, track.second});
    } else if (ph == "C" || ph == "M") {
      if (!e.has("args") || e["args"].type != Json::Object || e["args"].fields.empty())
        problems.push_back(where + ": " + ph + " without args");
      else if (ph == "C")
        for (const auto& [key, v] : e["args"].fields)
          if (v.type != Json::Number) problems.push_back(where + ": counter " + key + " not a number");
    }
  }
  constexpr double kEpsilon = 1e-6;  // microseconds; ts and dur are printed with ns resolution
  for (auto& [track, spans] : complete) {
    std::stable_sort(spans.begin(), spans.end(),
                     [](const Span& a, const Span& b) { return a.ts != b.ts ? a.ts < b.ts : a.end > b.end; });
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() && open.back()->end <= s.ts + kEpsilon) open.pop_back();
      if (!open.empty() && s.end > open.back()->end + kEpsilon)
        problems.push_back("track " + std::to_string(track.first) + "/" + std::to_string(track.second) + ": '" +
                           s.name + "' partially overlaps '" + open.back()->name + "'");
      open.push_back(&s);
    }
  }
  auto inside_a_slice = [&](const FlowEnd& p) {
    auto it = complete.find({p.pid, p.tid});
    if (it == complete.end()) return false;
    for (const Span& s : it->second)
      if (s.ts - kEpsilon <= p.ts && p.ts <= s.end + kEpsilon) return true;
    return false;
  };
  for (const auto& [id, list] : starts) {
    auto it = ends.find(id);
    if (list.size() != 1) problems.push_back("flow " + id + ": " + std::to_string(list.size()) + " starts");
    if (it == ends.end() || it->second.size() != 1) { problems.push_back("flow " + id + ": no single end"); continue; }
    if (it->second[0].ts + kEpsilon < list[0].ts) problems.push_back("flow " + id + ": ends before it starts");
    if (!inside_a_slice(list[0]) || !inside_a_slice(it->second[0])) problems.push_back("flow " + id + ": not on a slice");
  }
  for (const auto& [id, list] : ends)
    if (!starts.count(id)) problems.push_back("flow " + id + ": end without start");
  return problems;
}

std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size() && i < 20; ++i) out += lines[i] + "\n";
  return out;
}

size_t count_events(const Json& trace, const std::string& ph, const std::string& name = "") {
  size_t n = 0;
  for (const Json& e : trace["traceEvents"].items)
    if (e["ph"].text == ph && (name.empty() || e["name"].text == name)) ++n;
  return n;
}

// Busy-waits (a host that is slow between ops, like a Python loop).
void spin_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

const prof::OpStat* find_stat(const std::vector<prof::OpStat>& stats, const std::string& name) {
  for (const auto& s : stats)
    if (s.name == name) return &s;
  return nullptr;
}

Tensor vec(std::vector<float> v) { return from_vector<float>(v, std::vector<int64_t>{int64_t(v.size())}); }

}  // namespace

// --- the validator can fail ---------------------------------------------------------------------------------
TEST(ProfilerTraceValidator, RejectsBrokenTraces) {
  EXPECT_TRUE(validate_trace(R"({"traceEvents": [
    {"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
    {"name": "b", "ph": "X", "ts": 2, "dur": 3, "pid": 1, "tid": 1},
    {"name": "c", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 2},
    {"name": "l", "cat": "flow", "ph": "s", "id": 7, "ts": 3, "pid": 1, "tid": 1},
    {"name": "l", "cat": "flow", "ph": "f", "bp": "e", "id": 7, "ts": 6, "pid": 1, "tid": 2}]})").empty());
  // Partial overlap on one track.
  EXPECT_FALSE(validate_trace(R"({"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
    {"name": "b", "ph": "X", "ts": 5, "dur": 10, "pid": 1, "tid": 1}]})").empty());
  // Missing dur, missing tid.
  EXPECT_FALSE(validate_trace(R"({"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "pid": 1, "tid": 1}]})").empty());
  EXPECT_FALSE(validate_trace(R"({"traceEvents": [{"name": "a", "ph": "i", "ts": 0, "pid": 1}]})").empty());
  // Unmatched flow start; a counter without args; not JSON.
  EXPECT_FALSE(validate_trace(R"({"traceEvents": [{"name": "a", "ph": "X", "ts": 0, "dur": 9, "pid": 1, "tid": 1},
    {"name": "l", "cat": "flow", "ph": "s", "id": 1, "ts": 3, "pid": 1, "tid": 1}]})").empty());
  EXPECT_FALSE(validate_trace(R"({"traceEvents": [{"name": "m", "ph": "C", "ts": 0, "pid": 1, "tid": 0}]})").empty());
  EXPECT_FALSE(validate_trace(R"({"traceEvents": [)").empty());
}

// --- recording ----------------------------------------------------------------------------------------------
TEST(Profiler, OffLeavesTheHooksNull) {
  EXPECT_EQ(prof::Profiler::current(), nullptr);
  EXPECT_EQ(Stream::cpu().observer(), nullptr);
  EXPECT_EQ(CachingAllocator::cpu().observer(), nullptr);
  EXPECT_FALSE(prof::detail::recording());
  {
    prof::Profiler p({.record_shapes = false, .profile_memory = true});
    p.start();
    EXPECT_NE(Stream::cpu().observer(), nullptr);
    EXPECT_NE(CachingAllocator::cpu().observer(), nullptr);
    EXPECT_TRUE(prof::detail::recording());
    EXPECT_EQ(prof::Profiler::current(), &p);
    p.stop();
  }
  EXPECT_EQ(Stream::cpu().observer(), nullptr);
  EXPECT_EQ(CachingAllocator::cpu().observer(), nullptr);
  EXPECT_FALSE(prof::detail::recording());
  // Ops, scopes and ranges with no profiler record nothing and still work.
  prof::HostOpScope scope("add");
  prof::RecordFunction range("user");
  prof::record_data_wait(0, 10);
  prof::step();
  EXPECT_EQ(add(vec({1}), vec({2})).item<float>(), 3.0f);
}

TEST(Profiler, OneActiveAtATime) {
  prof::Profiler a, b;
  a.start();
  try {
    b.start();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[profiler]"), std::string::npos) << e.what();
  }
  a.stop();
  b.start();  // free again
  b.stop();
}

TEST(Profiler, OpStatsCountIssuedOps) {
  Tensor x = vec({1, 2, 3, 4}), y = vec({5, 6, 7, 8});
  Stream::cpu().synchronize();
  prof::Profiler p;
  p.start();
  Tensor acc = x;
  for (int i = 0; i < 50; ++i) {
    prof::HostOpScope scope("add");
    acc = add(acc, y);
  }
  for (int i = 0; i < 30; ++i) acc = mul(acc, 1.0);
  Tensor total = sum(acc);
  p.stop();
  EXPECT_EQ(total.item<float>(), 10.0f + 50 * 26.0f);

  const auto stats = prof::op_stats(p.data());
  const prof::OpStat* adds = find_stat(stats, "add");
  const prof::OpStat* muls = find_stat(stats, "mul_scalar");
  ASSERT_NE(adds, nullptr);
  ASSERT_NE(muls, nullptr);
  EXPECT_EQ(adds->count, 50);
  EXPECT_EQ(adds->ran, 50);
  EXPECT_EQ(muls->count, 30);
  EXPECT_DOUBLE_EQ(adds->flops, 50 * 4.0);          // one flop per output element
  EXPECT_DOUBLE_EQ(adds->bytes, 50 * 3 * 4 * 4.0);  // two inputs and one output of 4 floats
  int64_t total_count = 0;
  double percent = 0;
  for (const auto& s : stats) {
    total_count += s.count;
    percent += s.device_percent;
  }
  EXPECT_EQ(total_count, 81);
  EXPECT_NEAR(percent, 100.0, 1e-9);

  // Spans: host span inside [scope entry, enqueue], device span after the enqueue, in stream order.
  const auto& ops = p.data().ops;
  ASSERT_EQ(ops.size(), 81u);
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& r = ops[i];
    EXPECT_TRUE(r.ran());
    EXPECT_LE(r.host_begin_ns, r.enqueue_ns);
    EXPECT_LE(r.enqueue_ns, r.device_begin_ns);
    EXPECT_LE(r.device_begin_ns, r.device_end_ns);
    EXPECT_GE(r.host_begin_ns, p.data().start_ns);
    EXPECT_LE(r.device_end_ns, p.data().stop_ns);
    if (i > 0) {
      EXPECT_GE(r.device_begin_ns, ops[i - 1].device_end_ns);
    }
    if (std::string(r.name) == "mul_scalar") {
      EXPECT_EQ(r.host_begin_ns, r.enqueue_ns);  // no scope open
    }
  }
  EXPECT_LT(ops[0].host_begin_ns, ops[0].enqueue_ns);  // the scope opened before the output was allocated
  auto by_count = stats;
  prof::sort_op_stats(by_count, prof::OpStatsOrder::Count);
  EXPECT_EQ(by_count[0].name, "add");
  EXPECT_EQ(by_count[1].name, "mul_scalar");
  prof::sort_op_stats(by_count, prof::OpStatsOrder::Name);
  EXPECT_EQ(by_count.back().name, "sum");
  const std::string table = prof::op_stats_table(stats);
  EXPECT_NE(table.find("add"), std::string::npos);
  EXPECT_NE(table.find("Total: 81 calls"), std::string::npos) << table;
}

TEST(Profiler, RecordsShapesAndCallSites) {
  Tensor a = zeros(std::vector<int64_t>{2, 3}), b = zeros(std::vector<int64_t>{3});
  Stream::cpu().synchronize();
  prof::Profiler p({.record_shapes = true});
  p.start();
  {
    CallSiteScope site({"model.py", "forward", 42});
    Tensor c = add(a, b);
  }
  Tensor d = add(b, b);
  p.stop();
  ASSERT_EQ(p.data().ops.size(), 2u);
  EXPECT_EQ(p.data().ops[0].input_shapes.size(), 2u);
  EXPECT_EQ(p.data().ops[0].site.line, 42u);
  auto grouped = prof::op_stats(p.data(), /*group_by_input_shape=*/true);
  ASSERT_EQ(grouped.size(), 2u);
  std::set<std::string> shapes = {grouped[0].input_shapes, grouped[1].input_shapes};
  EXPECT_TRUE(shapes.count("[[2, 3], [3]]")) << grouped[0].input_shapes;
  EXPECT_TRUE(shapes.count("[[3], [3]]"));
  const std::string trace = prof::chrome_trace_json(p.data());
  EXPECT_NE(trace.find("model.py:42 (forward)"), std::string::npos);
  EXPECT_NE(trace.find("\"input_shapes\": \"[[2, 3], [3]]\""), std::string::npos);
}

TEST(Profiler, SyncPointsAreRangesNamedByTheirScope) {
  Tensor a = zeros(std::vector<int64_t>{64});
  Stream::cpu().synchronize();
  prof::Profiler p;
  p.start();
  Tensor b = add(a, a);
  {
    prof::HostOpScope scope("item");
    Stream::cpu().wait_for(Stream::cpu().enqueued());
  }
  Stream::cpu().synchronize();
  p.stop();
  std::vector<std::string> syncs;
  for (const prof::RangeRecord& r : p.data().ranges)
    if (r.kind == prof::RangeKind::Sync) {
      syncs.push_back(r.name);
      EXPECT_LE(r.begin_ns, r.end_ns);
    }
  // stop()'s own drain is not one of the program's sync points.
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0], "item");
  EXPECT_EQ(syncs[1], "synchronize");
  const std::string trace = prof::chrome_trace_json(p.data());
  EXPECT_NE(trace.find("sync (item)"), std::string::npos);
}

TEST(Profiler, StacksFromTheProviderWhenAsked) {
  prof::set_stack_provider([] { return std::string("main.py:1(<module>)\nmodel.py:7(forward)"); });
  Tensor a = zeros(std::vector<int64_t>{4});
  Stream::cpu().synchronize();
  prof::Profiler with({.with_stack = true});
  with.start();
  Tensor b = add(a, a);
  with.stop();
  prof::Profiler without;
  without.start();
  Tensor c = add(a, a);
  without.stop();
  prof::set_stack_provider(nullptr);
  ASSERT_EQ(with.data().ops.size(), 1u);
  EXPECT_EQ(with.data().ops[0].stack, "main.py:1(<module>)\nmodel.py:7(forward)");
  EXPECT_NE(prof::chrome_trace_json(with.data()).find("model.py:7(forward)"), std::string::npos);
  ASSERT_EQ(without.data().ops.size(), 1u);
  EXPECT_TRUE(without.data().ops[0].stack.empty());
}

TEST(Profiler, MemoryCountersWhenAsked) {
  prof::Profiler off;
  off.start();
  Tensor a = add(vec({1, 2}), vec({3, 4}));
  off.stop();
  EXPECT_TRUE(off.data().memory.empty());
  EXPECT_EQ(prof::chrome_trace_json(off.data()).find("\"ph\": \"C\""), std::string::npos);

  prof::Profiler on({.profile_memory = true});
  on.start();
  const int64_t before = CachingAllocator::cpu().stats().allocated;
  Tensor big = zeros(std::vector<int64_t>{1000});
  {
    MemoryCategoryScope category(MemoryCategory::Gradient);
    Tensor g = add(big, 1.0);
  }
  on.stop();
  const auto& data = on.data();
  ASSERT_FALSE(data.memory.empty());
  ASSERT_FALSE(data.memory_events.empty());
  bool saw_allocation = false, saw_gradient = false, saw_free = false;
  for (const auto& e : data.memory_events) {
    saw_allocation |= e.kind == MemoryEventKind::Allocate && e.nbytes == 4000;
    saw_gradient |= e.category == MemoryCategory::Gradient && e.kind == MemoryEventKind::Allocate;
    saw_free |= e.kind == MemoryEventKind::Free;
  }
  EXPECT_TRUE(saw_allocation);
  EXPECT_TRUE(saw_gradient);
  EXPECT_TRUE(saw_free);
  int64_t peak = 0;
  for (const auto& m : data.memory) peak = std::max(peak, m.allocated);
  EXPECT_GE(peak, before + 8000);  // zeros(1000) and the gradient-tagged result alive together
  for (size_t i = 1; i < data.memory.size(); ++i) EXPECT_LE(data.memory[i - 1].ts_ns, data.memory[i].ts_ns);
  const Json trace = JsonReader(prof::chrome_trace_json(data)).parse();
  EXPECT_GT(count_events(trace, "C", "memory"), 0u);
  EXPECT_GT(count_events(trace, "C", "memory by category"), 0u);
}

TEST(Profiler, SynchronizeModeRunsKernelsOnTheHost) {
  Tensor x = vec({1, 2}), y = vec({3, 4});
  set_synchronize(true);
  prof::Profiler p;
  p.start();
  Tensor z = add(x, y);
  Tensor w = mul(z, y);
  p.stop();
  set_synchronize(false);
  ASSERT_EQ(p.data().ops.size(), 2u);
  for (const auto& r : p.data().ops) {
    EXPECT_TRUE(r.ran());
    EXPECT_EQ(r.device_thread, r.host_thread);  // the kernel ran inline on the issuing thread
  }
  const std::string text = prof::chrome_trace_json(p.data());
  EXPECT_TRUE(validate_trace(text).empty()) << join(validate_trace(text));
  EXPECT_NE(text.find("inline on host thread"), std::string::npos);
}

TEST(Profiler, TasksQueuedBeforeStartKeepTheirDeviceSpans) {
  const std::vector<int64_t> shape{4 << 20};
  Tensor a = full(shape, 1.0), b = full(shape, 2.0);
  Stream::cpu().synchronize();
  // Without the run-ahead bound, which would let the host enqueue only some of them ahead of the worker.
  const uint64_t bound = Stream::cpu().run_ahead_limit_ns();
  Stream::cpu().set_run_ahead_limit_ns(0);
  for (int i = 0; i < 4; ++i) Tensor c = add(a, b);  // still queued when the session starts
  prof::Profiler p;
  p.start();
  Stream::cpu().set_run_ahead_limit_ns(bound);
  Tensor d = add(vec({1}), vec({2}));
  p.stop();
  size_t before = 0;
  for (const auto& r : p.data().ops) {
    if (r.host_thread >= 0) continue;
    ++before;
    EXPECT_TRUE(r.ran());
    EXPECT_STREQ(r.name, "add");
    EXPECT_EQ(r.flops, double(4 << 20));
  }
  EXPECT_GE(before, 1u);
  const auto stats = prof::op_stats(p.data());
  EXPECT_EQ(find_stat(stats, "add")->count, int64_t(before) + 1);
  const std::string text = prof::chrome_trace_json(p.data());
  EXPECT_TRUE(validate_trace(text).empty()) << join(validate_trace(text));
  EXPECT_EQ(count_events(JsonReader(text).parse(), "s"), 1u);  // no flow for Tasks issued before start
}

TEST(Profiler, SeveralHostThreads) {
  Tensor x = vec({1, 2}), y = vec({3, 4});
  Stream::cpu().synchronize();
  prof::Profiler p({.record_shapes = true});
  p.start();
  auto issue = [&] {
    prof::RecordFunction range("worker loop");
    for (int i = 0; i < 50; ++i) {
      prof::HostOpScope scope("add");
      Tensor z = add(x, y);
    }
  };
  std::thread first(issue), second(issue);
  first.join();
  second.join();
  p.stop();
  const auto& data = p.data();
  ASSERT_EQ(data.ops.size(), 100u);
  for (size_t i = 1; i < data.ops.size(); ++i) EXPECT_LT(data.ops[i - 1].seq, data.ops[i].seq);
  std::set<int> host_threads;
  for (const auto& r : data.ops) {
    EXPECT_TRUE(r.ran());
    host_threads.insert(r.host_thread);
  }
  EXPECT_EQ(host_threads.size(), 2u);
  const std::string text = prof::chrome_trace_json(data);
  EXPECT_TRUE(validate_trace(text).empty()) << join(validate_trace(text));
  const Json trace = JsonReader(text).parse();
  EXPECT_EQ(count_events(trace, "s"), 100u);
  EXPECT_EQ(count_events(trace, "X", "worker loop"), 2u);
}

// --- the exported trace -------------------------------------------------------------------------------------
TEST(Profiler, ChromeTraceIsValid) {
  Tensor x = vec({1, 2, 3}), y = vec({4, 5, 6});
  Stream::cpu().synchronize();
  prof::Profiler p({.record_shapes = true, .profile_memory = true});
  p.start();
  p.step();
  const int64_t t0 = prof::now_ns();
  spin_for(std::chrono::microseconds(50));
  prof::record_data_wait(t0, prof::now_ns());
  {
    prof::RecordFunction forward("forward");
    {
      prof::HostOpScope composite("composite_op");  // two Tasks: kept as a HostOp range
      Tensor a = add(x, y);
      Tensor b = mul(a, y);
    }
    {
      prof::HostOpScope view("view_op");  // no Task
    }
    {
      prof::RecordFunction inner("inner");
      prof::HostOpScope one("add");
      Tensor c = add(x, 2.0);
    }
    Tensor d = sum(x);  // no scope: host span at the enqueue instant
  }
  // Overlapping communication ranges go to separate lanes.
  const int64_t c0 = prof::now_ns();
  prof::record_comm("all_reduce", c0, c0 + 3000, /*async=*/true);
  prof::record_comm("all_gather", c0 + 1000, c0 + 5000, /*async=*/true);
  prof::record_comm("barrier", c0, c0 + 2000, /*async=*/false);
  Stream::cpu().synchronize();
  p.step();
  p.stop();

  const std::string text = prof::chrome_trace_json(p.data());
  const auto problems = validate_trace(text);
  EXPECT_TRUE(problems.empty()) << join(problems);
  const Json trace = JsonReader(text).parse();
  EXPECT_EQ(count_events(trace, "s"), 4u);  // one flow per op
  EXPECT_EQ(count_events(trace, "f"), 4u);
  EXPECT_EQ(count_events(trace, "X", "composite_op"), 1u);
  EXPECT_EQ(count_events(trace, "X", "view_op"), 1u);
  EXPECT_EQ(count_events(trace, "X", "forward"), 1u);
  EXPECT_EQ(count_events(trace, "X", "data wait"), 1u);
  EXPECT_EQ(count_events(trace, "X", "step 0"), 1u);
  EXPECT_EQ(count_events(trace, "X", "add"), 2u);  // the host span and the device span of add(x, y)
  std::set<std::string> thread_names;
  for (const Json& e : trace["traceEvents"].items)
    if (e["ph"].text == "M" && e["name"].text == "thread_name") thread_names.insert(e["args"]["name"].text);
  for (const char* expected : {"data loading", "communication stream", "communication stream (lane 2)",
                               "communication (blocking)", "steps"})
    EXPECT_TRUE(thread_names.count(expected)) << expected;
  bool host_track = false, device_track = false;
  for (const auto& name : thread_names) {
    host_track |= name.rfind("host thread", 0) == 0;
    device_track |= name.rfind("stream cpu:0", 0) == 0;
  }
  EXPECT_TRUE(host_track);
  EXPECT_TRUE(device_track);
  // Device slices carry flops and shapes.
  for (const Json& e : trace["traceEvents"].items)
    if (e["ph"].text == "X" && e["name"].text == "mul") {
      EXPECT_TRUE(e["args"].has("flops"));
      EXPECT_TRUE(e["args"].has("input_shapes"));
    }
}

TEST(Profiler, ExportsFiles) {
  prof::Profiler p;
  p.start();
  p.step();
  Tensor a = add(vec({1}), vec({2}));
  Stream::cpu().synchronize();
  p.step();
  p.stop();
  const auto dir = std::filesystem::temp_directory_path() / ("dygrad_profiler_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  prof::export_chrome_trace(p.data(), (dir / "trace.json").string());
  prof::export_op_stats_csv(prof::op_stats(p.data()), (dir / "op_stats.csv").string());
  prof::export_breakdown_json(prof::compute_breakdown(p.data()), (dir / "breakdown.json").string());
  auto read = [](const std::filesystem::path& path) {
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  };
  EXPECT_TRUE(validate_trace(read(dir / "trace.json")).empty());
  const std::string csv = read(dir / "op_stats.csv");
  EXPECT_EQ(csv.rfind("name,input_shapes,count,", 0), 0u);
  EXPECT_NE(csv.find("\nadd,,1,1,"), std::string::npos) << csv;
  const Json breakdown = JsonReader(read(dir / "breakdown.json")).parse();
  ASSERT_EQ(breakdown["steps"].items.size(), 1u);
  EXPECT_TRUE(breakdown["mean"]["buckets_ns"].has("host_bound"));
  EXPECT_TRUE(breakdown["from_markers"].boolean);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(prof::export_chrome_trace(p.data(), "/nonexistent_dir/trace.json"), Error);
}

// --- the step breakdown -------------------------------------------------------------------------------------
namespace {
prof::OpRecord task(uint64_t seq, int64_t host_begin, int64_t enqueue, int64_t begin, int64_t end) {
  prof::OpRecord r;
  r.seq = seq;
  r.name = "op";
  r.host_thread = 0;
  r.host_begin_ns = host_begin;
  r.enqueue_ns = enqueue;
  r.device_thread = 1;
  r.device_begin_ns = begin;
  r.device_end_ns = end;
  r.flops = double(end - begin);
  return r;
}
}  // namespace

TEST(ProfilerBreakdown, IntervalAlgebra) {
  const prof::IntervalSet a = prof::union_of({{5, 10}, {0, 3}, {2, 4}, {8, 12}, {20, 20}});
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].begin_ns, 0);
  EXPECT_EQ(a[0].end_ns, 4);
  EXPECT_EQ(a[1].end_ns, 12);
  EXPECT_EQ(prof::measure(a), 11);
  const prof::IntervalSet b = {{3, 6}, {11, 30}};
  EXPECT_EQ(prof::measure(prof::intersect(a, b)), 1 + 1 + 1);
  EXPECT_EQ(prof::measure(prof::subtract(a, b)), 11 - 3);
  EXPECT_EQ(prof::measure(prof::subtract(b, a)), 22 - 3);
}

// A synthetic session where every bucket is known (docs/profiler.md walks through it).
TEST(ProfilerBreakdown, PrecedenceAndHostBoundRule) {
  prof::ProfileData d;
  d.options.host_bound_tolerance_ns = 10;
  d.start_ns = 0;
  d.stop_ns = 1000;
  d.ops.push_back(task(1, 50, 90, 100, 300));   // gap [0,100] ends 10 after enqueue: host-bound
  d.ops.push_back(task(2, 480, 495, 500, 600)); // gap [300,500] ends 5 after enqueue: host-bound
  d.ops.push_back(task(3, 380, 400, 700, 800)); // queued before gap [600,700] began: other idle
  d.ops.push_back(task(4, 820, 850, 900, 950)); // gap [800,900]: [800,850] host-bound, [850,900] other
  d.ranges.push_back({prof::RangeKind::Comm, "all_reduce", 0, 250, 400, true});  // [250,300] hidden
  d.ranges.push_back({prof::RangeKind::DataWait, "data wait", 0, 0, 80, false});
  d.step_markers = {0, 500, 1000};

  prof::IntervalSet h = prof::host_bound_intervals(d, 10);
  EXPECT_EQ(prof::measure(h), 100 + 200 + 50);

  const prof::Breakdown b = prof::compute_breakdown(d);
  ASSERT_EQ(b.steps.size(), 2u);
  const auto& s0 = b.steps[0];
  EXPECT_EQ(s0.compute_ns, 200);
  EXPECT_EQ(s0.exposed_comm_ns, 100);
  EXPECT_EQ(s0.data_wait_ns, 80);
  EXPECT_EQ(s0.host_bound_ns, 20 + 100);
  EXPECT_EQ(s0.other_idle_ns, 0);
  EXPECT_EQ(s0.overlapped_comm_ns, 50);
  EXPECT_EQ(s0.num_ops, 1);
  EXPECT_EQ(s0.host_dispatch_ns, 40 + 20 + 15);  // [50,90], [380,400] and [480,495]
  const auto& s1 = b.steps[1];
  EXPECT_EQ(s1.compute_ns, 100 + 100 + 50);
  EXPECT_EQ(s1.host_bound_ns, 50);
  EXPECT_EQ(s1.other_idle_ns, 100 + 50 + 50);
  EXPECT_EQ(s1.data_wait_ns + s1.exposed_comm_ns, 0);
  for (const auto& s : b.steps) EXPECT_EQ(s.partition_sum_ns(), s.step_ns());
  EXPECT_EQ(b.mean.compute_ns, 225);
  EXPECT_EQ(b.mean.step_ns(), 500);
  EXPECT_EQ(b.mean.flops, 225);  // flops = device ns in this session
  EXPECT_DOUBLE_EQ(b.steps[1].achieved_flops_per_second(), 250 / 500e-9);
  EXPECT_DOUBLE_EQ(prof::mfu(b.steps[1].achieved_flops_per_second(), 1e9), 0.5);
  EXPECT_DOUBLE_EQ(prof::throughput(8, 4, 0.5), 64);

  // With a zero tolerance the launch latency of tasks 1 and 2 moves to other idle: [80,90] and [400,495].
  const prof::Breakdown strict = prof::compute_breakdown(d, 0);
  EXPECT_EQ(strict.steps[0].host_bound_ns, 10 + 95);
  EXPECT_EQ(strict.steps[0].other_idle_ns, 10 + 5);
  // Without markers: one step over the session.
  d.step_markers.clear();
  const prof::Breakdown whole = prof::compute_breakdown(d);
  ASSERT_EQ(whole.steps.size(), 1u);
  EXPECT_FALSE(whole.from_markers);
  EXPECT_EQ(whole.steps[0].step_ns(), 1000);
  EXPECT_EQ(whole.steps[0].compute_ns, 450);
  EXPECT_EQ(whole.steps[0].other_idle_ns, 200);
}

// Real ranges in a real session: exact bucket values follow from the recorded intervals.
TEST(ProfilerBreakdown, DataWaitAndCommunication) {
  const std::vector<int64_t> shape{1 << 20};
  Tensor a = full(shape, 1.0), b = full(shape, 2.0);
  Stream::cpu().synchronize();
  prof::Profiler p;
  p.start();
  p.step();
  const int64_t wait_begin = prof::now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int64_t wait_end = prof::now_ns();
  prof::record_data_wait(wait_begin, wait_end);
  const int64_t comm_begin = prof::now_ns();
  Tensor c = add(a, b);
  Stream::cpu().synchronize();
  const int64_t comm_end = prof::now_ns();
  prof::record_comm("all_reduce", comm_begin, comm_end, /*async=*/true);  // covers the add's device span
  p.step();
  p.stop();
  const prof::Breakdown breakdown = prof::compute_breakdown(p.data());
  ASSERT_EQ(breakdown.steps.size(), 1u);
  const auto& s = breakdown.steps[0];
  EXPECT_EQ(s.data_wait_ns, double(wait_end - wait_begin));
  EXPECT_GT(s.compute_ns, 0);
  EXPECT_EQ(s.overlapped_comm_ns, s.compute_ns);
  EXPECT_EQ(s.exposed_comm_ns, double(comm_end - comm_begin) - s.compute_ns);
  EXPECT_EQ(s.partition_sum_ns(), s.step_ns());
  EXPECT_EQ(s.num_ops, 1);
}

// Many tiny ops from a slow host loop: the device waits for the host. The classification is checked on
// synthetic events (a wall-clock threshold failed under load); HostBoundProgramRuns checks a real run's
// bookkeeping without timing assertions.
TEST(ProfilerBreakdown, HostBoundProgram) {
  // Two steps of 500 ops, one every 1000 ns: the host spends [t, t + 100] issuing op i and enqueues it at
  // t + 100; the device runs it [t + 110, t + 160], then waits for the next one.
  prof::ProfileData d;
  d.options.host_bound_tolerance_ns = 20;
  d.start_ns = 0;
  d.stop_ns = 1000 * 1000;
  uint64_t seq = 1;
  for (int64_t i = 0; i < 1000; ++i) {
    const int64_t t = i * 1000;
    d.ops.push_back(task(seq++, t, t + 100, t + 110, t + 160));
  }
  d.step_markers = {0, 500 * 1000, 1000 * 1000};
  const prof::Breakdown b = prof::compute_breakdown(d);
  ASSERT_EQ(b.steps.size(), 2u);
  for (const auto& s : b.steps) {
    EXPECT_EQ(s.num_ops, 500);
    EXPECT_STREQ(s.dominant_bucket(), "host_bound") << prof::breakdown_table(b);
    EXPECT_EQ(s.compute_ns, 500 * 50);
    EXPECT_GT(s.host_bound_ns, 10 * s.compute_ns);
    EXPECT_EQ(s.partition_sum_ns(), s.step_ns());
  }
  EXPECT_STREQ(b.mean.dominant_bucket(), "host_bound");
}

TEST(ProfilerBreakdown, HostBoundProgramRuns) {
  Tensor x = vec({1}), y = vec({2});
  Stream::cpu().synchronize();
  prof::Profiler p;
  p.start();
  for (int s = 0; s < 2; ++s) {
    p.step();
    for (int i = 0; i < 500; ++i) {
      prof::HostOpScope scope("add");
      x = add(x, y);
    }
    Stream::cpu().synchronize();
  }
  p.step();
  p.stop();
  EXPECT_EQ(x.item<float>(), 1.0f + 1000 * 2.0f);
  const prof::Breakdown b = prof::compute_breakdown(p.data());
  ASSERT_EQ(b.steps.size(), 2u);
  for (const auto& s : b.steps) {
    EXPECT_EQ(s.num_ops, 500);
    EXPECT_DOUBLE_EQ(s.partition_sum_ns(), s.step_ns());
  }
}

// A few large ops queued at once: the host waits for the device.
TEST(ProfilerBreakdown, DeviceBoundProgram) {
  const std::vector<int64_t> shape{8 << 20};
  Tensor a = full(shape, 1.0), b = full(shape, 2.0);
  Stream::cpu().synchronize();
  prof::Profiler p;
  p.start();
  std::vector<int64_t> measured;
  for (int s = 0; s < 2; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    p.step();
    for (int i = 0; i < 6; ++i) Tensor c = add(a, b);
    Stream::cpu().synchronize();
    measured.push_back((std::chrono::steady_clock::now() - t0).count());
  }
  p.step();
  p.stop();
  const prof::Breakdown breakdown = prof::compute_breakdown(p.data());
  ASSERT_EQ(breakdown.steps.size(), 2u);
  for (size_t i = 0; i < breakdown.steps.size(); ++i) {
    const auto& s = breakdown.steps[i];
    EXPECT_EQ(s.num_ops, 6);
    EXPECT_STREQ(s.dominant_bucket(), "compute") << prof::breakdown_table(breakdown);
    EXPECT_GT(s.compute_ns, 0.5 * s.step_ns());
    EXPECT_DOUBLE_EQ(s.partition_sum_ns(), s.step_ns());
    EXPECT_NEAR(s.partition_sum_ns(), double(measured[i]), 0.01 * double(measured[i]));
    EXPECT_NEAR(s.flops, 6.0 * double(8 << 20), 1.0);
  }
}
