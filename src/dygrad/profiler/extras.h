// What a session records beside ProfileData (kept out of events.h, which every binding includes): the module
// scope of every op (per-module costs, docs/profiler.md "Module scopes") and the lifetime of every buffer
// (the leak finder and per-module memory, "Storage lifetimes"). Read after stop() with extras_of().
#pragma once
#include <cstdint>
#include <vector>

#include "dygrad/core/allocator.h"
#include "dygrad/runtime/module_scope.h"
#include "dygrad/runtime/op_def.h"

namespace dg::profiler {

class Profiler;

// The calling thread's module scope (runtime/module_scope.h: set by nn.Module.__call__ while a profiler records
// with_modules, and by the autograd engine around each node, with the backward bit). A session turns node
// tagging on while it records.
constexpr uint32_t kBackwardScope = dg::module_scope::kBackward;
inline uint32_t module_scope() { return dg::module_scope::current(); }
inline uint32_t set_module_scope(uint32_t scope) { return dg::module_scope::set(scope); }

enum class StorageEventKind : uint8_t { Allocate, Free, Retag };
struct StorageEvent {
  int64_t ts_ns = 0;
  StorageEventKind kind = StorageEventKind::Allocate;
  uint64_t id = 0;          // the Storage's address (reused after a free)
  int64_t nbytes = 0;
  MemoryCategory category = MemoryCategory::Activation;  // Retag: the new one
  int thread = -1;
  uint32_t module = 0;      // the thread's module scope
  CallSite site;            // Allocate: the Python line that made it (the call site of the op)
};

struct SessionExtras {
  std::vector<std::pair<uint64_t, uint32_t>> op_modules;  // (seq, module scope) of ops issued in a scope
  std::vector<StorageEvent> storage;                       // profile_memory only; by time
};
// The extras of a stopped session (empty before stop() or for a profiler that never ran).
const SessionExtras& extras_of(const Profiler& profiler);

}  // namespace dg::profiler
