// The kernel side of a Task's scratch (runtime/scratch.h): the arena's errors, out of line.
#include "dygrad/runtime/scratch.h"

#include "dygrad/core/error.h"

namespace dg {

void raise_scratch_overflow(const char* op_name, size_t declared, size_t used, size_t wanted) {
  fail(ErrorKind::Runtime, "[", op_name, "] internal error: the kernel takes ", wanted, " bytes of scratch with ", used,
       " of its declared ", declared, " taken already (OpTraits::scratch declares too little)");
}

void raise_no_free_scratch_slot(const char* op_name, size_t slots) {
  fail(ErrorKind::Runtime, "[", op_name, "] internal error: more parallel chunks hold a per-worker scratch buffer at "
       "once than its ", slots, " slots (OpTraits::scratch declares too few)");
}

ScratchArena& task_scratch(const Task& task) {
  if (!task.scratch) [[unlikely]]
    fail(ErrorKind::Runtime, "[", task.op->name, "] internal error: the kernel takes scratch that its op does not "
         "declare for this Task (OpTraits::scratch)");
  return *task.scratch;
}

}  // namespace dg
