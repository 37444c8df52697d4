// The CPU caching allocator: a block pool over a segment source. Segments obtained from the source (the host's: mmap,
// runtime/segment_source.h) are split into blocks; a request is served by the best-fitting cached block of its pool
// (small: <= 1 MiB; large: the rest), whose remainder stays cached, and a freed block merges with its free neighbours.
// By default a pool's segment is *expandable* (torch's expandable_segments): one reserved virtual range whose pages are
// mapped on demand, so that all free space of a pool can merge, and the pages of free blocks are unmapped (given back
// to the system) when `reserved` exceeds `allocated` by more than a margin at a miss. `reserved` counts the mapped
// bytes. Cached blocks are handed to any later Task of the same stream (in-order execution makes reuse safe).
// Statistics are exact: `allocated` is the sum of the requested bytes of live blocks, `reserved` the bytes of the
// segments. An optional memory limit makes an allocation that would reserve more raise OutOfMemory, and history
// recording keeps a trace of every action for snapshots (PyTorch's memory viewer schema). See docs/memory.md.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "dygrad/core/allocator.h"
#include "dygrad/runtime/op_def.h"

namespace dg {

class SegmentSource;

struct MemoryStats {
  int64_t allocated = 0;       // requested bytes of live blocks
  int64_t reserved = 0;        // bytes of the segments held from the system: live blocks plus the cache
  int64_t peak_allocated = 0;  // since the last reset_peak()
  int64_t peak_reserved = 0;
  int64_t reserved_at_peak = 0;  // `reserved` when `peak_allocated` was reached (fragmentation at the peak)
  int64_t active = 0;            // block bytes of live blocks (requests rounded up)
  int64_t inactive_split = 0;    // cached bytes in segments that also hold live blocks (empty_cache keeps them)
  int64_t segments = 0;          // segments held
  int64_t num_allocs = 0;        // allocate() calls since start
  int64_t num_frees = 0;
  int64_t cache_hits = 0;        // allocations served from cached blocks
  int64_t num_segment_allocs = 0;
  int64_t num_segment_frees = 0;
  int64_t num_ooms = 0;          // allocations that raised OutOfMemory
  int64_t mapped_total = 0;      // bytes mapped into expandable segments since start (pages that fault when touched)
  int64_t unmapped_total = 0;    // bytes of free blocks unmapped since start (given back to the system)
  int64_t limit = 0;             // the memory limit (0: none)
  std::array<int64_t, kNumMemoryCategories> allocated_by_category{};
  std::array<int64_t, kNumMemoryCategories> peak_by_category{};
};

// What changed the statistics, for an AllocatorObserver.
enum class MemoryEventKind : uint8_t { Allocate, Free, Retag, ReleaseCache };

// The profiler's hook (null when off: one branch per allocation). Called on the thread that changed the
// statistics, under the allocator's lock, after the change: it must not call back into the allocator.
// For Retag, `category` is the new category and `nbytes` the bytes moved; for ReleaseCache, nbytes is 0.
struct AllocatorObserver {
  virtual ~AllocatorObserver() = default;
  virtual void on_memory_event(MemoryEventKind kind, int64_t nbytes, MemoryCategory category,
                               const MemoryStats& stats) = 0;
};

// --- history and snapshots (torch.cuda.memory._record_memory_history / _snapshot, for the CPU) ---------------
// A stack frame; strings live for the process (the bindings intern Python's).
struct AllocFrame {
  const char* filename = "";
  const char* name = "";
  uint32_t line = 0;
};
// Where an action happened: the Python frames (innermost first) and the C++ return addresses (innermost
// first; symbolised only when a snapshot is taken).
struct AllocContext {
  std::vector<AllocFrame> python;
  std::vector<void*> cpp;
};
using AllocContextPtr = std::shared_ptr<const AllocContext>;
// Fills the Python frames of the calling thread (innermost first), or nothing when it cannot (no GIL).
using PythonFrameProvider = void (*)(std::vector<AllocFrame>& out);

enum class TraceAction : uint8_t {
  Alloc, FreeRequested, FreeCompleted, SegmentAlloc, SegmentFree, Oom, Snapshot,
  SegmentMap, SegmentUnmap  // pages mapped into / unmapped from an expandable segment (torch's names)
};
const char* trace_action_name(TraceAction a);  // torch's names: "alloc", "free_requested", ...

struct TraceEntry {
  TraceAction action = TraceAction::Alloc;
  uintptr_t addr = 0;
  size_t size = 0;            // requested bytes for alloc/free; segment (or mapped range) bytes for segment_*;
                              // request for oom
  int64_t time_ns = 0;        // profiler::now_ns() (steady clock)
  MemoryCategory category = MemoryCategory::Other;
  int64_t allocated = 0;      // `allocated` after the action (for the timeline)
  AllocContextPtr context;    // null when not recorded
};

struct HistoryOptions {
  bool enabled = false;   // torch's enabled=None: off
  bool trace = true;      // enabled="all" (a trace of actions) vs "state" (only the live blocks' stacks)
  bool alloc_stacks = true;  // context "alloc"/"all"/"state": the stack of each allocation
  bool free_stacks = true;   // context "all": also the stack of each free
  bool cpp_stacks = true;    // stacks="all": also C++ frames ("python": only Python's)
  size_t max_entries = SIZE_MAX;
};

struct SnapshotBlock {
  uintptr_t address = 0;
  size_t size = 0;
  size_t requested = 0;  // 0 for a cached block
  bool live = false;
  MemoryCategory category = MemoryCategory::Other;
  std::string description;  // "[4, 128] float32" when tracked
  CallSite site;            // the Python line that made it, when tracked
  AllocContextPtr context;
};
// A segment, or for an expandable segment one contiguous mapped range of it (as torch's snapshot reports them).
struct SnapshotSegment {
  uintptr_t address = 0;
  size_t size = 0;
  bool small = false;
  bool expandable = false;
  std::vector<SnapshotBlock> blocks;  // in address order, covering the segment
};
struct MemorySnapshot {
  std::vector<SnapshotSegment> segments;
  std::vector<TraceEntry> trace;
  MemoryStats stats;
};

class CachingAllocator final : public Allocator {
 public:
  // The CPU's; registered as Device::Type::CPU's allocator (core/allocator.h) when the library loads.
  static CachingAllocator& cpu();
  // Another device's block pool over its own segment source (the test device's arena; docs/devices.md), registered
  // as that device's allocator. Lives for the process.
  static CachingAllocator& create(Device device, std::unique_ptr<SegmentSource> source);
  // A device's block pool (the CPU's, or one create() made); raises naming the device when it has none.
  static CachingAllocator& of(Device device);
  // The pinned host pool (core/allocator.h, docs/devices.md "Pinned host memory"): made by the first device backend
  // brought up, over the page-locked memory its source gives (cudaHostAlloc for CUDA; the test device's own host
  // mappings); a second call returns the first pool. Its blocks are CPU memory, ordered by the CPU's stream, and reused
  // only after the device copies that used them (the pending list). Segments are never expandable (page-locked memory
  // is pinned whole). `pinned()`: null while none exists.
  static CachingAllocator& create_pinned(std::unique_ptr<SegmentSource> source);
  static CachingAllocator* pinned();
  Device device() const { return device_; }

