// The CPU backend marks itself built when the library loads; each kernel file registers its own kernels
// (DG_REGISTER_KERNEL at its end). See docs/ops.md, "Backends".
#include "dygrad/runtime/op_def.h"

namespace dg::cpu {
namespace {
[[maybe_unused]] const bool registered = (register_backend(Device::Type::CPU), true);
}  // namespace
}  // namespace dg::cpu
