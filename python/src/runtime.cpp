// Runtime controls: context flags (deterministic, synchronize, num_threads), the generator seed, stream
// synchronisation and the caching allocator's statistics.
#include <unordered_map>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/tuple.h>

#include "common.h"
#include "dygrad/runtime/devices.h"
#include "dygrad/ops/timing.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/runtime/cpu_isa.h"
#include "dygrad/runtime/device_plugins.h"

namespace dg::py {
namespace {
Device parse_device_or_raise(const char* op, const std::string& text) {
  Device d;
  nb::str s(text.c_str());
  if (!to_device_arg(op, s.ptr(), d)) throw nb::python_error();
  return d;
}
// The allocator of a `device=` argument of the memory functions (torch.cuda.memory's): None is the CPU's.
CachingAllocator& pool_of(const char* op, nb::handle device) {
  if (device.is_none()) return CachingAllocator::cpu();
  Device d;
  if (!to_device_arg(op, device.ptr(), d)) throw nb::python_error();
  return CachingAllocator::of(d);
}

nb::dict memory_stats_dict(const MemoryStats& s) {
  nb::dict d;
  // torch.cuda.memory_stats's names (docs/memory.md: "allocated" here is the requested bytes, as dygrad's
  // memory_allocated(); torch's allocated_bytes counts rounded blocks, which is active_bytes here).
  d["allocated_bytes.all.current"] = s.allocated;
  d["allocated_bytes.all.peak"] = s.peak_allocated;
  d["requested_bytes.all.current"] = s.allocated;
  d["requested_bytes.all.peak"] = s.peak_allocated;
  d["active_bytes.all.current"] = s.active;
  d["reserved_bytes.all.current"] = s.reserved;
  d["reserved_bytes.all.peak"] = s.peak_reserved;
  d["inactive_split_bytes.all.current"] = s.inactive_split;
  d["segment.all.current"] = s.segments;
  d["num_alloc_retries"] = 0;
  d["num_ooms"] = s.num_ooms;
  d["num_device_alloc"] = s.num_segment_allocs;
  d["num_device_free"] = s.num_segment_frees;
  d["mapped_bytes_total"] = s.mapped_total;
  d["unmapped_bytes_total"] = s.unmapped_total;
  d["reserved_bytes_at_peak"] = s.reserved_at_peak;
  d["memory_limit"] = s.limit;
  d["allocated_bytes"] = s.allocated;
  d["reserved_bytes"] = s.reserved;
  d["peak_allocated_bytes"] = s.peak_allocated;
  d["peak_reserved_bytes"] = s.peak_reserved;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["cache_hits"] = s.cache_hits;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const std::string name = memory_category_name(static_cast<MemoryCategory>(c));
    d[("allocated_bytes." + name).c_str()] = s.allocated_by_category[static_cast<size_t>(c)];
    d[("peak_bytes." + name).c_str()] = s.peak_by_category[static_cast<size_t>(c)];  // since reset_peak
  }
  return d;
}
}  // namespace


extern PyObject* g_out_of_memory_error;  // python/src/common.cpp

namespace {
// --- the allocator's history: Python frames and the snapshot dicts (torch.cuda.memory's schema) ---------------
// Python strings are kept alive for the process, so the frames' const char* stay valid.
const char* kept_utf8(PyObject* text) {
  static auto* kept = new std::unordered_map<PyObject*, const char*>();
  if (!text || !PyUnicode_Check(text)) return "?";
  if (auto it = kept->find(text); it != kept->end()) return it->second;
  const char* s = PyUnicode_AsUTF8(text);
  if (!s) {
    PyErr_Clear();
    return "?";
  }
  Py_INCREF(text);
  (*kept)[text] = s;
  return s;
}

// The calling thread's Python frames, innermost first; nothing without the GIL (the stream's worker).
void python_frames(std::vector<AllocFrame>& out) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);  // an allocation may happen while an exception is pending
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame) Py_INCREF(frame);
  while (frame && out.size() < 64) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    out.push_back({kept_utf8(code->co_filename), kept_utf8(code->co_name),
                   static_cast<uint32_t>(PyFrame_GetLineNumber(frame))});
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyErr_Restore(type, value, traceback);
}

nb::dict frame_dict(const AllocFrame& f) {
  nb::dict d;
  d["filename"] = f.filename ? f.filename : "";
  d["line"] = f.line;
  d["name"] = f.name ? f.name : "";
  return d;
}

