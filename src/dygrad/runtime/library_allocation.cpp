// The mark of runtime/library_allocation.h: a depth per thread, in the library (the kernel plugins are modules with
// hidden symbols, so the thread-local must live here to be one variable).
#include "dygrad/runtime/library_allocation.h"

namespace dg {
namespace {
thread_local int tls_library_depth = 0;
}  // namespace

LibraryAllocationScope::LibraryAllocationScope() { ++tls_library_depth; }
LibraryAllocationScope::~LibraryAllocationScope() { --tls_library_depth; }
bool in_library_allocation_scope() { return tls_library_depth > 0; }

}  // namespace dg
