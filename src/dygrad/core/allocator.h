// The allocator interface of a device and the memory categories every buffer is tagged with. core/ owns the
// interface so that Storage depends on nothing above it; the runtime's caching allocator implements it and
// registers itself for the CPU (runtime/allocator.h), a backend registers its device's (docs/memory.md).
#pragma once
#include <cstddef>
#include <atomic>
#include <cstdint>

#include "dygrad/core/device.h"

namespace dg {

// What a block holds, for the memory breakdown. The current category is a thread-local set by scopes
// (MemoryCategoryScope); op outputs default to Activation. Scratch: a running Task's kernel scratch, which the
// stream takes for the Task and frees after it (runtime/scratch.h), never a tensor's. Communication: buffers that
// exist for a collective (fully_shard's gathered parameters and padded reduce-scatter inputs, a backend's staging).
enum class MemoryCategory : uint8_t {
  Activation, Parameter, Gradient, OptimizerState, Temporary, Other, Scratch, Communication
};
inline constexpr int kNumMemoryCategories = 8;
const char* memory_category_name(MemoryCategory c);

MemoryCategory current_memory_category();
class MemoryCategoryScope {
 public:
  explicit MemoryCategoryScope(MemoryCategory c);
  ~MemoryCategoryScope();
  MemoryCategoryScope(const MemoryCategoryScope&) = delete;
  MemoryCategoryScope& operator=(const MemoryCategoryScope&) = delete;

 private:
  MemoryCategory saved_;
};

// A buffer handed out by a device allocator.
struct MemoryBlock {
  void* ptr = nullptr;
  size_t bin_bytes = 0;    // the bytes the block actually takes (the request rounded up)
  void* handle = nullptr;  // the allocator's own record of the block
  // Stream-ordered reuse (docs/memory.md): the memory may still be used by the stream's Tasks up to this
  // sequence number (0: by none). Only Tasks enqueued later may touch it before they have run.
  uint64_t in_use_until = 0;
  // An event (core/device.h) of another device's stream that used the block (a copy between devices read or wrote
  // it): the allocator reuses the block only after it has run, as CUDA's caching allocator does with the events of
  // record_stream (docs/devices.md, "Memory and streams"). 0: no other stream used it. Set by Storage at the free.
  uint64_t foreign_use = 0;
};

class Allocator {
 public:
  // `stream_ordered`: the memory is first touched by Tasks enqueued after this call, so a block still in use
  // by earlier Tasks may be handed out; false: only memory no queued Task uses (a buffer written at once by the
  // host or by a thread outside the stream).
  virtual MemoryBlock allocate(size_t nbytes, MemoryCategory category, bool stream_ordered = true) = 0;
  // `in_use_until`: the last Task (sequence number) that may still read or write the block; 0: none.
  virtual void free(MemoryBlock block, size_t nbytes, MemoryCategory category, uint64_t in_use_until = 0) = 0;
  // Moves a live block's bytes between categories (a tensor becomes a parameter, a gradient...).
  virtual void retag(const MemoryBlock& block, size_t nbytes, MemoryCategory from, MemoryCategory to) = 0;
  // Describes a live block ("[4, 128] float32") for the out-of-memory report and snapshots. Called by
  // Tensor::empty only while allocation_tracking() is on.
  virtual void annotate(const MemoryBlock& block, const char* description) { (void)block, (void)description; }

 protected:
  ~Allocator() = default;  // allocators live for the whole process
};

// The allocator of a device type: set once by its backend at load time. `allocator_for` raises when the
// device's backend is not built ("[alloc] no allocator for device cuda: ...").
void register_allocator(Device::Type type, Allocator* allocator);
// One device's allocator (a test device's, each with its own memory), ahead of its type's.
void register_device_allocator(Device device, Allocator* allocator);
Allocator& allocator_for(Device device);
// Page-locked ("pinned") host memory, torch's pin_memory: CPU memory that a device's copies read and write directly,
// without staging through a buffer of their own (docs/devices.md, "Pinned host memory"). A device backend provides
// the pool when it is brought up (the first one to do so keeps it); null while none has. Pinned tensors are CPU
// tensors whose storage came from this pool (Storage::is_pinned).
void register_pinned_allocator(Allocator* allocator);
Allocator* pinned_allocator();
namespace detail {
extern Allocator* g_cpu_allocator;  // allocators[CPU], read on the hot path without a call
}
// The CPU's, once registered, without a call; anything else through allocator_for.
inline Allocator& allocator_of(Device device) {
  if (device.type == Device::Type::CPU && detail::g_cpu_allocator) [[likely]] return *detail::g_cpu_allocator;
  return allocator_for(device);
}
// True while only the CPU has an allocator: every tensor is then a CPU tensor, and enqueue need not look at the
// operands' devices (runtime/op_def.h, resolve_kernel).
extern std::atomic<bool> g_only_cpu;  // defined (and cleared) in core/allocator.cpp; read through cpu_only()
inline bool cpu_only() { return g_only_cpu.load(std::memory_order_relaxed); }

// True while an allocator records who made each block (a memory limit is set, or history is recorded):
// Tensor::empty then describes its buffer (shape, dtype). Off, it costs one relaxed load per allocation.
bool allocation_tracking();
void set_allocation_tracking(bool on);

}  // namespace dg