// torch's frames: innermost first, the C++ ones (up to the interpreter) before the Python ones.
nb::list frames_list(const AllocContextPtr& context, const CallSite& site) {
  nb::list frames;
  if (context) {
    for (void* pc : context->cpp) frames.append(frame_dict(CachingAllocator::symbolize(pc)));
    for (const AllocFrame& f : context->python) frames.append(frame_dict(f));
  } else if (site.file) {  // a memory limit records the op's Python line only
    frames.append(frame_dict(AllocFrame{site.file, site.function ? site.function : "", site.line}));
  }
  return frames;
}

nb::dict snapshot_dict(const MemorySnapshot& snap, int device_index = 0) {
  nb::list segments;
  for (const SnapshotSegment& s : snap.segments) {
    nb::dict seg;
    seg["device"] = device_index;
    seg["address"] = s.address;
    seg["total_size"] = s.size;
    seg["stream"] = 0;
    seg["segment_type"] = s.small ? "small" : "large";
    seg["segment_pool_id"] = nb::make_tuple(0, 0);
    seg["is_expandable"] = s.expandable;
    size_t allocated = 0, requested = 0;
    nb::list blocks;
    for (const SnapshotBlock& b : s.blocks) {
      nb::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.live ? b.requested : 0;
      block["state"] = b.live ? "active_allocated" : "inactive";
      block["frames"] = b.live ? frames_list(b.context, b.site) : nb::list();
      if (b.live) {  // dygrad's own fields (the viewer ignores them)
        block["category"] = memory_category_name(b.category);
        block["description"] = b.description;
        allocated += b.size;
        requested += b.requested;
      }
      blocks.append(block);
    }
    seg["allocated_size"] = allocated;
    seg["active_size"] = allocated;
    seg["requested_size"] = requested;
    seg["blocks"] = blocks;
    segments.append(seg);
  }
  nb::list trace;
  for (const TraceEntry& e : snap.trace) {
    nb::dict d;
    d["action"] = trace_action_name(e.action);
    if (e.action != TraceAction::Oom) d["addr"] = e.addr;
    d["size"] = e.size;
    d["stream"] = 0;
    d["time_us"] = e.time_ns / 1000;
    d["frames"] = frames_list(e.context, CallSite{});
    if (e.action == TraceAction::Oom)
      d["device_free"] = snap.stats.limit ? std::max<int64_t>(snap.stats.limit - snap.stats.reserved, 0) : 0;
    d["category"] = memory_category_name(e.category);  // dygrad's: the timeline by category
    d["allocated"] = e.allocated;
    d["time_ns"] = e.time_ns;
    trace.append(d);
  }
  nb::dict out;
  out["segments"] = segments;
  nb::list traces;
  traces.append(trace);
  out["device_traces"] = traces;
  nb::dict settings;
  settings["small_request"] = CachingAllocator::kSmallRequest;
  settings["small_segment"] = CachingAllocator::kSmallSegment;
  settings["medium_request"] = CachingAllocator::kMediumRequest;
  settings["medium_segment"] = CachingAllocator::kMediumSegment;
  settings["large_rounding"] = CachingAllocator::kLargeRounding;
  settings["memory_limit"] = snap.stats.limit;
  settings["expandable_segments"] = CachingAllocator::cpu().expandable_segments();
  settings["release_fraction"] = CachingAllocator::cpu().release_fraction();
  settings["min_release_margin"] = CachingAllocator::kMinReleaseMargin;
  out["allocator_settings"] = settings;
  return out;
}

// A kernel that fails on the stream, for testing deferred errors and their call sites from Python.
struct FailureAttrs {
  static constexpr const char* kName = "FailureAttrs";
  int64_t index = 0;
  DG_ATTRS_FIELDS(index);
};
void failing_kernel(Task& task) {
  fail(ErrorKind::Index, "[_deferred_failure] index ", task.attrs.get<FailureAttrs>().index,
       " is out of range (a test failure)");
}
const OpDef op_deferred_failure("_deferred_failure", attrs_type<FailureAttrs>());
DG_REGISTER_KERNEL(_deferred_failure, Device::Type::CPU, failing_kernel);

