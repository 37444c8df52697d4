// Kernel scratch (docs/ops.md, "Scratch space is declared"): the op table's declaration (OpTraits::scratch,
// runtime/op_def.h) bounds a Task's temporary memory; the stream takes that many bytes from the caching allocator
// before the kernel runs and hands them to it as the Task's ScratchArena (Stream::run_task), and frees them after.
// A kernel takes its buffers from the arena, never from the heap. Here: the arena, the rounding that declarations
// and takes share, and the constants the CPU kernels cut their work by, so a declared bound and the kernel cannot
// drift apart. tests/cpp/test_scratch.cpp checks that kernels allocate nothing themselves and take at most what
// they declare.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "dygrad/core/dtype.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/thread_pool.h"

namespace dg {

// A reduction to a single output splits its elements into partials of this many, combined in order.
inline constexpr int64_t kFullReduceChunk = 16384;
// RMSNorm backward reduces grad_weight over row chunks of about this many elements (one partial row each).
inline constexpr int64_t kNormChunkElements = 32768;
// AdamW cuts its tensors into pieces of this many elements (one unit of pool work each).
inline constexpr int64_t kAdamWPiece = 16384;
// SGD cuts its tensors into pieces of this many elements.
inline constexpr int64_t kSgdPiece = 16384;
// grad_norm and clip_grads_with_norm cut their tensors into pieces of this many elements.
inline constexpr int64_t kGradNormPiece = 16384;
// Flash attention's query rows per task and tile, key rows per tile.
inline constexpr int64_t kAttentionQueryBlock = 64, kAttentionKeyBlock = 128;
// The forward's K^T of a batch-head has rows S + kAttentionKeyPad elements apart (off a power-of-two stride).
inline constexpr int64_t kAttentionKeyPad = 16;

// Index kernels (index, index_put, nonzero, cat's pieces) cut their work into parallel chunks of about this many
// elements.
inline constexpr int64_t kIndexWorkGrain = 32768;
// An upper bound of one piece of cat's copy plan (a StridedIteration and three counts; backend/cpu/index.cpp
// asserts it at compile time).
inline constexpr size_t kCatPieceBytes = 1024;

// Threads that hold a per-chunk buffer at once when `chunks` chunks (or parallel_for ranges) run on the
// intra-op pool: the pool's size, or fewer chunks.
inline size_t scratch_workers(int64_t chunks) {
  return static_cast<size_t>(std::clamp<int64_t>(chunks, 0, ThreadPool::instance().num_threads()));
}

// Bytes of one element of the type a kernel computes in (float32 for 16-bit floats).
inline size_t compute_itemsize(DType t) { return t == DType::Float64 ? 8 : 4; }

// --- what a declaration adds up: every take is rounded to whole 64-byte lines ---------------------------------
inline constexpr size_t kScratchAlignment = 64;
// The bytes one take of `count` elements of `itemsize` bytes uses (a count <= 0 uses none).
inline constexpr size_t scratch_bytes(int64_t count, size_t itemsize) {
  return count <= 0 ? 0 : (static_cast<size_t>(count) * itemsize + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}
template <typename T>
constexpr size_t scratch_bytes(int64_t count) { return scratch_bytes(count, sizeof(T)); }
// The bytes of ScratchArena::per_worker(count, chunks): one slot per thread that can hold one at once.
inline size_t per_worker_scratch_bytes(int64_t count, size_t itemsize, int64_t chunks) {
  return scratch_workers(chunks) * scratch_bytes(count, itemsize);
}
template <typename T>
size_t per_worker_scratch_bytes(int64_t count, int64_t chunks) { return per_worker_scratch_bytes(count, sizeof(T), chunks); }

// The internal errors of a take past the declaration ("[op] internal error: the kernel takes N bytes of scratch
// with U of its declared D taken already ...") and of more per-worker holders at once than slots.
[[noreturn]] void raise_scratch_overflow(const char* op_name, size_t declared, size_t used, size_t wanted);
[[noreturn]] void raise_no_free_scratch_slot(const char* op_name, size_t slots);

// Per-worker buffers of one kind (ScratchArena::per_worker): `slots` buffers of `count` elements; a parallel chunk
// holds one while it runs (acquire(), RAII). Free slots are a lock-free bitmask, so at most as many slots are held
// as chunks run at once: the pool's threads (runtime/thread_pool.h; nested calls run serially), which is what
// scratch_workers(chunks) counts.
template <typename T>
class ScratchSlots {
 public:
  static constexpr size_t kMaxSlots = 256;
  class Held {
   public:
    Held(ScratchSlots* owner, size_t index) : owner_(owner), index_(index) {}
    Held(Held&& other) noexcept : owner_(other.owner_), index_(other.index_) { other.owner_ = nullptr; }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    Held& operator=(Held&&) = delete;
    ~Held() {
      if (owner_) owner_->release(index_);
    }
    T* data() const { return owner_->base_ + index_ * owner_->stride_; }
    T& operator[](int64_t i) const { return data()[i]; }

   private:
    ScratchSlots* owner_;
    size_t index_;
  };

  ScratchSlots(const char* op_name, T* base, size_t stride, size_t slots)
      : op_name_(op_name), base_(base), stride_(stride), slots_(slots) {
    for (size_t w = 0; w < free_.size(); ++w) {
      const size_t first = w * 64;
      const size_t here = slots > first ? std::min<size_t>(slots - first, 64) : 0;
      free_[w].store(here == 64 ? ~uint64_t{0} : (uint64_t{1} << here) - 1, std::memory_order_relaxed);
    }
  }
  ScratchSlots(const ScratchSlots&) = delete;
  ScratchSlots& operator=(const ScratchSlots&) = delete;

  // A free slot, held until the returned object goes out of scope. More holders than slots at once is a bug of
  // the declaration (an internal error naming the op), never a shared buffer.
  Held acquire() {
    for (size_t w = 0; w < free_.size(); ++w) {
      uint64_t bits = free_[w].load(std::memory_order_relaxed);
      while (bits) {
        const uint64_t lowest = bits & (~bits + 1);
        if (free_[w].compare_exchange_weak(bits, bits & ~lowest, std::memory_order_acquire, std::memory_order_relaxed))
          return Held(this, w * 64 + static_cast<size_t>(__builtin_ctzll(lowest)));
      }
    }
    raise_no_free_scratch_slot(op_name_, slots_);
  }
  size_t slots() const { return slots_; }

 private:
  void release(size_t index) { free_[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_release); }
  const char* op_name_;
  T* base_;
  size_t stride_;  // elements between slots (a whole number of 64-byte lines)
  size_t slots_;
  std::array<std::atomic<uint64_t>, kMaxSlots / 64> free_;
};

// A Task's scratch: the block the stream took for it, handed out by bump allocation (each take rounded to 64
// bytes, as scratch_bytes counts it). Taken on the thread that runs the kernel (not inside parallel chunks: those
// use per_worker's slots). Taking more than the declaration raises an internal error naming the op and the bytes;
// nothing is ever written past the block. Memory comes uninitialised.
class ScratchArena {
 public:
  ScratchArena(const char* op_name, void* base, size_t capacity)
      : op_name_(op_name), base_(static_cast<char*>(base)), capacity_(capacity) {}
  ScratchArena(const ScratchArena&) = delete;
  ScratchArena& operator=(const ScratchArena&) = delete;

  template <typename T>
  T* take(int64_t count) {
    const size_t bytes = scratch_bytes<T>(count);
    if (bytes > capacity_ - used_) [[unlikely]] raise_scratch_overflow(op_name_, capacity_, used_, bytes);
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += bytes;
    high_water_ = std::max(high_water_, used_);
    return p;
  }
  // Buffers of `count` elements, one per thread that can hold one at once: scratch_workers(chunks) of them
  // (per_worker_scratch_bytes; at most kMaxSlots).
  template <typename T>
  ScratchSlots<T> per_worker(int64_t count, int64_t chunks) {
    const size_t slots = std::min(scratch_workers(chunks), ScratchSlots<T>::kMaxSlots);
    const size_t stride = scratch_bytes<T>(count) / sizeof(T);
    return ScratchSlots<T>(op_name_, take<T>(static_cast<int64_t>(slots * stride)), stride, slots);
  }
  // Takes after a mark are given back by rewind(mark): a kernel whose phases use different buffers declares the
  // larger phase, not their sum (a Rewind scope does it).
  size_t mark() const { return used_; }
  void rewind(size_t mark) { used_ = std::min(used_, mark); }
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t high_water() const { return high_water_; }  // the most bytes taken at once
  const char* op_name() const { return op_name_; }

 private:
  const char* op_name_;
  char* base_;
  size_t capacity_;
  size_t used_ = 0, high_water_ = 0;
};

// Gives back what the arena handed out in this scope when it ends.
class ScratchRewind {
 public:
  explicit ScratchRewind(ScratchArena& arena) : arena_(arena), mark_(arena.mark()) {}
  ~ScratchRewind() { arena_.rewind(mark_); }
  ScratchRewind(const ScratchRewind&) = delete;
  ScratchRewind& operator=(const ScratchRewind&) = delete;

 private:
  ScratchArena& arena_;
  size_t mark_;
};

// The running Task's arena, set by the stream when the op declares scratch (an empty one when it declares 0 bytes
// for this Task). Raises an internal error naming the op when the op declares no scratch at all.
ScratchArena& task_scratch(const Task& task);

}  // namespace dg
