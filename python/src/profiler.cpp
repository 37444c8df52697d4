// dygrad._C's profiler bindings: the recording session (_Profiler), user ranges, data-wait and comm
// ranges, and the session's data as plain Python tuples for dygrad.profiler (python/dygrad/profiler/).
// See docs/profiler.md (the C++ core) and docs/profiler-python.md (the Python layer).
#include <memory>
#include <string>

#include "common.h"  // Python.h first
#include <frameobject.h>
#include <nanobind/stl/pair.h>
#include "dygrad/ops/meta_eval.h"
#include "dygrad/profiler/breakdown.h"
#include "dygrad/profiler/extras.h"
#include "dygrad/profiler/op_stats.h"
#include "dygrad/profiler/trace_export.h"

namespace dg::py {

namespace {
using profiler::ProfileData;
using profiler::Profiler;

// with_stack: the Python frames of the calling thread, outermost first ("file:line(function)" per line).
// Only with the GIL held (an op issued from C++ with the GIL released gets no stack).
std::string python_stack() {
  if (!Py_IsInitialized() || !PyGILState_Check()) return {};
  constexpr int kMaxFrames = 32;
  std::string frames[kMaxFrames];
  int n = 0;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame) Py_INCREF(frame);
  while (frame && n < kMaxFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    frames[n++] = std::string(file ? file : "?") + ":" + std::to_string(PyFrame_GetLineNumber(frame)) + "(" +
                  (name ? name : "?") + ")";
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  if (PyErr_Occurred()) PyErr_Clear();
  std::string out;
  for (int i = n - 1; i >= 0; --i) out += frames[i] + (i ? "\n" : "");
  return out;
}

const char* range_kind_name(profiler::RangeKind k) {
  switch (k) {
    case profiler::RangeKind::User: return "user";
    case profiler::RangeKind::HostOp: return "host_op";
    case profiler::RangeKind::DataWait: return "data_wait";
    case profiler::RangeKind::Comm: return "comm";
    case profiler::RangeKind::Backpressure: return "backpressure";
    case profiler::RangeKind::Sync: return "sync";
    case profiler::RangeKind::SubOp: return "sub_op";
  }
  return "user";
}

nb::object shapes_object(const std::vector<Dims>& shapes, bool recorded) {
  if (!recorded) return nb::none();
  nb::list out;
  for (const Dims& d : shapes) {
    nb::list dims;
    for (int64_t v : d) dims.append(v);
    out.append(nb::tuple(dims));
  }
  return out;
}

nb::dict memory_stats_dict(const MemoryStats& s) {
  nb::dict d;
  d["allocated"] = s.allocated;
  d["reserved"] = s.reserved;
  d["peak_allocated"] = s.peak_allocated;
  d["peak_reserved"] = s.peak_reserved;
  nb::dict by;
  for (int c = 0; c < kNumMemoryCategories; ++c)
    by[memory_category_name(static_cast<MemoryCategory>(c))] = s.allocated_by_category[c];
  d["allocated_by_category"] = by;
  return d;
}

// The recorder: one C++ Profiler; `data` accessors are valid after stop().
class PyProfiler {
 public:
  PyProfiler(bool record_shapes, bool profile_memory, bool with_stack, int64_t tolerance_ns) {
    profiler::ProfilerOptions o;
    o.record_shapes = record_shapes;
    o.profile_memory = profile_memory;
    o.with_stack = with_stack;
    if (tolerance_ns >= 0) o.host_bound_tolerance_ns = tolerance_ns;
    profiler_ = std::make_unique<Profiler>(o);
  }
  void start() { profiler_->start(); }
  void stop() {
    nb::gil_scoped_release release;  // drains the stream
    profiler_->stop();
  }
  void step() { profiler_->step(); }
  bool active() const { return profiler_->active(); }
  const ProfileData& data() const { return profiler_->data(); }
  const profiler::SessionExtras& extras() const { return profiler::extras_of(*profiler_); }