  using Block = MemoryBlock;
  Block allocate(size_t nbytes, MemoryCategory category, bool stream_ordered = true) override;
  void free(Block block, size_t nbytes, MemoryCategory category, uint64_t in_use_until = 0) override;
  void retag(const Block& block, size_t nbytes, MemoryCategory from, MemoryCategory to) override;
  void annotate(const Block& block, const char* description) override;

  MemoryStats stats() const;
  // Bytes handed out by allocate() since start (never decreases; Tasks' scratch not counted): the stream bounds
  // how many of them the host may allocate while the device lags (docs/memory.md, "In-flight allocation window").
  uint64_t bytes_allocated_total() const { return total_allocated_.load(std::memory_order_relaxed); }
  void reset_peak();
  // Returns every entirely free segment to the system (munmap), after waiting for the stream to finish the Tasks
  // that still use one (`wait_for_stream`; without it such segments are kept).
  void empty_cache(bool wait_for_stream = true);

  // The size a request takes: 64-byte multiples up to 512 bytes, then 512-byte multiples.
  static size_t round_size(size_t nbytes);
  // Thresholds (docs/memory.md, "Pools, segments and splitting").
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kSmallRequest = size_t{1} << 20;   // requests up to this are small
  static constexpr size_t kSmallSegment = size_t{2} << 20;   // a small segment
  static constexpr size_t kMediumRequest = size_t{10} << 20; // large requests below this share...
  static constexpr size_t kMediumSegment = size_t{20} << 20; // ...20 MiB segments
  static constexpr size_t kLargeRounding = size_t{2} << 20;  // larger ones get their own, in 2 MiB steps
  static constexpr size_t kMinSmallRemainder = 512;          // a split leaves at least this in a small block
  static constexpr size_t kMinLargeRemainder = size_t{1} << 20;  // ... and in a large one
  static size_t segment_size(size_t rounded);

