// Tensor's host access: sync points that wait for the stream (declared in core/tensor.h; defined here, in the
// layer that owns the stream). See docs/stream.md and docs/async-errors.md.
#include "dygrad/core/error.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_sink.h"
#include "dygrad/runtime/stream.h"

namespace dg {

namespace {
// Every host read passes here: the op sinks are told first (one may refuse it), then the host waits.
void wait_readable_as(const Tensor& t, const char* reader) {
  if (op_sinks::engaged()) [[unlikely]] op_sinks::on_host_read(t, reader);
  Stream& stream = Stream::cpu();
  stream.wait_for(t.storage().last_write_seq());
  if (uint64_t bad = t.storage().poisoned_by())
    fail(ErrorKind::Runtime, "tensor data is invalid: it was produced after a failed op: ",
         stream.failure_message(bad));
}
}  // namespace

void Tensor::wait_readable() const { wait_readable_as(*this, "read"); }

template <typename T>
std::vector<T> Tensor::to_vector() const {
  wait_readable_as(*this, "to_vector");
  std::vector<T> out;
  out.reserve(static_cast<size_t>(numel()));
  visit_dtype(dtype(), [&]<typename S>() {
    const S* base = data<S>();
    Dims index(static_cast<size_t>(dim()), 0);
    for (int64_t n = 0; n < numel(); ++n) {
      int64_t off = 0;
      for (size_t d = 0; d < index.size(); ++d) off += index[d] * impl_->strides[d];
      S v = base[off];
      if constexpr (std::is_same_v<T, bool>) out.push_back(static_cast<float>(v) != 0.0f);
      else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) out.push_back(static_cast<T>(static_cast<float>(v)));
      else out.push_back(static_cast<T>(v));
      for (size_t d = index.size(); d-- > 0;) {
        if (++index[d] < impl_->sizes[d]) break;
        index[d] = 0;
      }
    }
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

Scalar Tensor::item_scalar() const {
  DG_CHECK(numel() == 1, Runtime, "[item] a Tensor with ", numel(), " elements cannot be converted to Scalar");
  wait_readable_as(*this, "item");
  return visit_dtype(dtype(), [&]<typename S>() -> Scalar {
    S v = *data<S>();
    if constexpr (std::is_same_v<S, bool>) return Scalar(v);
    else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16> || std::is_floating_point_v<S>)
      return Scalar(static_cast<double>(static_cast<compute_t<S>>(v)));
    else return Scalar(static_cast<int64_t>(v));
  });
}

template <typename T>
T Tensor::item() const { return item_scalar().to<T>(); }
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

}  // namespace dg