 private:
  std::unique_ptr<Profiler> profiler_;
};

nb::list ops_list(const ProfileData& d) {
  nb::list out;
  const bool shapes = d.options.record_shapes;
  for (const profiler::OpRecord& r : d.ops) {
    nb::object stack = r.stack.empty() ? nb::none() : nb::object(nb::str(r.stack.c_str()));
    out.append(nb::make_tuple(r.seq, r.name, r.host_thread, r.host_begin_ns, r.enqueue_ns, r.device_thread,
                              r.device_begin_ns, r.device_end_ns, r.flops, r.bytes, r.failed,
                              r.site.file ? r.site.file : "", static_cast<int>(r.site.line),
                              shapes_object(r.input_shapes, shapes), shapes_object(r.output_shapes, shapes), stack,
                              r.device.str()));
  }
  return out;
}

nb::list ranges_list(const ProfileData& d) {
  nb::list out;
  for (const profiler::RangeRecord& r : d.ranges)
    out.append(nb::make_tuple(range_kind_name(r.kind), r.name, r.thread, r.begin_ns, r.end_ns, r.async));
  return out;
}

nb::list memory_list(const ProfileData& d) {
  nb::list out;
  for (const profiler::MemorySample& m : d.memory) {
    nb::list by;
    for (int64_t v : m.by_category) by.append(v);
    out.append(nb::make_tuple(m.ts_ns, m.allocated, m.reserved, nb::tuple(by)));
  }
  return out;
}

const char* storage_event_name(profiler::StorageEventKind k) {
  switch (k) {
    case profiler::StorageEventKind::Allocate: return "allocate";
    case profiler::StorageEventKind::Free: return "free";
    case profiler::StorageEventKind::Retag: return "retag";
  }
  return "allocate";
}

nb::list storage_events_list(const profiler::SessionExtras& x) {
  nb::list out;
  for (const profiler::StorageEvent& e : x.storage)
    out.append(nb::make_tuple(e.ts_ns, storage_event_name(e.kind), e.id, e.nbytes, memory_category_name(e.category),
                              e.thread, e.module, e.site.file ? e.site.file : "", static_cast<int>(e.site.line),
                              e.site.function ? e.site.function : ""));
  return out;
}

nb::dict meta_stats_dict(const meta::Stats& s) {
  nb::dict d;
  d["allocated"] = s.allocated;
  d["peak"] = s.peak;
  nb::dict by, at;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    by[memory_category_name(static_cast<MemoryCategory>(c))] = s.by_category[c];
    at[memory_category_name(static_cast<MemoryCategory>(c))] = s.at_peak[c];
  }
  d["by_category"] = by;
  d["at_peak"] = at;
  d["max_scratch"] = s.max_scratch;
  d["peak_with_scratch"] = s.peak_with_scratch;
  d["tasks"] = s.tasks;
  d["allocations"] = s.allocations;
  d["allocated_total"] = s.allocated_total;
  return d;
}

nb::list op_stats_list(const ProfileData& d, bool group_by_input_shape) {
  nb::list out;
  for (const profiler::OpStat& s : profiler::op_stats(d, group_by_input_shape))
    out.append(nb::make_tuple(s.name, s.input_shapes, s.count, s.ran, s.device_total_ns, s.device_min_ns,
                              s.device_max_ns, s.host_total_ns, s.flops, s.bytes, s.device_percent));
  return out;
}
}  // namespace