// An op sink on the calling thread while its `with` block runs (runtime/op_sink.h): records each op (name,
// attributes) and each host read (reader, file, line), or refuses host reads. For tests and tools; it consumes
// nothing. keep=True also keeps each call (op, operands, attributes), which replay(i) enqueues again: a recorded
// Task re-run, as a JIT's replay would.
struct RecordedCall {
  const OpDef* op;
  std::vector<Tensor> inputs, outputs;
  Attrs attrs;
};
struct OpRecorder final : OpSink {
  bool refuse_host_reads = false;
  bool keep = false;
  std::vector<RecordedCall> calls;
  std::vector<std::tuple<std::string, std::string, bool>> ops;  // name, attributes, its host-read trait
  std::vector<std::tuple<std::string, std::string, uint32_t>> host_reads;
  bool active = false;

  ~OpRecorder() override {
    if (!active) return;
    try {
      op_sinks::remove(*this);
    } catch (const Error&) {  // collected on another thread: that thread's chain never held it
    }
  }
  bool on_op(const OpCall& call) override {
    ops.emplace_back(call.op.name, call.attrs.to_string(), call.op.reads_host(call.attrs));
    if (keep)
      calls.push_back({&call.op, std::vector<Tensor>(call.inputs.begin(), call.inputs.end()),
                       std::vector<Tensor>(call.outputs.begin(), call.outputs.end()), call.attrs});
    return false;
  }
  void on_host_read(const HostRead& read) override {
    const std::string file = read.site.file ? read.site.file : "";
    if (refuse_host_reads)
      fail(ErrorKind::Runtime, "[", read.reader, "] reads a tensor's values on the host inside a region that refuses "
           "host reads", file.empty() ? "" : " (at " + file + ":" + std::to_string(read.site.line) + ")");
    host_reads.emplace_back(read.reader, file, read.site.line);
  }
};

// Names the host reads of Python code inside its `with` block for the op sinks (HostReadScope): a host read in
// dygrad's own Python (composed Adam's step count, clip_grad_norm_'s non-finite check) is reported as the API the
// user called, with the user's line.
struct HostReader {
  std::string name;
  std::unique_ptr<HostReadScope> scope;
};
}  // namespace

