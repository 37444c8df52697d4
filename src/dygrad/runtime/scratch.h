// What the op table's scratch declarations (OpTraits::scratch, runtime/op_def.h) need from the kernels: the
// constants the CPU kernels cut their work by, shared here so a declared bound and the kernel cannot drift
// apart, and how many pool threads hold a per-chunk buffer at once. tests/cpp/test_scratch.cpp checks every
// declaration against the bytes the kernel actually allocates.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "dygrad/core/dtype.h"
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

}  // namespace dg
