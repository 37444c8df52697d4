// Runtime controls: context flags (deterministic, synchronize, num_threads), the generator seed, stream
// synchronisation and the caching allocator's statistics.
#include "common.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/runtime/cpu_isa.h"

namespace dg::py {

namespace {
// A kernel that fails on the stream, for testing deferred errors and their call sites from Python.
struct FailureAttrs {
  static constexpr const char* kName = "FailureAttrs";
  int64_t index = 0;
};
void failing_kernel(Task& task) {
  fail(ErrorKind::Index, "[_deferred_failure] index ", task.attrs.get<FailureAttrs>().index,
       " is out of range (a test failure)");
}
const OpDef op_deferred_failure("_deferred_failure", attrs_type<FailureAttrs>());
DG_REGISTER_KERNEL(_deferred_failure, Device::Type::CPU, failing_kernel);
}  // namespace

void init_runtime(nb::module_& m) {
  m.def("_deferred_failure", [](const Tensor& input, int64_t index) {
    // Enqueues an op whose kernel raises IndexError on the stream: the error surfaces at the next sync point.
    PythonCallSite site;
    Tensor out = Tensor::empty(input.shape(), input.dtype());
    enqueue(op_deferred_failure, {input}, {out}, FailureAttrs{index});
    return out;
  }, nb::arg("input"), nb::arg("index"));
  m.def("_op_table", [] {
    // One dict per OpDef in all_ops(): what the conformance sweep (tests/python/conformance) iterates.
    static constexpr OpFlag kFlags[] = {kOpSyncs, kOpDataDependentShape, kOpRandom, kOpInplace};
    static constexpr Device::Type kDevices[] = {Device::Type::CPU, Device::Type::CUDA};
    nb::list table;
    for (const OpDef* op : all_ops()) {
      nb::dict d;
      nb::list flags, devices;
      for (OpFlag bit : kFlags)
        if (op->flags & bit) flags.append(op_flag_name(bit));
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
      Stream::cpu().synchronize();
    }
    nb::module_::import_("dygrad._C").attr("_drain_pending_releases")();
  }, "Waits until every queued op has run; raises a deferred kernel error.");
  m.def("set_inflight_allocation_limit", [](int64_t bytes) {
    DG_CHECK(bytes >= 0, Value, "[set_inflight_allocation_limit] expected a byte count >= 0 (0: no limit), got ", bytes);
    Stream::cpu().set_inflight_allocation_limit(static_cast<uint64_t>(bytes));
  }, nb::arg("bytes"), "At each enqueue the host waits while it has allocated more than `bytes` since the oldest "
     "queued op was enqueued (0: no limit). Bounds the memory kept alive while the host runs ahead of the device.");
  m.def("get_inflight_allocation_limit", [] { return Stream::cpu().inflight_allocation_limit(); });
  m.def("_sgemm_library", [] { return backend_info(Device::Type::CPU, "sgemm"); });  // "onednn" or "openblas"
  // One binary for every CPU (runtime/cpu_isa.h): the kernels in use, why not the AVX-512 plugin, the CPU's flags.
  m.def("_cpu_kernel_isa", [] { return nb::make_tuple(cpu_kernel_isa(), cpu_kernel_isa_note(), cpu_features()); });
  m.def("_bf16_gemm_library", [] { return backend_info(Device::Type::CPU, "bf16_gemm"); });  // "onednn" or "convert"
  m.def("get_num_threads", [] { return get_context().num_threads; });
  m.def("set_num_threads", [](int n) {
    DG_CHECK(n >= 1 && n <= 4096, Value, "[set_num_threads] expected a thread count in [1, 4096], got ", n);
    nb::gil_scoped_release release;
    set_num_threads(n);
  }, nb::arg("num_threads"));
  m.def("memory_allocated", [] { return CachingAllocator::cpu().stats().allocated; },
        "Bytes of live tensors (requested sizes).");
  m.def("max_memory_allocated", [] { return CachingAllocator::cpu().stats().peak_allocated; });
  m.def("memory_reserved", [] { return CachingAllocator::cpu().stats().reserved; },
        "Bytes held from the system: live blocks plus the cache.");
  m.def("max_memory_reserved", [] { return CachingAllocator::cpu().stats().peak_reserved; });
  m.def("reset_peak_memory_stats", [] { CachingAllocator::cpu().reset_peak(); });
  m.def("empty_cache", [] { CachingAllocator::cpu().empty_cache(); });
  m.def("memory_stats", [] {
    MemoryStats s = CachingAllocator::cpu().stats();
    nb::dict d;
    d["allocated_bytes"] = s.allocated;
    d["reserved_bytes"] = s.reserved;
    d["peak_allocated_bytes"] = s.peak_allocated;
    d["peak_reserved_bytes"] = s.peak_reserved;
    d["num_allocs"] = s.num_allocs;
    d["num_frees"] = s.num_frees;
    d["cache_hits"] = s.cache_hits;
    for (int c = 0; c < kNumMemoryCategories; ++c)
      d[(std::string("allocated_bytes.") + memory_category_name(static_cast<MemoryCategory>(c))).c_str()] =
          s.allocated_by_category[static_cast<size_t>(c)];
    return d;
  });
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
