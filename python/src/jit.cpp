// dygrad.jit's C++ side (jit/graph.h): the capture, the replayed graph and the segment batcher, driven by
// python/dygrad/jit.py (docs/jit.md).
#include "common.h"
#include "dygrad/jit/graph.h"
#include "dygrad/jit/symbolic.h"

#include <unordered_set>

namespace dg::py {
namespace {
using namespace dg::jit;

std::vector<Tensor> tensors_of(nb::handle seq) {
  std::vector<Tensor> out;
  for (nb::handle item : seq) {
    if (item.is_none()) out.emplace_back();
    else if (is_tensor(item.ptr())) out.push_back(unwrap(item.ptr()));
    else throw nb::type_error("[jit] expected a list of Tensors or None");
  }
  return out;
}

nb::tuple dims_tuple(const Dims& d) {
  nb::list out;
  for (int64_t x : d) out.append(x);
  return nb::tuple(out);
}

nb::list wrap_list(std::vector<Tensor> tensors) {
  nb::list out;
  for (Tensor& t : tensors) {
    if (t.defined()) out.append(wrap_object(std::move(t)));
    else out.append(nb::none());
  }
  return out;
}

struct PyCapture {
  std::unique_ptr<Capture> capture;
};
struct PyGraph {
  std::shared_ptr<Graph> graph;
};
struct PySymbolic {
  std::unique_ptr<SymbolicGraph> symbolic;
};
struct PySegments {
  std::unique_ptr<SegmentBatcher> batcher;
  size_t segments = 0, ops = 0;
};

// The guard state of one dygrad.jit call, as bytes (python/dygrad/jit.py, _Guards): for each tensor argument its
// geometry, dtype, requires_grad and which earlier argument shares its storage; for each module reached (each
// submodule once) its training flag, its parameters (identity, storage, offset, shape, whether .grad is defined and
// its geometry) and its buffers' storages (a geometry includes the device); for each optimizer its groups' sizes and parameters and its state's size.
// The leaves (parameters, each once) are appended to `leaves`. Walks the modules' dicts directly: it runs every call.
struct GuardWriter {
  std::vector<int64_t> words;
  void put(int64_t v) { words.push_back(v); }
  // A tensor's device is in its geometry: a graph replays on one device's stream (docs/jit.md, "On a device").
  void put_geometry(const Tensor& t) {
    put(stream_id(t.device()));
    put(static_cast<int64_t>(t.dtype()));
    put(t.dim());
    for (int64_t s : t.shape()) put(s);
    for (int64_t s : t.strides()) put(s);
  }
  // A tensor argument with dynamic dims (docs/jit.md, "Symbolic shapes"): their sizes are the symbolic graph's to
  // check, and its strides, which follow them, too; what stays is whether it is contiguous.
  void put_dynamic_geometry(const Tensor& t, nb::handle dims) {
    std::vector<uint8_t> dynamic(static_cast<size_t>(t.dim()), 0);
    for (nb::handle d : dims) {
      const int64_t i = nb::cast<int64_t>(d);
      if (i >= 0 && i < t.dim()) dynamic[size_t(i)] = 1;
    }
    put(stream_id(t.device()));
    put(static_cast<int64_t>(t.dtype()));
    put(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) put(dynamic[size_t(i)] ? -1 : t.shape()[size_t(i)]);
    put(t.is_contiguous() ? 1 : 0);
  }
};

void walk_module(PyObject* module, GuardWriter& w, nb::list& leaves, std::unordered_set<PyObject*>& seen_modules,
                 std::unordered_set<PyObject*>& seen_leaves) {
  if (!seen_modules.insert(module).second) return;
  if (!PyObject_HasAttrString(module, "_modules")) throw nb::type_error("[jit] guard state: expected Modules");
  PyObject* dict = PyObject_GenericGetDict(module, nullptr);
  if (!dict) throw nb::python_error();
  nb::object owned = nb::steal(dict);
  PyObject* training = PyDict_GetItemString(dict, "training");
  w.put(training == Py_True ? 1 : training == Py_False ? 0 : 2);
  PyObject* params = PyDict_GetItemString(dict, "_parameters");
  PyObject* buffers = PyDict_GetItemString(dict, "_buffers");
  PyObject* children = PyDict_GetItemString(dict, "_modules");
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  if (params && PyDict_Check(params)) {
    w.put(PyDict_Size(params));
    while (PyDict_Next(params, &pos, &key, &value)) {
      if (!is_tensor(value)) {
        w.put(-1);
        continue;
      }
      const Tensor& p = unwrap(value);
      w.put(reinterpret_cast<int64_t>(value));
      w.put(reinterpret_cast<int64_t>(p.storage().address()));
      w.put(p.storage_offset());
      w.put_geometry(p);
      const Tensor g = p.grad();
      w.put(g.defined() ? 1 : 0);
      if (g.defined()) w.put_geometry(g);
      if (seen_leaves.insert(value).second) leaves.append(nb::handle(value));
    }
  }
  if (buffers && PyDict_Check(buffers)) {
    pos = 0;
    w.put(PyDict_Size(buffers));
    while (PyDict_Next(buffers, &pos, &key, &value)) {
      w.put(is_tensor(value) ? reinterpret_cast<int64_t>(unwrap(value).storage().address()) : -1);
    }
  }
  if (children && PyDict_Check(children)) {
    pos = 0;
    w.put(PyDict_Size(children));
    while (PyDict_Next(children, &pos, &key, &value))
      if (value != Py_None) walk_module(value, w, leaves, seen_modules, seen_leaves);
  }
}

nb::bytes guard_state(nb::handle tensors, nb::handle modules, nb::handle optimizers, nb::list leaves,
                      nb::handle dynamic) {
  GuardWriter w;
  std::vector<const void*> storages;
  size_t index = 0;
  for (nb::handle item : tensors) {
    if (!is_tensor(item.ptr())) throw nb::type_error("[jit] guard state: expected a list of Tensors");
    const Tensor& t = unwrap(item.ptr());
    nb::handle dims = dynamic.is_none() ? nb::handle() : nb::handle(dynamic[index]);
    ++index;
    if (dims.is_valid() && !dims.is_none() && nb::len(dims) > 0) w.put_dynamic_geometry(t, dims);
    else w.put_geometry(t);
    w.put(t.requires_grad() ? 1 : 0);
    if (t.requires_grad()) w.put(t.grad().defined() ? 1 : 0);
    const void* s = t.numel() ? t.storage().address() : nullptr;
    int64_t alias = static_cast<int64_t>(storages.size());
    for (size_t i = 0; i < storages.size() && s; ++i)
      if (storages[i] == s) {
        alias = static_cast<int64_t>(i);
        break;
      }
    storages.push_back(s);
    w.put(alias);
  }
  std::unordered_set<PyObject*> seen_modules, seen_leaves;
  for (nb::handle m : modules) walk_module(m.ptr(), w, leaves, seen_modules, seen_leaves);
  for (nb::handle o : optimizers) {
    nb::object groups = o.attr("param_groups");
    w.put(static_cast<int64_t>(nb::len(groups)));
    for (nb::handle group : groups) {
      nb::object ps = group["params"];
      w.put(static_cast<int64_t>(nb::len(ps)));
      w.put(static_cast<int64_t>(nb::len(group)));
      for (nb::handle p : ps) {
        w.put(reinterpret_cast<int64_t>(p.ptr()));
        if (seen_leaves.insert(p.ptr()).second && is_tensor(p.ptr())) {
          const Tensor& t = unwrap(p.ptr());
          const Tensor g = t.grad();
          w.put(reinterpret_cast<int64_t>(t.storage().address()));
          w.put(g.defined() ? 1 : 0);
          if (g.defined()) w.put_geometry(g);
          leaves.append(p);
        }
      }
    }
    nb::object state = o.attr("state");
    w.put(static_cast<int64_t>(nb::len(state)));
  }
  return nb::bytes(reinterpret_cast<const char*>(w.words.data()), w.words.size() * sizeof(int64_t));
}
// One attribute field as a Python value (Attrs::visit): enums by name, Dims as a tuple, opaque objects as None.
void attr_field_to_python(void* context, const AttrField& f) {
  nb::dict& out = *static_cast<nb::dict*>(context);
  nb::str key(f.name.data(), f.name.size());
  switch (f.kind) {
    case AttrField::Kind::Bool: out[key] = nb::bool_(f.b); break;
    case AttrField::Kind::Int: out[key] = nb::int_(f.i); break;
    case AttrField::Kind::Float: out[key] = nb::float_(f.f); break;
    case AttrField::Kind::Scalar:
      if (f.scalar.is_floating()) out[key] = nb::float_(f.scalar.v.f);
      else if (f.scalar.is_uint()) out[key] = nb::steal(PyLong_FromUnsignedLongLong(f.scalar.v.u));
      else if (f.scalar.is_integral()) out[key] = nb::int_(f.scalar.v.i);
      else out[key] = nb::bool_(f.scalar.v.b);
      break;
    case AttrField::Kind::Ints: {
      nb::list ints;
      for (int64_t x : f.ints) ints.append(x);
      out[key] = nb::tuple(ints);
      break;
    }
    case AttrField::Kind::Enum: out[key] = f.text ? nb::object(nb::str(f.text)) : nb::object(nb::int_(f.i)); break;
    case AttrField::Kind::Opaque: out[key] = nb::none(); break;
  }
}

// The recorded graph as plain Python data, read-only (Graph::buffers/values/ops/results), for dygrad.onnx
// (docs/onnx.md): {"buffers": [(kind, argument, fixed storage address, bytes)], "values": [(buffer, offset,
// sizes, strides, dtype)], "ops": [(name, attributes type, {field: value}, inputs, outputs, file, line)],
// "results": [value]}. Offsets are in elements; an absent operand is -1.
nb::dict graph_records(const Graph& g) {
  nb::list buffers, values, ops, results;
  for (const Buffer& b : g.buffers())
    buffers.append(nb::make_tuple(buffer_kind_name(b.kind), b.arg,
                                  b.kind == BufferKind::Fixed ? reinterpret_cast<uintptr_t>(b.fixed->address())
                                                              : uintptr_t(0),
                                  b.nbytes));
  for (const Value& v : g.values())
    values.append(nb::make_tuple(v.buffer, v.offset, dims_tuple(v.sizes), dims_tuple(v.strides),
                                 nb::handle(dtype_object(v.dtype))));
  for (const GraphOp& op : g.ops()) {
    nb::dict attrs;
    op.attrs.visit(&attrs, &attr_field_to_python);
    nb::list inputs, outputs;
    for (int32_t i : op.inputs) inputs.append(i);
    for (int32_t o : op.outputs) outputs.append(o);
    ops.append(nb::make_tuple(op.op->name, op.attrs.type() ? op.attrs.type()->name : "", attrs, inputs, outputs,
                              op.site.file ? op.site.file : "", op.site.line));
  }
  for (int32_t r : g.results()) results.append(r);
  nb::dict out;
  out["buffers"] = buffers;
  out["values"] = values;
  out["ops"] = ops;
  out["results"] = results;
  return out;
}
}  // namespace

void init_jit(nb::module_& m) {
  m.def("_jit_guard_state", &guard_state, nb::arg("tensors"), nb::arg("modules"), nb::arg("optimizers"),
        nb::arg("leaves"), nb::arg("dynamic") = nb::none());
  nb::class_<PySymbolic>(m, "_JitSymbolic")
      .def("__init__", [](PySymbolic* self, std::vector<std::string> names) {
        new (self) PySymbolic();
        self->symbolic = std::make_unique<SymbolicGraph>(std::move(names));
      }, nb::arg("symbol_names"))
      .def("add", [](PySymbolic& self, PyGraph& graph, std::vector<int64_t> point, nb::handle args,
                     std::vector<int64_t> extras) {
        return self.symbolic->add(graph.graph, point, tensors_of(args), extras);
      }, nb::arg("graph"), nb::arg("point"), nb::arg("args"), nb::arg("extras") = std::vector<int64_t>{})
      .def("instantiate", [](PySymbolic& self, std::vector<int64_t> point, nb::handle args) {
        SymbolicGraph::Instance r = self.symbolic->instantiate(point, tensors_of(args));
        nb::object graph = r.graph ? nb::cast(PyGraph{std::move(r.graph)}) : nb::none();
        nb::list geometry;
        for (const auto& [sizes, strides] : r.arg_geometry)
          geometry.append(nb::make_tuple(dims_tuple(sizes), dims_tuple(strides)));
        return nb::make_tuple(graph, r.reason, r.more_samples, r.extras, geometry);
      }, nb::arg("point"), nb::arg("args"))
      .def_prop_ro("num_samples", [](PySymbolic& self) { return self.symbolic->num_samples(); });
  nb::class_<PyGraph>(m, "_JitGraph")
      .def("launch", [](PyGraph& self, nb::handle args) {
        std::vector<Tensor> a = tensors_of(args);
        PythonCallSite site;
        return wrap_list(self.graph->launch(a));
      }, nb::arg("args"))
      .def("describe", [](PyGraph& self) { return self.graph->describe(); })
      .def("fixed_addresses", [](PyGraph& self) { return self.graph->fixed_addresses(); })
      .def("records", [](PyGraph& self) { return graph_records(*self.graph); })
      .def_prop_ro("num_ops", [](PyGraph& self) { return self.graph->num_ops(); })
      .def_prop_ro("arena_bytes", [](PyGraph& self) { return self.graph->arena_bytes(); })
      .def_prop_ro("max_scratch", [](PyGraph& self) { return self.graph->max_scratch(); })
      .def_prop_ro("num_escaping", [](PyGraph& self) { return self.graph->num_escaping(); })
      // O1 (docs/jit-fusion.md): the graph after the passes, and each pass's graph when `log`.
      .def("optimized", [](PyGraph& self, bool dce, bool cse, bool fusion, bool log, bool patterns,
                           bool rematerialize, bool fold, bool inplace) {
        PassConfig config;
        config.dce = dce;
        config.cse = cse;
        config.fusion = fusion;
        config.patterns = patterns;
        config.rematerialize = rematerialize;
        config.fold = fold;
        config.inplace = inplace;
        std::vector<PassLog> passes;
        std::shared_ptr<Graph> g = self.graph->optimized(config, log ? &passes : nullptr);
        nb::list out;
        for (PassLog& p : passes) out.append(nb::make_tuple(p.pass, p.lines, p.note));
        return nb::make_tuple(nb::cast(PyGraph{std::move(g)}), out);
      }, nb::arg("dce") = true, nb::arg("cse") = true, nb::arg("fusion") = true, nb::arg("log") = false,
         nb::arg("patterns") = true, nb::arg("rematerialize") = true, nb::arg("fold") = true,
         nb::arg("inplace") = true)
      .def("source", [](PyGraph& self) { return self.graph->source(); })
      .def("load_kernels", [](PyGraph& self, const std::string& path, bool measure) {
        nb::gil_scoped_release release;
        self.graph->load_kernels(path, measure);
      }, nb::arg("path"), nb::arg("measure") = true)
      .def_prop_ro("kernel_choices", [](PyGraph& self) { return self.graph->kernel_choices(); })
      .def_prop_ro("kernels_loaded", [](PyGraph& self) { return self.graph->kernels_loaded(); })
      .def_prop_ro("num_fused", [](PyGraph& self) { return self.graph->programs().size(); })
      .def("fused_sources", [](PyGraph& self) {
        nb::list out;
        for (const auto& p : self.graph->programs()) {
          nb::list records;
          for (const FusedRecord& r : p->records) records.append(r.source);
          out.append(nb::make_tuple(p->name, records));
        }
        return out;
      });

  nb::class_<PyCapture>(m, "_JitCapture")
      .def("__init__", [](PyCapture* self, nb::handle args, bool fullgraph) {
        new (self) PyCapture();
        self->capture = std::make_unique<Capture>(tensors_of(args), fullgraph);
      }, nb::arg("args"), nb::arg("fullgraph") = false)
      .def("end", [](PyCapture& self) { self.capture->end(); })
      .def("build", [](PyCapture& self, nb::handle results) -> nb::object {
        std::shared_ptr<Graph> g = self.capture->build(tensors_of(results));
        if (!g) return nb::none();
        return nb::cast(PyGraph{std::move(g)});
      }, nb::arg("results"))
      .def("build_with_saved", [](PyCapture& self, nb::handle results) -> nb::object {
        std::vector<Tensor> saved;
        std::shared_ptr<Graph> g = self.capture->build_with_saved(tensors_of(results), saved);
        if (!g) return nb::none();
        return nb::make_tuple(nb::cast(PyGraph{std::move(g)}), wrap_list(std::move(saved)));
      }, nb::arg("results"))
      .def("close", [](PyCapture& self) { self.capture.reset(); })
      .def_prop_ro("cuts", [](PyCapture& self) {
        nb::list out;
        for (const Cut& c : self.capture->cuts()) out.append(nb::make_tuple(c.before_op, c.reader, c.file, c.line));
        return out;
      })
      .def_prop_ro("problems", [](PyCapture& self) { return self.capture->problems(); })
      .def_prop_ro("num_ops", [](PyCapture& self) { return self.capture->num_ops(); })
      .def("describe", [](PyCapture& self) { return self.capture->describe(); });

  nb::class_<PySegments>(m, "_JitSegments")
      .def(nb::init<>())
      .def("__enter__", [](PySegments& self) -> PySegments& {
        DG_CHECK(!self.batcher, Runtime, "[jit] segments already entered");
        self.batcher = std::make_unique<SegmentBatcher>();
        return self;
      }, nb::rv_policy::reference)
      .def("__exit__", [](PySegments& self, nb::args) {
        if (!self.batcher) return;
        std::unique_ptr<SegmentBatcher> b = std::move(self.batcher);
        PythonCallSite site;
        b->end();
        self.segments = b->segments();
        self.ops = b->ops_gathered();
      })
      .def_ro("segments", &PySegments::segments)
      .def_ro("ops_gathered", &PySegments::ops);
  m.def("_storage_address", [](const Tensor& t) {
    return reinterpret_cast<uintptr_t>(t.storage().address());
  }, nb::arg("tensor"));
  m.def("_jit_active", [] { return active_on_this_thread(); });
}

}  // namespace dg::py