  // Expandable segments (docs/memory.md, "Expandable segments"): on by default (DYGRAD_ALLOC_EXPANDABLE_SEGMENTS=0
  // at load: off). Changing it applies to segments made afterwards; both kinds may coexist.
  void set_expandable_segments(bool on);
  bool expandable_segments() const;
  // At a miss, if `reserved - allocated` would exceed max(fraction * allocated, kMinReleaseMargin), idle free
  // blocks of expandable segments are unmapped, the largest first, down to half that margin (fraction < 0: never;
  // DYGRAD_ALLOC_RELEASE_FRACTION at load).
  void set_release_fraction(double fraction);
  double release_fraction() const;
  static constexpr double kReleaseFraction = 0.03;
  static constexpr size_t kMinReleaseMargin = size_t{8} << 20;
  static constexpr size_t kPageSize = 4096;  // mapping granularity of expandable segments

  // The memory limit on `reserved` (0: none). An allocation that would reserve more first returns the free
  // segments, then raises OutOfMemory listing the largest live tensors. Read from DYGRAD_MEMORY_LIMIT at load.
  void set_memory_limit(size_t bytes);
  size_t memory_limit() const;
  // "2GiB", "512MiB", "1.5G", "1000000": bytes (binary units; KB/MB/GB are decimal); raises on a bad string.
  static size_t parse_size(const std::string& text);

  // History for snapshots (docs/memory.md, "Snapshots"): off by default.
  void record_history(const HistoryOptions& options);
  HistoryOptions history_options() const;
  MemorySnapshot snapshot() const;
  static void set_python_frame_provider(PythonFrameProvider provider);
  // Symbolises a C++ return address (dladdr + demangling): {shared object, function}.
  static AllocFrame symbolize(void* address);

  // Installs the hook; once this returns, no call to the previous observer is in flight.
  void set_observer(AllocatorObserver* observer);
  AllocatorObserver* observer() const { return observer_.load(std::memory_order_acquire); }

 private:
  struct Segment;
  struct Node;
  struct BySize {
    bool operator()(const Node* a, const Node* b) const;
  };
  struct ByAddress {
    bool operator()(const Node* a, const Node* b) const;
  };
  // A pool's cached blocks: the free ones by (size, address), lower_bound being the best fit, and the unmapped
  // ones of its expandable segments by address.
  struct Pool {
    std::set<Node*, BySize> free;
    std::set<Node*, ByAddress> unmapped;
  };
  struct Miss;  // a request that no cached block serves, through the steps of allocate_on_miss_locked
  using Lock = std::unique_lock<std::mutex>;
  using Released = std::vector<std::pair<void*, size_t>>;  // segments of the old kind, unmapped outside the lock

  CachingAllocator(Device device, std::unique_ptr<SegmentSource> source);
  ~CachingAllocator();
  // Tasks the device's stream has run; a block whose in_use_until is at most this is idle. Asked only about blocks
  // freed while Tasks still used them, so a program that never enqueues never starts the stream here.
  uint64_t tasks_run() const;
  bool busy(uint64_t in_use_until) const { return in_use_until != 0 && in_use_until > tasks_run(); }
  void wait_until_run(uint64_t seq) const;
  // Blocks freed while another device's stream may still use them (MemoryBlock::foreign_use), held out of the pools
  // until its event has run; process_pending_locked frees those whose event has.
  struct Pending {
    Block block;
    size_t nbytes;
    MemoryCategory category;
    uint64_t in_use_until;
  };
  [[gnu::always_inline]] inline void free_locked(Block block, size_t nbytes, MemoryCategory category,
                                                 uint64_t in_use_until, AllocContextPtr& context);
  void process_pending_locked();
  Pool& pool(bool small) { return small ? small_pool_ : large_pool_; }
  const Pool& pool(bool small) const { return small ? small_pool_ : large_pool_; }

