// Constant factories. (Random factories and arange live in ops/random.cpp.)
#include "dygrad/ops/factory.h"

#include <cstring>

#include "dygrad/core/storage.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"

namespace dg {

namespace {
Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}
// A factory's buffer, pinned when asked (torch: only a CPU tensor can be).
Tensor allocate(const char* op, IntSpan shape, const TensorOptions& options) {
  if (!options.pinned) [[likely]] return Tensor::empty(shape, options.dtype, options.device, op);
  DG_CHECK(options.device.is_cpu(), Runtime, "[", op, "] only dense CPU tensors can be pinned, not ",
           options.device.str(), " ones");
  PinnedAllocationScope pinned(op);
  return Tensor::empty(shape, options.dtype, options.device, op);
}
}  // namespace

Tensor empty(IntSpan shape, TensorOptions options) { return finish(allocate("empty", shape, options), options); }

namespace {
Tensor full_named(const char* op, IntSpan shape, Scalar value, TensorOptions options) {
  check_scalar_fits(op, value, options.dtype);  // before allocating: a huge shape with a bad value names the value
  Tensor t = allocate(op, shape, options);
  fill_(t, value);
  return finish(t, options);
}
}  // namespace

Tensor full(IntSpan shape, Scalar value, TensorOptions options) { return full_named("full", shape, value, options); }
Tensor zeros(IntSpan shape, TensorOptions options) { return full_named("zeros", shape, 0, options); }
Tensor ones(IntSpan shape, TensorOptions options) { return full_named("ones", shape, 1, options); }
Tensor empty_like(const Tensor& a) { return Tensor::empty(a.shape(), a.dtype(), a.device()); }
Tensor zeros_like(const Tensor& a) { return full(a.shape(), 0, {.dtype = a.dtype(), .device = a.device()}); }
Tensor ones_like(const Tensor& a) { return full(a.shape(), 1, {.dtype = a.dtype(), .device = a.device()}); }
Tensor full_like(const Tensor& a, Scalar value) {
  return full(a.shape(), value, {.dtype = a.dtype(), .device = a.device()});
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, IntSpan shape, DType dtype) {
  DG_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), Value, "[from_vector] ", values.size(),
           " values do not fill shape ", shape);
  Tensor staging = [&] {
    HostAllocationScope host;  // memory no queued Task still uses: the host writes it directly
    return Tensor::empty(shape, dtype_of<T>::value);
  }();
  if (!values.empty()) std::memcpy(staging.raw_data(), values.data(), values.size() * sizeof(T));
  return dtype == staging.dtype() ? staging : to(staging, dtype);
}
template Tensor from_vector<float>(const std::vector<float>&, IntSpan, DType);
template Tensor from_vector<double>(const std::vector<double>&, IntSpan, DType);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, IntSpan, DType);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, IntSpan, DType);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, IntSpan, DType);
template Tensor from_vector<uint16_t>(const std::vector<uint16_t>&, IntSpan, DType);

}  // namespace dg
