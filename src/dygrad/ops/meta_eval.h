// Meta evaluation: run a program for its shapes and memory only (dygrad.memory.estimate, docs/memory.md
// "Dry run"). Between begin() and end(), buffers are address space only (core/storage_hooks.h) and enqueue
// runs no kernel. A buffer is freed when the host drops it, as the stream's allocator frees it (stream-ordered
// reuse, docs/memory.md: a queued Task's hold on its operands keeps no memory), so no queue is emulated.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "dygrad/core/storage_hooks.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::meta {
// Raises when meta evaluation is already active. Between the two, a process op sink (runtime/op_sink.h) consumes
// every op, recording its Task without running it.
void begin();
Stats end();
// What that sink does with one op.
void enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs);
}  // namespace dg::meta
