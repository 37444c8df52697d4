// The CUDA backend's gathers by index (index.cu): gather, index_select (its index expanded to the output's shape by
// the op layer, as for the CPU kernel) and embedding. Indices are validated on the device (the error word), so a bad
// index raises at the next sync, as the CPU kernel's error does (backend/cpu/index.cpp, embedding.cpp). Compiles
// for sm_90; not yet run on a GPU.
#include <vector>

#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/index.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {

LaunchArgs launch_args(const Task& task) {
  const LaunchContext ctx = launch_context(task);
  return {ctx.stream, ctx.fault};
}

void check_index_dtype(const Task& task, const Tensor& index) {
  DG_CHECK(index.dtype() == DType::Int64 || index.dtype() == DType::Int32, Type, "[", task.op->name,
           "] the index must be int64 or int32, got ", dtype_name(index.dtype()));
}

// inputs (a, index); output out of index's shape; DimAttrs dim: out[p, j] = a[p, index[p, j]].
void gather_kernel(Task& task) {
  const Tensor& a = task.inputs[0];
  const Tensor& index = task.inputs[1];
  const Tensor& out = task.outputs[0];
  check_index_dtype(task, index);
  const int64_t dim = task.attrs.get<DimAttrs>().dim;
  // a's strides with its dim's stride 0: the calculator finds a[p, 0]; the kernel adds index * a.stride(dim).
  std::vector<int64_t> a_strides(a.strides().begin(), a.strides().end());
  a_strides[static_cast<size_t>(dim)] = 0;
  const OperandLayout layouts[3] = {{index.shape(), out.strides()}, {index.shape(), a_strides}, {index.shape(), index.strides()}};
  OffsetCalculator<3> calc;
  DG_CHECK(make_offset_calculator<3>(index.shape(), layouts, calc), NotImplemented, "[", task.op->name,
           "] the CUDA kernel takes at most ", kMaxOffsetDims, " dims");
  const int32_t code = std::string_view(task.op->name) == "index_select" ? kFaultIndexSelect : kFaultGather;
  const LaunchArgs args = launch_args(task);
  launch_gather(static_cast<int>(a.itemsize()), index.dtype() == DType::Int32, calc, index.numel(), out.raw_data(),
                a.raw_data(), index.raw_data(), a.strides()[static_cast<size_t>(dim)], a.shape()[static_cast<size_t>(dim)],
                static_cast<int>(dim), code, args);
  check_launch(task);
}

// inputs (weight[V, C], indices[...] contiguous), output [..., C] contiguous: rows of weight.
void embedding_kernel(Task& task) {
  const Tensor& weight = task.inputs[0];
  const Tensor& indices = task.inputs[1];
  const Tensor& out = task.outputs[0];
  check_index_dtype(task, indices);
  DG_CHECK(indices.is_contiguous() && out.is_contiguous(), Runtime, "[embedding] the CUDA kernel takes contiguous "
           "indices and output");
  const LaunchArgs args = launch_args(task);
  launch_embedding(static_cast<int>(weight.itemsize()), indices.dtype() == DType::Int32, weight.shape()[0],
                   weight.shape()[1], weight.strides()[0], weight.strides()[1], indices.numel(), out.raw_data(),
                   weight.raw_data(), indices.raw_data(), args);
  check_launch(task);
}

}  // namespace

DG_REGISTER_KERNEL(gather, Device::Type::CUDA, gather_kernel);
DG_REGISTER_KERNEL(index_select, Device::Type::CUDA, gather_kernel);
DG_REGISTER_KERNEL(embedding, Device::Type::CUDA, embedding_kernel);

}  // namespace dg::cuda
