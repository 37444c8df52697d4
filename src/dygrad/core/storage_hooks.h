// Two optional hooks on Storage's allocate / free / retag, both off by default (one relaxed load and a branch
// per allocation when off): the profiler's storage observer (the leak finder and per-module memory follow
// every buffer's lifetime, docs/profiler.md "Storage lifetimes"), and the meta evaluation that
// dygrad.memory.estimate runs a training step under (docs/memory.md, "Dry run"). Kept out of storage.h so
// that only the files that use them depend on them.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "dygrad/core/allocator.h"

namespace dg {

class Storage;

// --- the profiler's storage observer ---------------------------------------------------------------------------
// Called on the thread that allocated, freed or retagged a buffer of the allocator (external memory is not
// reported). `id` identifies the Storage while it lives; an id may be reused after its free.
struct StorageObserver {
  virtual ~StorageObserver() = default;
  virtual void on_storage_allocate(const void* id, size_t nbytes, MemoryCategory category) = 0;
  virtual void on_storage_free(const void* id, size_t nbytes, MemoryCategory category) = 0;
  virtual void on_storage_retag(const void* id, size_t nbytes, MemoryCategory to) = 0;
};
void set_storage_observer(StorageObserver* observer);
StorageObserver* storage_observer();

// --- the JIT's storage life log ---------------------------------------------------------------------------------
// While one is set (process-wide, one at a time: a capture or a compiled segment of dygrad.jit, docs/jit.md),
// every Storage made (allocated or wrapping external memory) and every Storage destroyed is reported, on the
// thread that made or destroyed it. It tells buffers made inside a captured function from those that existed
// before it (a pointer may be reused once its Storage is gone: the log sees the death first).
class Storage;
struct StorageLifeLog {
  virtual ~StorageLifeLog() = default;
  virtual void on_storage_born(const Storage* s, bool external) = 0;
  virtual void on_storage_died(const Storage* s) = 0;
};
// Raises unless no log is set (or `log` is null: clears it).
void set_storage_life_log(StorageLifeLog* log);
StorageLifeLog* storage_life_log();

// Holders of tensor references outside the stream (the communication thread's finished operations, which a host
// thread releases later) register how to drop them now; the JIT's capture runs them before it checks which buffers
// made inside a function are still referenced. Hooks are added once, for the process.
using ReleaseHook = void (*)();
void add_release_hook(ReleaseHook hook);
void run_release_hooks();

// --- meta evaluation -----------------------------------------------------------------------------------------
// While active (process-wide; the thread that began it must be the only one issuing ops), Storage::allocate
// only reserves address space (an anonymous mapping: no page is touched, so no memory is used) and counts the
// bytes here as the caching allocator would count them. ops/meta_eval.h begins and ends the mode and makes
// enqueue run no kernel while keeping each Task's operands alive as the stream would.
namespace meta {
struct Stats {
  int64_t allocated = 0;  // live meta bytes (requested bytes, as the allocator's `allocated`)
  int64_t peak = 0;       // the highest `allocated` since set_active(true) or reset_peak()
  std::array<int64_t, kNumMemoryCategories> by_category{};
  std::array<int64_t, kNumMemoryCategories> at_peak{};  // by_category at the peak
  int64_t max_scratch = 0;        // the largest kernel scratch (OpTraits::scratch) one Task declared
  // max over Tasks of allocated + that Task's scratch: now `peak` itself, which counts each Task's scratch as the
  // allocator does (taken for the span of its kernel, category Scratch); kept for the profiler's report.
  int64_t peak_with_scratch = 0;
  int64_t tasks = 0;              // Tasks that would have run
  int64_t allocations = 0;
  int64_t allocated_total = 0;    // bytes allocated since set_active(true) (never decreases)
};
bool active();
void set_active(bool on);  // on: resets the statistics
Stats current();
void reset_peak();
void note_task(int64_t scratch_bytes);  // ops/dispatch.cpp, for every Task that would have run

// Whether `s` was made under meta evaluation: the storage of a meta tensor
// (torch.device("meta"), docs/memory.md "Meta tensors"), 0-byte ones included.
bool is_meta_storage(const Storage* s);

constexpr size_t kMetaBit = size_t(1) << (sizeof(size_t) * 8 - 1);
inline bool is_meta(const MemoryBlock& b) { return (b.bin_bytes & kMetaBit) != 0; }
MemoryBlock allocate(size_t nbytes, MemoryCategory category);
void free(const MemoryBlock& block, size_t nbytes, MemoryCategory category);
void retag(size_t nbytes, MemoryCategory from, MemoryCategory to);
}  // namespace meta

}  // namespace dg
