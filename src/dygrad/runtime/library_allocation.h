// What a library allocates for itself inside a kernel (oneDNN's matmul primitives, their stream and scratchpad,
// which a thread keeps across Tasks, and the bookkeeping of a primitive's execution: backend/cpu/fused_blas.cpp) is
// not the Task's scratch (docs/ops.md, "Scratch space is declared"), wherever it comes from: malloc, which no count
// sees, or operator new. A scope marks such calls on the calling thread, so that tests/cpp/test_scratch.cpp, which
// counts every byte a kernel allocates through operator new, leaves them out; nothing else reads the mark.
#pragma once

namespace dg {

class LibraryAllocationScope {
 public:
  LibraryAllocationScope();
  ~LibraryAllocationScope();
  LibraryAllocationScope(const LibraryAllocationScope&) = delete;
  LibraryAllocationScope& operator=(const LibraryAllocationScope&) = delete;
};

// Whether this thread is inside a LibraryAllocationScope.
bool in_library_allocation_scope();

}  // namespace dg
