// The CUDA backend's reductions (reduce.cu): sum, amax and amin over ReduceAttrs dims, the input viewed as the CPU's
// ReduceLayout (backend/cpu/reduce.h) does: kept dims row-major, reduced dims row-major. Compiles for sm_90; not yet
// run on a GPU.
#include <vector>

#include "dygrad/backend/cuda/cuda_check.h"
#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/elem_type.h"
#include "dygrad/backend/cuda/reduce.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {


// in [..] -> out [O] contiguous; ReduceAttrs dims (sorted).
void reduce(Task& task, ReduceOp op) {
  const Tensor& in = task.inputs[0];
  const Tensor& out = task.outputs[0];
  DG_CHECK(out.is_contiguous(), Runtime, "[", task.op->name, "] the CUDA kernel writes a contiguous output");
  const auto dims = task.attrs.get<ReduceAttrs>().dims;
  std::vector<int64_t> kept_sizes, kept_strides, red_sizes, red_strides;
  size_t k = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    const bool reduced = k < dims.size() && dims[k] == d;
    (reduced ? red_sizes : kept_sizes).push_back(in.shape()[static_cast<size_t>(d)]);
    (reduced ? red_strides : kept_strides).push_back(in.strides()[static_cast<size_t>(d)]);
    if (reduced) ++k;
  }
  int64_t num_outputs = 1, num_reduced = 1;
  for (int64_t s : kept_sizes) num_outputs *= s;
  for (int64_t s : red_sizes) num_reduced *= s;
  const OperandLayout kept_layout[1] = {{kept_sizes, kept_strides}}, red_layout[1] = {{red_sizes, red_strides}};
  OffsetCalculator<1> kept, reduced;
  DG_CHECK(make_offset_calculator<1>(kept_sizes, kept_layout, kept) &&
               make_offset_calculator<1>(red_sizes, red_layout, reduced),
           NotImplemented, "[", task.op->name, "] the CUDA kernel takes at most ", kMaxOffsetDims, " dims");
  const ElemType in_type = elem_type(task, in.dtype()), out_type = elem_type(task, out.dtype());
  DG_CHECK(out_type == in_type || (op == ReduceOp::Sum && (out_type == ElemType::Int64 ||
           out_type == ElemType::Float32 || out_type == ElemType::Float64)), NotImplemented, "[", task.op->name,
           "] has no CUDA kernel from ", dtype_name(in.dtype()), " to ", dtype_name(out.dtype()));
  const LaunchContext ctx = launch_context(task);
  if (num_reduced == 0) {  // an empty sum (the op layer refuses empty max and min)
    // Zero bits are 0 in every dtype the kernels take.
    DG_CUDA_CHECK("[sum] cudaMemsetAsync", cudaMemsetAsync(out.raw_data(), 0, out.numel() * out.itemsize(), ctx.stream));
    return;
  }
  launch_reduce(op, out_type, in_type, kept, reduced, num_outputs, num_reduced, out.raw_data(), in.raw_data(),
                {ctx.stream, ctx.fault});
  check_launch(task);
}

void sum_kernel(Task& task) { reduce(task, ReduceOp::Sum); }
void amax_kernel(Task& task) { reduce(task, ReduceOp::Max); }
void amin_kernel(Task& task) { reduce(task, ReduceOp::Min); }

}  // namespace

DG_REGISTER_KERNEL(sum, Device::Type::CUDA, sum_kernel);
DG_REGISTER_KERNEL(amax, Device::Type::CUDA, amax_kernel);
DG_REGISTER_KERNEL(amin, Device::Type::CUDA, amin_kernel);

}  // namespace dg::cuda