void init_runtime(nb::module_& m) {
  nb::class_<HostReader>(m, "_HostReader")
      .def("__init__", [](HostReader* self, std::string name) { new (self) HostReader{std::move(name), nullptr}; },
           nb::arg("name"))
      .def("__enter__", [](HostReader& self) {
        DG_CHECK(!self.scope, Runtime, "[_HostReader] already entered");
        self.scope = std::make_unique<HostReadScope>(self.name.c_str());
      })
      .def("__exit__", [](HostReader& self, nb::args) { self.scope.reset(); });
  nb::class_<OpRecorder>(m, "_OpRecorder")
      .def("__init__", [](OpRecorder* self, bool refuse, bool keep) {
        new (self) OpRecorder();
        self->refuse_host_reads = refuse;
        self->keep = keep;
      }, nb::arg("refuse_host_reads") = false, nb::arg("keep") = false)
      .def("replay", [](OpRecorder& self, size_t index) {
        DG_CHECK(index < self.calls.size(), Index, "[_OpRecorder.replay] no kept call ", index, " (", self.calls.size(),
                 " kept; record with keep=True)");
        const RecordedCall& c = self.calls[index];
        PythonCallSite site;
        enqueue(*c.op, c.inputs, c.outputs, c.attrs);
      }, nb::arg("index"))
      .def("__enter__", [](OpRecorder& self) -> OpRecorder& {
        DG_CHECK(!self.active, Runtime, "[_OpRecorder] already entered");
        op_sinks::push(self);
        self.active = true;
        return self;
      }, nb::rv_policy::reference)
      .def("__exit__", [](OpRecorder& self, nb::args) {
        op_sinks::remove(self);
        self.active = false;
      })
      .def_ro("ops", &OpRecorder::ops)
      .def_ro("host_reads", &OpRecorder::host_reads);
  m.def("_deferred_failure", [](const Tensor& input, int64_t index) {
    // Enqueues an op whose kernel raises IndexError on the stream: the error surfaces at the next sync point.
    PythonCallSite site;
    Tensor out = Tensor::empty(input.shape(), input.dtype(), input.device());
    enqueue(op_deferred_failure, {input}, {out}, FailureAttrs{index});
    return out;
  }, nb::arg("input"), nb::arg("index"));
  m.def("_op_table", [] {
    // One dict per OpDef in all_ops(): what the conformance sweep (tests/python/conformance) iterates.
    static constexpr OpFlag kFlags[] = {kOpDataDependentShape, kOpRandom, kOpSideEffect};
    static constexpr Device::Type kDevices[] = {Device::Type::CPU, Device::Type::CUDA};
    nb::list table;
    for (const OpDef* op : all_ops()) {
      nb::dict d;
      nb::list flags, devices;
      for (OpFlag bit : kFlags)
        if (op->flags & bit) flags.append(op_flag_name(bit));
      if (op->alias_of) flags.append("inplace");  // some output is an input, updated in place
      // The host-read trait: "always", "attrs" (depends on the attributes: the recorder evaluates it), or "never".
      d["host_read"] = op->host_read == host_read_always ? "always" : op->host_read ? "attrs" : "never";
      for (Device::Type type : kDevices)
        if (op->kernel(type)) devices.append(device_type_name(type));
      d["attrs"] = op->attrs_type ? op->attrs_type->name : "";
      d["name"] = op->name;
      d["fusion"] = fusion_class_name(op->fusion);
      d["flags"] = flags;
      d["differentiable"] = op->backward != nullptr;
      d["devices"] = devices;
      table.append(d);
    }
    return table;
  });
  m.def("manual_seed", [](int64_t seed) { manual_seed(static_cast<uint64_t>(seed)); }, nb::arg("seed"),
        "Seeds the counter-based generator.");
  m.def("initial_seed", [] { return rng_state().seed; });
  m.def("_get_context", [] {
    Context c = get_context();
    return nb::make_tuple(c.deterministic, c.synchronize, c.num_threads);
  });
  // A flag of its own (not in the _get_context tuple, which the profiler unpacks): docs/stream.md.
  m.def("_inline_small_ops", [] { return inline_small_ops_enabled(); });
  m.def("_set_inline_small_ops", [](bool on) { set_inline_small_ops(on); }, nb::arg("on"));
  m.def("_set_context", [](bool deterministic, bool synchronize, int num_threads) {
    DG_CHECK(num_threads >= 0 && num_threads <= 4096, Value, "[set_context] num_threads must be in [1, 4096] (got ",
             num_threads, ")");
    nb::gil_scoped_release release;  // set_num_threads drains the stream
    set_context(Context{deterministic, synchronize, num_threads, inline_small_ops_enabled()});
  });
  m.def("synchronize", [] {
    profiler::HostOpScope scope("synchronize");
    {
      nb::gil_scoped_release release;
      Stream::synchronize_all();
    }
    nb::module_::import_("dygrad._C").attr("_drain_pending_releases")();
  }, "Waits until every queued op has run; raises a deferred kernel error.");
  // A point in the stream and a wait for it (what a CUDA event's record and synchronize give): the training CLI
  // times a step at the end of its last Task, not at its loss (which only needs the forward).
  // Devices (docs/devices.md): the test device, and the hooks its tests use.
  m.def("_enable_test_device", [](int count) { return enable_devices(Device::Type::Test, count); }, nb::arg("count") = 1,
        "Makes test devices 0..count-1 (docs/devices.md, 'The test device'); returns how many there are.");
  // The default device of factories (python/dygrad/_factories.py set_default_device, `with dygrad.device(d):`).
  m.def("_set_default_device", [](const std::string& device, const std::string& op) {
    const Device d = parse_device_or_raise(op.c_str(), device);
    if (!device_available(op.c_str(), d)) throw nb::python_error();
    set_default_device(d);
  }, nb::arg("device"), nb::arg("op") = "set_default_device",
     "Sets this thread's default device of factories (one that is available; `op` names the caller in errors).");
  m.def("_get_default_device", [] { return default_device().str(); });
  m.def("_check_device", [](const std::string& op, nb::handle device) {
    Device d;
    if (!to_device_arg(op.c_str(), device.ptr(), d) || !device_available(op.c_str(), d)) throw nb::python_error();
    return d.str();
  }, nb::arg("op"), nb::arg("device"),
     "The device a device= argument names ('cpu', 'test:0'), checked as the C++ factories check it.");
  m.def("_device_count", [](const std::string& type) {
    Device d = parse_device_or_raise("device_count", type);
    return device_count(d.type);
  });
  m.def("_cuda_status", [] {
    nb::dict out;
    out["plugin"] = cuda_plugin_status();  // "loaded", "not built", or why it could not be loaded
    out["built"] = backend_built(Device::Type::CUDA);
    out["available"] = available_device_count(Device::Type::CUDA);  // the machine's GPUs (asks the driver once)
    out["up"] = device_count(Device::Type::CUDA);                  // those brought up (on first use)
    out["unavailable"] = backend_info(Device::Type::CUDA, "unavailable");
    nb::list names;  // of the GPUs that are up (cudaDeviceProp::name)
    for (int i = 0; i < device_count(Device::Type::CUDA); ++i)
      names.append(backend_info(Device::Type::CUDA, ("name" + std::to_string(i)).c_str()));
    out["names"] = names;
    return out;
  }, "The CUDA backend: whether its plugin loaded, how many GPUs the driver reports and are up, and why none.");
  m.def("_device_event", [](const std::string& device) {
    return Stream::of(parse_device_or_raise("Event.record", device)).enqueued();
  }, "The last Task enqueued on the device's stream (an event: it has run when the stream has completed it).");
  m.def("_device_event_done", [](const std::string& device, uint64_t seq) {
    return Stream::of(parse_device_or_raise("Event.query", device)).completed() >= seq;
  });
  m.def("_device_event_wait", [](const std::string& device, uint64_t seq) {
    Stream& s = Stream::of(parse_device_or_raise("Event.synchronize", device));
    nb::gil_scoped_release release;
    s.wait_for(seq);
  }, "Waits until Task `seq` of the device's stream has run; raises a deferred error of the Tasks it waited for.");
  m.def("_device_synchronize", [](const std::string& device) {
    Device d = parse_device_or_raise("synchronize", device);
    nb::gil_scoped_release release;
    Stream::of(d).synchronize();
  });
  m.def("_set_stream_paused", [](const std::string& device, bool paused) {
    Stream::of(parse_device_or_raise("_set_stream_paused", device)).set_paused(paused);
  }, "Tests: holds (or releases) a device's launcher, so a missing wait shows every time.");
  m.def("_set_host_waits_skipped", [](bool on) { set_host_waits_skipped(on); },
        "Tests: host reads stop waiting for device copies into their buffer (a planted missed sync).");
  m.def("_stream_mark", [] { return Stream::cpu().enqueued(); }, "The sequence number of the op enqueued last.");
  m.def("_stream_done", [](uint64_t seq) { return Stream::cpu().completed() >= seq; }, nb::arg("seq"),
        "Whether the op of sequence number `seq` (and every one before it) has run; never waits or raises.");
  m.def("_stream_wait", [](uint64_t seq) {
    const uint64_t enqueued = Stream::cpu().enqueued();
    DG_CHECK(seq <= enqueued, Value, "[_stream_wait] no op of sequence number ", seq, " was enqueued (the last is ",
             enqueued, ")");
    profiler::HostOpScope scope("synchronize");
    {
      nb::gil_scoped_release release;
      Stream::cpu().wait_for(seq);
    }
    nb::module_::import_("dygrad._C").attr("_drain_pending_releases")();
  }, nb::arg("seq"), "Waits until the op of sequence number `seq` (and every one before it) has run; raises a "
     "deferred kernel error.");
  m.def("set_inflight_allocation_limit", [](int64_t bytes) {
    DG_CHECK(bytes >= 0, Value, "[set_inflight_allocation_limit] expected a byte count >= 0 (0: no limit), got ", bytes);
    Stream::cpu().set_inflight_allocation_limit(static_cast<uint64_t>(bytes));
  }, nb::arg("bytes"), "At each enqueue the host waits while it has allocated more than `bytes` since the oldest "
     "queued op was enqueued (0: no limit). Bounds how far the host runs ahead of the device.");
  m.def("get_inflight_allocation_limit", [] { return Stream::cpu().inflight_allocation_limit(); });
  // The run-ahead bound (runtime/run_ahead.h; docs/stream.md, "Run-ahead bound").
  m.def("set_run_ahead_limit", [](double seconds, const std::string& device) {
    DG_CHECK(seconds >= 0 && seconds <= 3600, Value, "[set_run_ahead_limit] expected seconds in [0, 3600] (0: no "
             "bound), got ", seconds);
    Stream::of(parse_device_or_raise("set_run_ahead_limit", device))
        .set_run_ahead_limit_ns(static_cast<uint64_t>(seconds * 1e9 + 0.5));
  }, nb::arg("seconds"), nb::arg("device") = "cpu", "At each enqueue the host waits while the estimated run time of "
     "the device's queued ops, the new one included, exceeds `seconds` (0: no bound), so a program that reads the "
     "wall clock without synchronizing sees the device's time within the bound.");
  m.def("get_run_ahead_limit", [](const std::string& device) {
    return static_cast<double>(Stream::of(parse_device_or_raise("get_run_ahead_limit", device)).run_ahead_limit_ns()) *
           1e-9;
  }, nb::arg("device") = "cpu");
  m.def("_run_ahead_stats", [](const std::string& device, bool reset) {
    Stream& s = Stream::of(parse_device_or_raise("_run_ahead_stats", device));
    const Stream::RunAheadStats st = s.run_ahead_stats();
    if (reset) s.reset_run_ahead_stats();
    nb::dict d;
    d["max_queued_ns"] = st.max_queued_ns;
    d["waits"] = st.waits;
    d["limit_ns"] = s.run_ahead_limit_ns();
    d["bound_ns"] = st.bound_ns;
    d["queued_ns"] = s.queued_estimate_ns();
    d["busy_ns"] = s.busy_ns();
    return d;
  }, nb::arg("device") = "cpu", nb::arg("reset") = false, "The run-ahead bound's statistics since the last reset "
     "(max_queued_ns: the largest queued estimate an enqueue left while other ops were queued; waits), the set "
     "limit and the bound in force (bound_ns: less after frequent syncs), the queued estimate now and the stream's "
     "busy time.");
  m.def("_record_time", [] { return record_time(); }, "A timing mark (ops/timing.h): an int64 [2] tensor the "
        "CPU's stream fills when it reaches it, with the monotonic clock's ns and its busy ns.");
  m.def("_sgemm_library", [] { return backend_info(Device::Type::CPU, "sgemm"); });  // "onednn" or "openblas"
  // One binary for every CPU (runtime/cpu_isa.h): the kernels in use, why not a higher level, the CPU's flags.
  m.def("_cpu_kernel_isa", [] { return nb::make_tuple(cpu_kernel_isa(), cpu_kernel_isa_note(), cpu_features()); });
  m.def("_cpu_kernel_levels", [] {  // the levels this build has and this CPU runs, lowest first
    nb::list out;
    for (const std::string& level : cpu_kernel_levels()) out.append(level);
    return nb::tuple(out);
  });
  m.def("_cpu_baseline_isa", [] { return std::string(cpu_baseline_isa()); });  // "x86-64-v3", "x86-64-v2", "native"
  m.def("_bf16_gemm_library", [] { return backend_info(Device::Type::CPU, "bf16_gemm"); });  // "onednn" or "convert"
  m.def("get_num_threads", [] { return get_context().num_threads; });
  m.def("set_num_threads", [](int n) {
    DG_CHECK(n >= 1 && n <= 4096, Value, "[set_num_threads] expected a thread count in [1, 4096], got ", n);
    nb::gil_scoped_release release;
    set_num_threads(n);
  }, nb::arg("num_threads"));
  // Each takes torch.cuda.memory's `device=None` (the CPU's pool; a device's own pool, docs/devices.md).
  m.def("memory_allocated", [](nb::handle d) { return pool_of("memory_allocated", d).stats().allocated; },
        nb::arg("device") = nb::none(), "Bytes of live tensors (requested sizes).");
  m.def("max_memory_allocated", [](nb::handle d) { return pool_of("max_memory_allocated", d).stats().peak_allocated; },
        nb::arg("device") = nb::none());
  m.def("memory_reserved", [](nb::handle d) { return pool_of("memory_reserved", d).stats().reserved; },
        nb::arg("device") = nb::none(), "Bytes held from the system: live blocks plus the cache.");
  m.def("max_memory_reserved", [](nb::handle d) { return pool_of("max_memory_reserved", d).stats().peak_reserved; },
        nb::arg("device") = nb::none());
  m.def("reset_peak_memory_stats", [](nb::handle d) { pool_of("reset_peak_memory_stats", d).reset_peak(); },
        nb::arg("device") = nb::none());
  m.def("empty_cache", [](nb::handle d) {
    CachingAllocator& pool = pool_of("empty_cache", d);
    nb::gil_scoped_release release;
    pool.empty_cache();
  }, nb::arg("device") = nb::none());
  m.def("memory_stats", [](nb::handle device) { return memory_stats_dict(pool_of("memory_stats", device).stats()); },
        nb::arg("device") = nb::none());
  // The pinned host pool's (docs/devices.md, "Pinned host memory"): torch.cuda.host_memory_stats's role.
  m.def("_host_memory_stats", [] {
    CachingAllocator* pool = CachingAllocator::pinned();
    return memory_stats_dict(pool ? pool->stats() : MemoryStats{});
  });
  m.def("_pinned_memory_available", [] { return pinned_allocator() != nullptr; });
  CachingAllocator::set_python_frame_provider(&python_frames);
  g_out_of_memory_error = PyErr_NewExceptionWithDoc(
      "dygrad.OutOfMemoryError", "An allocation would exceed the memory limit (dg.set_memory_limit) or the system's "
      "memory; torch.OutOfMemoryError's analogue, a RuntimeError.", PyExc_RuntimeError, nullptr);
  m.attr("OutOfMemoryError") = nb::borrow(g_out_of_memory_error);
  m.def("_set_memory_limit", [](int64_t bytes) {
    DG_CHECK(bytes >= 0, Value, "[set_memory_limit] expected a byte count >= 0 (0: no limit), got ", bytes);
    CachingAllocator::cpu().set_memory_limit(static_cast<size_t>(bytes));
  }, nb::arg("bytes"));
  m.def("_get_memory_limit", [] { return CachingAllocator::cpu().memory_limit(); });
  m.def("_set_expandable_segments", [](bool on) { CachingAllocator::cpu().set_expandable_segments(on); },
        nb::arg("enabled"));
  m.def("_expandable_segments", [] { return CachingAllocator::cpu().expandable_segments(); });
  m.def("_set_release_fraction", [](double f) { CachingAllocator::cpu().set_release_fraction(f); },
        nb::arg("fraction"));
  m.def("_release_fraction", [] { return CachingAllocator::cpu().release_fraction(); });
  m.def("_parse_size", [](const std::string& text) { return CachingAllocator::parse_size(text); }, nb::arg("text"));
  m.def("_record_memory_history", [](bool enabled, bool trace, bool alloc_stacks, bool free_stacks, bool cpp_stacks,
                                     int64_t max_entries, nb::handle device) {
    DG_CHECK(max_entries >= 0, Value, "[record_history] max_entries must be >= 0, got ", max_entries);
    HistoryOptions o;
    o.enabled = enabled;
    o.trace = trace;
    o.alloc_stacks = alloc_stacks;
    o.free_stacks = free_stacks;
    o.cpp_stacks = cpp_stacks;
    o.max_entries = static_cast<size_t>(max_entries);
    pool_of("record_history", device).record_history(o);
  }, nb::arg("enabled"), nb::arg("trace"), nb::arg("alloc_stacks"), nb::arg("free_stacks"), nb::arg("cpp_stacks"),
     nb::arg("max_entries"), nb::arg("device") = nb::none());
  m.def("_memory_snapshot", [](nb::handle device) {
    // As torch's, no sync: blocks still held by queued Tasks are live (docs/memory.md, "Snapshots").
    CachingAllocator& pool = pool_of("snapshot", device);
    return snapshot_dict(pool.snapshot(), pool.device().index);
  }, nb::arg("device") = nb::none());
  m.def("_set_package_dir", [](const std::string& dir) { set_package_dir(dir); }, nb::arg("dir"),
        "Frames of files under `dir` (dygrad's own Python code) are skipped when an op records its call site.");
  m.def("_set_call_site_tracking", [](bool on) { set_call_site_tracking(on); }, nb::arg("enabled"),
        "Turns off recording the Python line of each op (for measuring its cost).");
  m.def("_call_site_tracking", [] { return call_site_tracking(); });
  m.def("_current_call_site", [] {
    CallSite s = python_call_site();
    return nb::make_tuple(s.file ? s.file : "", s.function ? s.function : "", s.line);
  });
}

}  // namespace dg::py
