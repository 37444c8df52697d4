// The CUDA backend's softmax and log_softmax (softmax.cu): ReduceAttrs dims = {dim} (empty for a 0-dim input),
// input x, output y of x's shape, as the CPU kernels take them (backend/cpu/softmax.cpp). Compiles for sm_90; not
// yet run on a GPU.
#include <vector>

#include "dygrad/backend/cuda/cuda_device.h"
#include "dygrad/backend/cuda/elem_type.h"
#include "dygrad/backend/cuda/softmax.h"
#include "dygrad/core/error.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::cuda {
namespace {

void softmax_forward(Task& task, bool log) {
  const Tensor& x = task.inputs[0];
  const Tensor& y = task.outputs[0];
  const ElemType type = elem_type(task, x.dtype(), true);
  DG_CHECK(y.dtype() == x.dtype(), Type, "[", task.op->name, "] the CUDA kernel writes the input's dtype");
  const auto dims = task.attrs.get<ReduceAttrs>().dims;
  const int64_t dim = dims.empty() ? -1 : dims[0];
  // The rows: every dim but `dim`, with x's and y's strides.
  std::vector<int64_t> sizes, x_strides, y_strides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == dim) continue;
    sizes.push_back(x.shape()[static_cast<size_t>(d)]);
    x_strides.push_back(x.strides()[static_cast<size_t>(d)]);
    y_strides.push_back(y.strides()[static_cast<size_t>(d)]);
  }
  int64_t num_rows = 1;
  for (int64_t s : sizes) num_rows *= s;
  const OperandLayout layouts[2] = {{sizes, x_strides}, {sizes, y_strides}};
  OffsetCalculator<2> rows;
  DG_CHECK(make_offset_calculator<2>(sizes, layouts, rows), NotImplemented, "[", task.op->name,
           "] the CUDA kernel takes at most ", kMaxOffsetDims, " dims");
  const int64_t D = dim < 0 ? 1 : x.shape()[static_cast<size_t>(dim)];
  const int64_t sx = dim < 0 ? 0 : x.strides()[static_cast<size_t>(dim)];
  const int64_t sy = dim < 0 ? 0 : y.strides()[static_cast<size_t>(dim)];
  const LaunchContext ctx = launch_context(task);
  launch_softmax(log, type, rows, num_rows, D, sx, sy, y.raw_data(), x.raw_data(), {ctx.stream, ctx.fault});
  check_launch(task);
}

void softmax_kernel(Task& task) { softmax_forward(task, false); }
void log_softmax_kernel(Task& task) { softmax_forward(task, true); }

}  // namespace

DG_REGISTER_KERNEL(softmax, Device::Type::CUDA, softmax_kernel);
DG_REGISTER_KERNEL(log_softmax, Device::Type::CUDA, log_softmax_kernel);

}  // namespace dg::cuda