  // allocate's steps on a miss (docs/memory.md, "The allocator's structure").
  Node* allocate_on_miss_locked(Miss& miss, Lock& lock);
  Node* map_pages_locked(Miss& miss, Lock& lock);        // expandable segments
  Node* map_new_segment_locked(Miss& miss, Lock& lock);  // a segment of the old kind
  void release_above_margin_locked(Miss& miss);
  Node* make_room_locked(Miss& miss, Lock& lock);        // under the memory limit
  bool over_limit_locked(const Miss& miss) const;
  void release_cache_locked(Miss& miss);
  Node* wait_for_busy_free_blocks_locked(Miss& miss, Lock& lock);
  [[noreturn]] void raise_out_of_memory_locked(Miss& miss, Lock& lock);
  Node* add_segment_locked(void* base, size_t bytes, const Miss& miss);
  void count_allocation_locked(Node* node, size_t nbytes, MemoryCategory category, AllocContextPtr&& context);

  // Returns entirely free segments to the system (all of them, or until `enough` bytes are released).
  void release_free_segments_locked(Released& to_unmap, size_t enough = SIZE_MAX);
  void unmap_segments(const Released& segments);  // without the lock
  Node* take_free_locked(size_t rounded, bool small, bool stream_ordered);
  // The free-block set of a node's pool; inserting and erasing keep free_whole_ (the releasable bytes).
  void insert_free(Node* node);
  void erase_free(Node* node);
  size_t releasable(const Node* node) const;
  // Expandable segments: where a request would be placed by mapping pages (an unmapped block, with the free
  // mapped blocks beside it), and the bytes that would map; null when no reserved range has room.
  struct Placement {
    Node* unmapped = nullptr;
    size_t cost = 0;
  };
  Placement place_expandable_locked(size_t rounded, bool small, bool stream_ordered) const;
  // Maps the placement's pages and returns the free block (merged with its free neighbours) that holds `rounded`;
  // null when the system refuses the pages.
  Node* map_placement_locked(const Placement& p, size_t rounded, bool stream_ordered);
  Segment* reserve_segment_locked(bool small, size_t at_least);
  // Unmaps the whole pages of an idle free block of an expandable segment (erased from its free set by the
  // caller; what is left of it is reinserted). Returns the bytes unmapped.
  size_t unmap_free_block_locked(Node* node);
  // Unmaps idle free blocks of expandable segments, the largest first, until `enough` bytes are unmapped.
  size_t release_expandable_locked(size_t enough = SIZE_MAX);
  // The largest in_use_until of the entirely free segments that a queued Task may still use (0: none).
  uint64_t busy_free_segments_locked() const;
  void split_locked(Node* node, size_t rounded, bool mapped_now = false);
  void record_locked(TraceAction action, uintptr_t addr, size_t size, MemoryCategory category,
                     AllocContextPtr context);
  std::string oom_message_locked(size_t nbytes, size_t needed) const;
  void update_tracking_locked();
  AllocContextPtr capture_context(bool for_free) const;

  const Device device_;
  const std::unique_ptr<SegmentSource> source_;
  mutable std::mutex mutex_;
  std::vector<Pending> pending_;
  Pool small_pool_, large_pool_;
  std::set<Segment*> segments_;  // every segment held (snapshot() lists them by base address)
  bool expandable_ = true;
  double release_fraction_ = kReleaseFraction;
  MemoryStats stats_;
  int64_t free_whole_ = 0;  // bytes of entirely free segments
  size_t limit_ = 0;
  HistoryOptions history_;
  std::deque<TraceEntry> trace_;
  std::atomic<bool> history_on_{false};
  std::atomic<uint64_t> total_allocated_{0};
  std::atomic<AllocatorObserver*> observer_{nullptr};
};

}  // namespace dg
