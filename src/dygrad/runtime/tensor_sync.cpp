// Tensor's host access: sync points that wait for the stream (declared in core/tensor.h; defined here, in the
// layer that owns the stream). See docs/stream.md and docs/async-errors.md.
#include <atomic>

#include "dygrad/core/allocator.h"
#include "dygrad/core/error.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/op_sink.h"
#include "dygrad/runtime/stream.h"

namespace dg {

namespace {
std::atomic<HostCopyFn> g_host_copy{nullptr};

// The host waits for the last writer on the storage's own stream and for another device's copy still writing it
// (docs/devices.md); data a failed op produced raises, naming that op.
void wait_until_readable(const Tensor& t) {
  const Storage& storage = t.storage();
  Stream::of(t.device()).wait_for(storage.last_write_seq());
  if (!cpu_only()) [[unlikely]] {
    if (uint64_t foreign = storage.foreign_write())
      if (!host_waits_skipped()) Stream::by_id(event_stream(foreign))->wait_for(event_seq(foreign));
  }
  if (uint64_t bad = storage.poisoned_by())
    fail(ErrorKind::Runtime, "tensor data is invalid: it was produced after a failed op: ",
         Stream::failure_message_of(bad));
}

// Every host read passes here: the op sinks are told first (one may refuse it), then the host waits.
void wait_readable_as(const Tensor& t, const char* reader) {
  if (op_sinks::engaged()) [[unlikely]] op_sinks::on_host_read(t, reader);
  wait_until_readable(t);
}

// A device's tensor is read on the host through a copy to the CPU (ops/device.cpp registers it), whose own read tells
// the op sinks. Data a failed op produced raises first, naming that op: the copy of it would be skipped (its inputs
// are poisoned, docs/async-errors.md) and the read would name the copy.
Tensor host_copy(const Tensor& t) {
  wait_until_readable(t);
  HostCopyFn f = g_host_copy.load(std::memory_order_acquire);
  DG_CHECK(f != nullptr, Runtime, "[read] no copy to the host is registered for ", t.device().str());
  return f(t);
}
}  // namespace

void set_host_copy(HostCopyFn f) { g_host_copy.store(f, std::memory_order_release); }

namespace {
std::atomic<bool> g_skip_host_waits{false};
}
void set_host_waits_skipped(bool on) { g_skip_host_waits.store(on, std::memory_order_relaxed); }
bool host_waits_skipped() { return g_skip_host_waits.load(std::memory_order_relaxed); }

void Tensor::wait_readable() const { wait_readable_as(*this, "read"); }

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (!device().is_cpu()) [[unlikely]] return host_copy(*this).to_vector<T>();
  wait_readable_as(*this, "to_vector");
  std::vector<T> out;
  out.reserve(static_cast<size_t>(numel()));
  visit_any_dtype(dtype(), [&]<typename S>() {
    const S* base = data<S>();
    Dims index(static_cast<size_t>(dim()), 0);
    for (int64_t n = 0; n < numel(); ++n) {
      int64_t off = 0;
      for (size_t d = 0; d < index.size(); ++d) off += index[d] * impl_->strides[d];
      S v = base[off];
      if constexpr (std::is_same_v<T, bool>) out.push_back(static_cast<float>(v) != 0.0f);
      else if constexpr (!std::is_arithmetic_v<S>) out.push_back(static_cast<T>(static_cast<float>(v)));  // 16, 8-bit floats
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
template std::vector<uint64_t> Tensor::to_vector<uint64_t>() const;

Scalar Tensor::item_scalar() const {
  DG_CHECK(numel() == 1, Runtime, "[item] a Tensor with ", numel(), " elements cannot be converted to Scalar");
  if (!device().is_cpu()) [[unlikely]] return host_copy(*this).item_scalar();
  wait_readable_as(*this, "item");
  // A uint64 above 2**63 - 1 is a UInt Scalar (core/dtype.h).
  return visit_any_dtype(dtype(), [&]<typename S>() -> Scalar {
    S v = *data<S>();
    if constexpr (std::is_same_v<S, bool>) return Scalar(v);
    else if constexpr (!std::is_arithmetic_v<S> || std::is_floating_point_v<S>)
      return Scalar(static_cast<double>(static_cast<compute_t<S>>(v)));
    else return Scalar(v);
  });
}

template <typename T>
T Tensor::item() const { return item_scalar().to<T>(); }
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

}  // namespace dg
