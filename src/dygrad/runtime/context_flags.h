// The flag behind inline_small_ops_enabled() (runtime/context.h), for the stream's submit to read inline: one relaxed
// load per op, no call (docs/stream.md, inline execution).
#pragma once
#include <atomic>

namespace dg::detail {
extern std::atomic<bool> g_inline_small_ops;  // defined and set in runtime/context.cpp
inline bool inline_small_ops_enabled_inline() { return g_inline_small_ops.load(std::memory_order_relaxed); }
}  // namespace dg::detail
