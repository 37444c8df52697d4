// Meta evaluation: run a program for its shapes and memory only (dygrad.memory.estimate, docs/memory.md
// "Dry run"). Between begin() and end(), buffers are address space only (core/storage_hooks.h) and enqueue
// runs no kernel; each Task's operands stay referenced as the stream would keep them: until the host has
// allocated more than the in-flight allocation window since the Task was enqueued, or the queue is full
// (the host running as far ahead as the stream lets it), or a sync point.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "dygrad/core/storage_hooks.h"
#include "dygrad/core/tensor.h"
#include "dygrad/runtime/attrs.h"
#include "dygrad/runtime/op_def.h"

namespace dg::meta {
// Raises when meta evaluation is already active. inflight_limit 0: Tasks release their operands at once.
void begin(uint64_t inflight_limit, size_t capacity);
Stats end();
void drain();  // a sync point: every emulated Task has run and dropped its operands
// ops/dispatch.cpp's enqueue, while active(): records the Task without running it.
void enqueue(const OpDef& op, std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Attrs& attrs);
}  // namespace dg::meta
