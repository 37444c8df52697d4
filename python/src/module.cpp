// dygrad._C: the extension module. Each family of bindings lives in its own file; this only calls them.
#include "common.h"

NB_MODULE(_C, m) {
  using namespace dg::py;
  m.doc() = "dygrad's C++ core: tensors, ops, autograd and the runtime";
  // dtype objects and a few registries live for the process on purpose; nanobind need not report them.
  nb::set_leak_warnings(false);
  init_errors(m);
  init_dtype(m);
  init_tensor(m);
  init_interop(m);
  init_ops_arithmetic(m);
  init_ops_shape(m);
  init_ops_reduce(m);
  init_factories(m);
  init_autograd(m);
  init_runtime(m);
}
