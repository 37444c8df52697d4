// dygrad._C's distributed part: process groups and their operations (distributed/comm.h), wrapped by
// python/dygrad/distributed/ into torch.distributed's API.
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <unordered_set>

#include "common.h"
#include "dygrad/autograd/node.h"
#include "dygrad/distributed/comm.h"
#include "dygrad/ops/shape.h"

namespace dg::py {

using dist::ProcessGroup;
using dist::ReduceOp;
using dist::Work;
using namespace nb::literals;

void init_distributed(nb::module_& m) {
  nb::enum_<ReduceOp>(m, "_ReduceOp")
      .value("SUM", ReduceOp::Sum)
      .value("AVG", ReduceOp::Avg)
      .value("PRODUCT", ReduceOp::Product)
      .value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max);

  nb::class_<Work>(m, "_Work")
      .def("wait_on_stream", &Work::wait_on_stream)
      .def("wait_here", &Work::wait_here, nb::call_guard<nb::gil_scoped_release>())
      .def("is_completed", &Work::completed)
      .def("failed", &Work::failed)
      .def("error", &Work::error)
      .def("source", &Work::source)
      .def_prop_ro("name", [](const Work& w) { return dist::comm_kind_name(w.kind); });

  nb::class_<ProcessGroup>(m, "_ProcessGroup")
      .def("rank", &ProcessGroup::rank)
      .def("size", &ProcessGroup::size)
      .def("world_ranks", &ProcessGroup::world_ranks)
      .def("backend", &ProcessGroup::backend)
      .def("timeout", &ProcessGroup::timeout_seconds)
      .def("broken", &ProcessGroup::broken)
      .def("shared_memory_slot_bytes", &ProcessGroup::shared_memory_slot_bytes)
      .def("executions_registered", &ProcessGroup::executions_registered)
      .def("collective_check", &ProcessGroup::collective_check)
      .def("set_collective_check", &ProcessGroup::set_collective_check, "on"_a)
      .def("all_reduce", &ProcessGroup::all_reduce, "tensor"_a, "op"_a, "async_op"_a)
      .def("all_reduce_gathered", &ProcessGroup::all_reduce_gathered, "output"_a, "pieces"_a, "op"_a, "async_op"_a)
      .def("broadcast", &ProcessGroup::broadcast, "tensor"_a, "root"_a, "async_op"_a)
      .def("reduce", &ProcessGroup::reduce, "tensor"_a, "root"_a, "op"_a, "async_op"_a)
      .def("all_gather_into_tensor", &ProcessGroup::all_gather_into_tensor, "output"_a, "input"_a, "async_op"_a)
      .def("reduce_scatter_tensor", &ProcessGroup::reduce_scatter_tensor, "output"_a, "input"_a, "op"_a,
           "async_op"_a)
      .def("send", &ProcessGroup::send, "tensor"_a, "dst"_a, "tag"_a, "async_op"_a)
      .def("recv", &ProcessGroup::recv, "tensor"_a, "src"_a, "tag"_a, "async_op"_a)
      .def("barrier", &ProcessGroup::barrier, nb::call_guard<nb::gil_scoped_release>())
      .def("split", &ProcessGroup::split, "ranks"_a, nb::call_guard<nb::gil_scoped_release>());

  m.def("_mpi_built", &dist::mpi_built);
  m.def("_mpi_initialized", &dist::mpi_initialized);
  m.def("_mpi_init_world", &dist::init_world, "timeout_s"_a, nb::call_guard<nb::gil_scoped_release>());
  m.def("_mpi_finalize", &dist::finalize, nb::call_guard<nb::gil_scoped_release>());
  m.def("_single_process_group", &dist::single_process_group);
  // fully_shard's saved-tensor hooks (python/dygrad/distributed/fsdp): a saved view of a parameter re-made over the
  // parameter gathered again for backward, with the geometry it had (no autograd: the gathered tensor needs none).
  m.def("_as_strided", [](const Tensor& t, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                          int64_t offset) { return as_strided(t, sizes, strides, offset); },
        "tensor"_a, "sizes"_a, "strides"_a, "storage_offset"_a);
  m.def("_comm_in_flight", &dist::comm_in_flight);
  m.def("_comm_stats", [] {
    const dist::CommStats s = dist::comm_stats();
    nb::dict d;
    d["operations"] = s.operations;
    d["comm_s"] = static_cast<double>(s.comm_ns) / 1e9;
    d["exposed_s"] = static_cast<double>(s.exposed_ns) / 1e9;
    return d;
  });
  // A key for the tensor object behind a Python wrapper (hooks receive new wrappers of the same parameter).
  m.def("_tensor_key", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl()); });
  // How many holders t's memory has outside queued Tasks (each tensor over the storage counts once, however many
  // Python names it has): data parallel reuses a bucket's buffer once its own tensor is the only one left.
  m.def("_storage_holders", [](const Tensor& t) {
    const Storage& s = *t.impl()->storage;
    return s.use_count() - s.task_use_count();
  });
  // The leaves (parameters) the autograd graphs of `outputs` reach: data parallel's find_unused_parameters.
  m.def("_reachable_leaves", [](std::vector<Tensor> outputs) {
    std::vector<const Node*> stack;
    std::unordered_set<const Node*> seen;
    std::unordered_set<const TensorImpl*> leaves_seen;
    nb::list leaves;
    auto visit_leaf = [&](const Ref<TensorImpl>& leaf) {
      if (leaves_seen.insert(leaf.get()).second) leaves.append(wrap_object(Tensor(leaf)));
    };
    for (const Tensor& t : outputs) {
      if (!t.defined() || !t.requires_grad()) continue;
      if (t.is_leaf()) visit_leaf(t.impl_ref());
      else if (seen.insert(t.grad_fn().get()).second) stack.push_back(t.grad_fn().get());
    }
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      for (const Edge& e : node->next) {
        if (e.leaf) visit_leaf(e.leaf);
        else if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      }
    }
    return leaves;
  }, nb::arg("outputs"));
}

}  // namespace dg::py
