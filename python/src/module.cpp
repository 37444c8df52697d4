// dygrad._C: the extension module. Each family of bindings lives in its own file; this only calls them.
#include "common.h"

namespace dg::py {
void init_indexing(nb::module_& m);  // indexing.cpp
void init_jit(nb::module_& m);       // jit.cpp
void init_ops_complex(nb::module_& m);  // ops_complex.cpp
void init_ops_modulo(nb::module_& m);   // ops_modulo.cpp
}

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
  init_indexing(m);
  init_ops_math(m);
  init_ops_complex(m);
  init_ops_modulo(m);
  init_ops_compare(m);
  init_ops_nn(m);
  init_ops_index(m);
  init_ops_fused(m);
  init_autocast(m);
  init_ops_random(m);
  init_ops_sort(m);
  init_ops_linalg(m);
  init_autograd(m);
  init_runtime(m);
  init_profiler(m);
  init_distributed(m);
  init_jit(m);
}
