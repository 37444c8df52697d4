// The CPU's kernel for timing marks (ops/timing.h; docs/stream.md, "Timing marks").
#include <chrono>

#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/stream.h"

namespace dg::cpu {
namespace {
// The monotonic clock when the stream reached the mark, and the stream's busy time then.
void record_time_kernel(Task& task) {
  int64_t* out = task.outputs[0].data<int64_t>();
  out[0] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
               .count();
  out[1] = static_cast<int64_t>(Stream::by_id(task.stream)->busy_ns());
}
}  // namespace
DG_REGISTER_KERNEL(record_time, Device::Type::CPU, record_time_kernel);
}  // namespace dg::cpu