void init_profiler(nb::module_& m) {
  profiler::set_stack_provider(&python_stack);
  nb::class_<PyProfiler>(m, "_Profiler")
      .def(nb::init<bool, bool, bool, int64_t>(), nb::arg("record_shapes") = false, nb::arg("profile_memory") = false,
           nb::arg("with_stack") = false, nb::arg("host_bound_tolerance_ns") = -1)
      .def("start", &PyProfiler::start)
      .def("stop", &PyProfiler::stop)
      .def("step", &PyProfiler::step)
      .def_prop_ro("active", &PyProfiler::active)
      .def_prop_ro("start_ns", [](const PyProfiler& p) { return p.data().start_ns; })
      .def_prop_ro("stop_ns", [](const PyProfiler& p) { return p.data().stop_ns; })
      .def("ops", [](const PyProfiler& p) { return ops_list(p.data()); })
      .def("ranges", [](const PyProfiler& p) { return ranges_list(p.data()); })
      .def("memory", [](const PyProfiler& p) { return memory_list(p.data()); })
      .def("op_modules", [](const PyProfiler& p) { return p.extras().op_modules; })
      .def("storage_events", [](const PyProfiler& p) { return storage_events_list(p.extras()); })
      .def("step_markers", [](const PyProfiler& p) { return p.data().step_markers; })
      .def("threads", [](const PyProfiler& p) {
        nb::list out;
        for (const profiler::ThreadInfo& t : p.data().threads) out.append(nb::make_tuple(t.index, t.os_tid, t.host, t.device));
        return out;
      })
      .def("memory_at_start", [](const PyProfiler& p) { return memory_stats_dict(p.data().memory_at_start); })
      .def("memory_at_stop", [](const PyProfiler& p) { return memory_stats_dict(p.data().memory_at_stop); })
      .def("op_stats", [](const PyProfiler& p, bool group) { return op_stats_list(p.data(), group); },
           nb::arg("group_by_input_shape") = false)
      .def("op_stats_table", [](const PyProfiler& p, bool group, size_t row_limit) {
        return profiler::op_stats_table(profiler::op_stats(p.data(), group), row_limit);
      }, nb::arg("group_by_input_shape") = false, nb::arg("row_limit") = 0)
      .def("breakdown_json", [](const PyProfiler& p, int64_t tolerance_ns) {
        return profiler::breakdown_json(profiler::compute_breakdown(p.data(), tolerance_ns));
      }, nb::arg("tolerance_ns") = -1)
      .def("breakdown_table", [](const PyProfiler& p, int64_t tolerance_ns) {
        return profiler::breakdown_table(profiler::compute_breakdown(p.data(), tolerance_ns));
      }, nb::arg("tolerance_ns") = -1)
      .def("chrome_trace_json", [](const PyProfiler& p) { return profiler::chrome_trace_json(p.data()); })
      .def("export_chrome_trace", [](const PyProfiler& p, const std::string& path) {
        profiler::export_chrome_trace(p.data(), path);
      })
      .def("export_op_stats_csv", [](const PyProfiler& p, const std::string& path, bool group) {
        profiler::export_op_stats_csv(profiler::op_stats(p.data(), group), path);
      }, nb::arg("path"), nb::arg("group_by_input_shape") = false)
      .def("export_breakdown_json", [](const PyProfiler& p, const std::string& path) {
        profiler::export_breakdown_json(profiler::compute_breakdown(p.data()), path);
      });

  m.def("_profiler_set_module_scope", [](uint32_t scope) { return profiler::set_module_scope(scope); });
  m.def("_profiler_module_scope", [] { return profiler::module_scope(); });
  // Meta evaluation (ops/meta_eval.h), for dygrad.memory.estimate.
  m.def("_meta_begin", [] { meta::begin(); });
  m.def("_meta_end", [] { return meta_stats_dict(meta::end()); });
  m.def("_meta_current", [] { return meta_stats_dict(meta::current()); });
  m.def("_meta_reset_peak", [] { meta::reset_peak(); });
  m.def("_meta_active", [] { return meta::active(); });
  m.def("_profiler_now_ns", [] { return profiler::now_ns(); });
  m.def("_profiler_recording", [] { return profiler::detail::recording(); });
  m.def("_profiler_step", [] { profiler::step(); });
  m.def("_record_function_enter", [](const std::string& name) { profiler::detail::open_user_range(name); });
  m.def("_record_function_exit", [] { profiler::detail::close_user_range(); });
  m.def("_record_data_wait", [](int64_t begin_ns, int64_t end_ns) { profiler::record_data_wait(begin_ns, end_ns); });
  m.def("_record_comm", [](const std::string& name, int64_t begin_ns, int64_t end_ns, bool async) {
    profiler::record_comm(name, begin_ns, end_ns, async);
  }, nb::arg("name"), nb::arg("begin_ns"), nb::arg("end_ns"), nb::arg("async_") = false);
}

}  // namespace dg::py
