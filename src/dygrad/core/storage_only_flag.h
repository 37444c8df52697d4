// The flag behind storage_only_dtype_seen() (core/tensor.h), for enqueue to read inline: one relaxed load per op,
// no call (docs/dtypes.md, "Storage-only dtypes").
#pragma once
#include <atomic>

namespace dg::detail {
extern std::atomic<bool> g_storage_only_dtype_seen;  // set by TensorImpl's constructor, never cleared (core/tensor.cpp)
inline bool storage_only_dtype_seen_inline() { return g_storage_only_dtype_seen.load(std::memory_order_relaxed); }
}  // namespace dg::detail
