// Caching allocator implementation (see allocator.h and docs/memory.md).
#include "dygrad/runtime/allocator.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "dygrad/core/error.h"
#include "dygrad/runtime/segment_source.h"
#include "dygrad/runtime/stream.h"

namespace dg {

struct CachingAllocator::Segment {
  char* base = nullptr;
  size_t size = 0;
  bool small = false;
  // A reserved virtual range (docs/memory.md, "Expandable segments"): its blocks tile it, mapped or not, and
  // only the mapped bytes count as reserved. Otherwise the whole segment is mapped.
  bool expandable = false;
  Node* first = nullptr;  // the block at `base`; blocks are linked in address order
};

// A block: a piece of a segment, live (allocated) or cached. Free blocks are in their pool's set, ordered by
// (size, address): lower_bound finds the best fit.
struct CachingAllocator::Node {
  char* ptr = nullptr;
  size_t size = 0;
  Segment* segment = nullptr;
  Node* prev = nullptr;
  Node* next = nullptr;
  size_t requested = 0;
  bool allocated = false;
  bool mapped = true;  // false: an unmapped range of an expandable segment (in its pool's unmapped set)
  MemoryCategory category = MemoryCategory::Other;
  // Recorded only while allocation_tracking() is on (a limit or history).
  std::string description;
  CallSite site;
  AllocContextPtr context;
  uint64_t trace_index = UINT64_MAX;  // its alloc entry (g_trace_pushed numbering), so a retag can update it
  // A free block: the last Task that may still use its memory (0: none). Only a stream-ordered allocation may
  // take it before that Task has run; its pages stay mapped until then (docs/memory.md, "Stream-ordered reuse").
  uint64_t in_use_until = 0;

  // Cuts this block at `offset`: the rest becomes a new block after it (same segment, mapped alike, the same
  // in_use_until), which is returned. The caller keeps the pool's sets.
  Node* split_off(size_t offset) {
    Node* tail = new Node();
    tail->ptr = ptr + offset;
    tail->size = size - offset;
    tail->segment = segment;
    tail->mapped = mapped;
    tail->in_use_until = in_use_until;
    tail->prev = this;
    tail->next = next;
    if (next) next->prev = tail;
    next = tail;
    size = offset;
    return tail;
  }
  // Merges the next block into this one, which keeps the later in_use_until; the next block is deleted.
  void absorb_next() {
    Node* absorbed = next;
    size += absorbed->size;
    in_use_until = std::max(in_use_until, absorbed->in_use_until);
    next = absorbed->next;
    if (next) next->prev = this;
    delete absorbed;
  }
};

bool CachingAllocator::BySize::operator()(const Node* a, const Node* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}
bool CachingAllocator::ByAddress::operator()(const Node* a, const Node* b) const { return a->ptr < b->ptr; }

namespace {
std::atomic<PythonFrameProvider> g_frame_provider{nullptr};
std::atomic<bool> g_free_stacks{false}, g_cpp_stacks{false}, g_alloc_stacks{false};
// Trace entries ever recorded (under the allocator's mutex; the CPU allocator is the only instance): the
// kept ones are numbered [g_trace_pushed - trace_.size(), g_trace_pushed).
uint64_t g_trace_pushed = 0;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr size_t kPage = 4096;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

size_t round_down(size_t n, size_t m) { return n / m * m; }

std::string format_bytes(int64_t n) {
  char buf[64];
  const double v = static_cast<double>(n);
  if (n >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", v / (1 << 30));
  else if (n >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", v / (1 << 20));
  else if (n >= (int64_t{1} << 10)) std::snprintf(buf, sizeof buf, "%.2f KiB", v / (1 << 10));
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(n));
  return buf;
}
}  // namespace

const char* trace_action_name(TraceAction a) {
  switch (a) {
    case TraceAction::Alloc: return "alloc";
    case TraceAction::FreeRequested: return "free_requested";
    case TraceAction::FreeCompleted: return "free_completed";
    case TraceAction::SegmentAlloc: return "segment_alloc";
    case TraceAction::SegmentFree: return "segment_free";
    case TraceAction::Oom: return "oom";
    case TraceAction::Snapshot: return "snapshot";
    case TraceAction::SegmentMap: return "segment_map";
    case TraceAction::SegmentUnmap: return "segment_unmap";
  }
  return "?";
}

CachingAllocator& CachingAllocator::cpu() {
  // Never destroyed: tensors held in static objects may be freed after main returns.
  static CachingAllocator* instance = [] {
    auto* allocator = new CachingAllocator(Device::cpu(), std::make_unique<HostSegmentSource>());
    register_allocator(Device::Type::CPU, allocator);
    return allocator;
  }();
  return *instance;
}

namespace {
std::atomic<CachingAllocator*> g_device_pools[kMaxStreams] = {};
}

CachingAllocator& CachingAllocator::create(Device device, std::unique_ptr<SegmentSource> source) {
  DG_CHECK(!device.is_cpu() && device_index_valid(device), Runtime, "[alloc] cannot create a pool for ", device.str());
  auto* allocator = new CachingAllocator(device, std::move(source));
  g_device_pools[stream_id(device)].store(allocator, std::memory_order_release);
  register_device_allocator(device, allocator);
  return *allocator;
}

namespace {
std::mutex g_pinned_mutex;
std::atomic<CachingAllocator*> g_pinned_pool{nullptr};
}  // namespace

CachingAllocator& CachingAllocator::create_pinned(std::unique_ptr<SegmentSource> source) {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  if (CachingAllocator* existing = g_pinned_pool.load(std::memory_order_acquire)) return *existing;
  auto* allocator = new CachingAllocator(Device::cpu(), std::move(source));  // lives for the process
  allocator->expandable_ = false;
  g_pinned_pool.store(allocator, std::memory_order_release);
  register_pinned_allocator(allocator);
  return *allocator;
}

CachingAllocator* CachingAllocator::pinned() { return g_pinned_pool.load(std::memory_order_acquire); }

CachingAllocator& CachingAllocator::of(Device device) {
  if (device.is_cpu()) return cpu();
  CachingAllocator* a = device_index_valid(device) ? g_device_pools[stream_id(device)].load(std::memory_order_acquire)
                                                   : nullptr;
  DG_CHECK(a != nullptr, Runtime, "[alloc] device ", device.str(), " is not available");
  return *a;
}

uint64_t CachingAllocator::tasks_run() const {
  if (device_.type == Device::Type::CPU) [[likely]] return Stream::cpu().completed();
  Stream* s = Stream::by_id(stream_id(device_));
  return s ? s->completed() : 0;
}

void CachingAllocator::wait_until_run(uint64_t seq) const {
  if (Stream* s = Stream::by_id(stream_id(device_))) s->wait_until_run(seq);
}

namespace {
// Registers the CPU allocator when the library loads, before any Storage is made.
[[maybe_unused]] const bool cpu_allocator_registered = (CachingAllocator::cpu(), true);
}  // namespace

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<SegmentSource> source)
    : device_(device), source_(std::move(source)) {
  if (const char* env = std::getenv("DYGRAD_ALLOC_EXPANDABLE_SEGMENTS"); env && *env) expandable_ = std::atoi(env) != 0;
  if (const char* env = std::getenv("DYGRAD_ALLOC_RELEASE_FRACTION"); env && *env) release_fraction_ = std::atof(env);
  if (const char* env = std::getenv("DYGRAD_MEMORY_LIMIT"); env && *env) {
    try {
      set_memory_limit(parse_size(env));
    } catch (const Error& e) {  // at library load: nothing can catch it, say so and go on without a limit
      std::fprintf(stderr, "dygrad: ignoring DYGRAD_MEMORY_LIMIT: %s\n", e.what());
    }
  }
}

CachingAllocator::~CachingAllocator() {
  Released to_unmap;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    release_free_segments_locked(to_unmap);
  }
  unmap_segments(to_unmap);
}

void CachingAllocator::unmap_segments(const Released& segments) {
  for (const auto& [base, bytes] : segments) source_->unmap_segment(base, bytes);
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= 512) return round_up(std::max<size_t>(nbytes, 1), kAlignment);
  return round_up(nbytes, 512);
}

namespace {
// Measurement knobs (bench/memory_frag.py): DYGRAD_ALLOC_MEDIUM_SEGMENT (bytes; 0: a segment per request) and
// DYGRAD_ALLOC_LARGE_ROUNDING (bytes, a multiple of the page). Unset, the constants of allocator.h hold.
size_t env_size(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}
}  // namespace

size_t CachingAllocator::segment_size(size_t rounded) {
  static const size_t medium = env_size("DYGRAD_ALLOC_MEDIUM_SEGMENT", kMediumSegment);
  static const size_t rounding = std::max<size_t>(env_size("DYGRAD_ALLOC_LARGE_ROUNDING", kLargeRounding), kPage);
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMediumRequest && medium) return medium;
  return round_up(rounded, rounding);
}

size_t CachingAllocator::parse_size(const std::string& text) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(s, &end);
  DG_CHECK(end != s && errno == 0 && std::isfinite(value) && value >= 0, Value,
           "[set_memory_limit] expected a size such as \"2GiB\", \"512MiB\" or a byte count, got \"", text, "\"");
  std::string unit;
  for (const char* p = end; *p; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (!std::isspace(c)) unit += static_cast<char>(std::tolower(c));
  }
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  DG_CHECK(scale > 0, Value, "[set_memory_limit] unknown unit \"", unit, "\" in \"", text,
           "\" (expected B, KiB, MiB, GiB, TiB, K, M, G, T, KB, MB, GB or TB)");
  const double bytes = value * scale;
  DG_CHECK(bytes < 9.0e18, Value, "[set_memory_limit] size too large: \"", text, "\"");
  return static_cast<size_t>(bytes);
}

// --- the pools: best fit, splitting ----------------------------------------------------------------------------
CachingAllocator::Node* CachingAllocator::take_free_locked(size_t rounded, bool small, bool stream_ordered) {
  auto& free_blocks = pool(small).free;
  Node key;
  key.size = rounded;
  auto it = free_blocks.lower_bound(&key);
  if (!stream_ordered)  // the best fit that no queued Task still uses
    while (it != free_blocks.end() && busy((*it)->in_use_until)) ++it;
  if (it == free_blocks.end()) return nullptr;
  Node* node = *it;
  erase_free(node);
  return node;
}

size_t CachingAllocator::releasable(const Node* node) const {
  if (!node->segment->expandable) return !node->prev && !node->next ? node->size : 0;  // a whole free segment
  const auto begin = reinterpret_cast<uintptr_t>(node->ptr);
  const size_t first = round_up(begin, kPageSize), last = round_down(begin + node->size, kPageSize);
  return last > first ? last - first : 0;  // its whole pages
}

void CachingAllocator::insert_free(Node* node) {
  pool(node->segment->small).free.insert(node);
  free_whole_ += static_cast<int64_t>(releasable(node));
}

void CachingAllocator::erase_free(Node* node) {
  pool(node->segment->small).free.erase(node);
  free_whole_ -= static_cast<int64_t>(releasable(node));
}

void CachingAllocator::split_locked(Node* node, size_t rounded, bool mapped_now) {
  const size_t rest = node->size - rounded;
  const bool small = node->segment->small;
  // The tail stays inside the block when small; except the rest of a page just mapped, which is split off at
  // any size: the next pages mapped after it join it (docs/memory.md, "Expandable segments").
  if (rest < (small || mapped_now ? kMinSmallRemainder : kMinLargeRemainder)) return;
  insert_free(node->split_off(rounded));
}

// --- expandable segments ---------------------------------------------------------------------------------------
CachingAllocator::Segment* CachingAllocator::reserve_segment_locked(bool small, size_t at_least) {
  const SegmentSource::Range range = source_->reserve_range(at_least);
  if (!range.base) return nullptr;
  auto* segment = new Segment();
  segment->base = range.base;
  segment->size = range.size;
  segment->small = small;
  segment->expandable = true;
  auto* node = new Node();
  node->ptr = segment->base;
  node->size = range.size;
  node->segment = segment;
  node->mapped = false;
  segment->first = node;
  segments_.insert(segment);
  pool(small).unmapped.insert(node);
  return segment;
}

CachingAllocator::Placement CachingAllocator::place_expandable_locked(size_t rounded, bool small,
                                                                      bool stream_ordered) const {
  // For each unmapped block U, with the free mapped blocks F1 before and F2 after it: a block starting at F1 (or
  // U) maps the pages of U it covers. The placement that maps the fewest bytes wins; ties go to the lowest
  // address. (No mapped free block is large enough, or this would be a cache hit.)
  Placement best;
  auto usable = [&](const Node* n) {
    return n && !n->allocated && n->mapped && (stream_ordered || !busy(n->in_use_until));
  };
  for (Node* u : pool(small).unmapped) {
    const size_t f1 = usable(u->prev) ? u->prev->size : 0, f2 = usable(u->next) ? u->next->size : 0;
    size_t cost;
    if (f1 >= rounded) continue;  // a cache hit, which take_free_locked makes first: not reached
    if (f1 + u->size >= rounded) cost = std::min(round_up(rounded - f1, kPageSize), u->size);
    else if (f1 + u->size + f2 >= rounded) cost = u->size;
    else continue;
    if (!best.unmapped || cost < best.cost) best = {u, cost};
  }
  return best;
}

CachingAllocator::Node* CachingAllocator::map_placement_locked(const Placement& p, size_t rounded,
                                                               bool stream_ordered) {
  Node* m = p.unmapped;
  auto usable = [&](const Node* n) {
    return n && !n->allocated && n->mapped && (stream_ordered || !busy(n->in_use_until));
  };
  if (!source_->map_pages(m->ptr, p.cost)) return nullptr;
  // Segments (contiguous mapped ranges) before the map: the new range joins the mapped neighbours.
  const bool left = m->prev && m->prev->mapped, right = p.cost == m->size && m->next && m->next->mapped;
  stats_.segments += 1 - int64_t{left} - int64_t{right};
  stats_.reserved += static_cast<int64_t>(p.cost);
  stats_.mapped_total += static_cast<int64_t>(p.cost);
  if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  ++stats_.num_segment_allocs;
  record_locked(TraceAction::SegmentMap, reinterpret_cast<uintptr_t>(m->ptr), p.cost, MemoryCategory::Other, nullptr);
  // The mapped pages become a free block at the front of the unmapped one; the rest stays unmapped.
  auto& unmapped = pool(m->segment->small).unmapped;
  unmapped.erase(m);
  if (p.cost < m->size) unmapped.insert(m->split_off(p.cost));
  m->mapped = true;
  // Merged with the free neighbours it needs (F1 always when usable; F2 only when the block reaches into it).
  if (Node* prev = m->prev; usable(prev)) {
    erase_free(prev);
    prev->absorb_next();
    m = prev;
  }
  if (Node* next = m->next; m->size < rounded && usable(next)) {
    erase_free(next);
    m->absorb_next();
  }
  return m;
}

size_t CachingAllocator::unmap_free_block_locked(Node* node) {
  const auto begin = reinterpret_cast<uintptr_t>(node->ptr);
  const uintptr_t first = round_up(begin, kPageSize), last = round_down(begin + node->size, kPageSize);
  if (last <= first) {
    insert_free(node);
    return 0;
  }
  const size_t bytes = last - first;
  source_->unmap_pages(reinterpret_cast<void*>(first), bytes);
  // The partial pages at either end stay mapped free blocks (idle: no Task is remembered).
  node->in_use_until = 0;
  Node* head = nullptr;
  Node* tail = nullptr;
  if (first > begin) {
    head = node;
    node = head->split_off(first - begin);
  }
  if (node->size > bytes) tail = node->split_off(bytes);
  const bool left = node->prev && node->prev->mapped, right = node->next && node->next->mapped;
  stats_.segments += int64_t{left} + int64_t{right} - 1;
  stats_.reserved -= static_cast<int64_t>(bytes);
  stats_.unmapped_total += static_cast<int64_t>(bytes);
  ++stats_.num_segment_frees;
  record_locked(TraceAction::SegmentUnmap, first, bytes, MemoryCategory::Other, nullptr);
  node->mapped = false;
  // Merged with unmapped neighbours.
  auto& unmapped = pool(node->segment->small).unmapped;
  if (Node* prev = node->prev; prev && !prev->mapped) {
    unmapped.erase(prev);
    prev->absorb_next();
    node = prev;
  }
  if (Node* next = node->next; next && !next->mapped) {
    unmapped.erase(next);
    node->absorb_next();
  }
  unmapped.insert(node);
  if (head) insert_free(head);
  if (tail) insert_free(tail);
  return bytes;
}

size_t CachingAllocator::release_expandable_locked(size_t enough) {
  std::vector<Node*> candidates;
  for (const Pool* p : {&large_pool_, &small_pool_})
    for (Node* n : p->free)
      if (n->segment->expandable && !busy(n->in_use_until) && releasable(n)) candidates.push_back(n);
  std::sort(candidates.begin(), candidates.end(), [](const Node* a, const Node* b) {
    if (a->size != b->size) return a->size > b->size;
    return a->ptr < b->ptr;
  });
  size_t released = 0;
  for (Node* n : candidates) {
    if (released >= enough) break;
    erase_free(n);
    released += unmap_free_block_locked(n);
  }
  if (released)
    if (AllocatorObserver* obs = observer())
      obs->on_memory_event(MemoryEventKind::ReleaseCache, 0, MemoryCategory::Other, stats_);
  return released;
}

// --- trace entries and the out-of-memory report ----------------------------------------------------------------
AllocContextPtr CachingAllocator::capture_context(bool for_free) const {
  if (for_free ? !g_free_stacks.load(std::memory_order_relaxed) : !g_alloc_stacks.load(std::memory_order_relaxed))
    return nullptr;
  auto context = std::make_shared<AllocContext>();
  if (PythonFrameProvider provider = g_frame_provider.load(std::memory_order_acquire)) provider(context->python);
  if (g_cpp_stacks.load(std::memory_order_relaxed)) {
    void* frames[32];
    const int n = backtrace(frames, 32);
    constexpr int kSkip = 2;  // capture_context and allocate/free themselves
    if (n > kSkip) context->cpp.assign(frames + kSkip, frames + n);
  }
  return context;
}

void CachingAllocator::record_locked(TraceAction action, uintptr_t addr, size_t size, MemoryCategory category,
                                     AllocContextPtr context) {
  if (!history_on_.load(std::memory_order_relaxed) || !history_.trace) return;
  TraceEntry e;
  e.action = action;
  e.addr = addr;
  e.size = size;
  e.time_ns = steady_ns();
  e.category = category;
  e.allocated = stats_.allocated;
  e.context = std::move(context);
  trace_.push_back(std::move(e));
  ++g_trace_pushed;
  while (trace_.size() > history_.max_entries) trace_.pop_front();
}

std::string CachingAllocator::oom_message_locked(size_t nbytes, size_t needed) const {
  std::ostringstream m;
  m << "[alloc] out of memory: tried to allocate " << format_bytes(static_cast<int64_t>(nbytes)) << " (" << nbytes
    << " bytes)";
  if (limit_)
    m << "; the memory limit is " << format_bytes(static_cast<int64_t>(limit_)) << " (dg.set_memory_limit) and "
      << format_bytes(stats_.reserved) << " is reserved after returning the cached segments: "
      << format_bytes(static_cast<int64_t>(needed)) << " more would exceed it";
  else
    m << "; the system refused a segment of " << format_bytes(static_cast<int64_t>(needed));
  m << ". Allocated " << format_bytes(stats_.allocated) << " (";
  for (int c = 0; c < kNumMemoryCategories; ++c)
    m << (c ? ", " : "") << memory_category_name(static_cast<MemoryCategory>(c)) << " "
      << format_bytes(stats_.allocated_by_category[static_cast<size_t>(c)]);
  m << ").";
  std::vector<const Node*> live;
  for (const Segment* s : segments_)
    for (const Node* n = s->first; n; n = n->next)
      if (n->allocated) live.push_back(n);
  // The largest first; tensors alike (size, shape, category, line) are one row with a count.
  auto same = [](const Node* a, const Node* b) {
    return a->requested == b->requested && a->description == b->description && a->category == b->category &&
           a->site.file == b->site.file && a->site.line == b->site.line;
  };
  std::sort(live.begin(), live.end(), [](const Node* a, const Node* b) {
    if (a->requested != b->requested) return a->requested > b->requested;
    if (a->site.line != b->site.line) return a->site.line < b->site.line;
    return a->description < b->description;
  });
  size_t rows = 0;
  for (size_t i = 0; i < live.size() && rows < 10; ++rows) {
    size_t j = i + 1;
    while (j < live.size() && same(live[i], live[j])) ++j;
    const Node* n = live[i];
    if (rows == 0) m << "\nLargest live tensors:";
    m << "\n  " << format_bytes(static_cast<int64_t>(n->requested));
    if (j - i > 1) m << " x " << (j - i);
    m << "  " << (n->description.empty() ? "(no shape recorded)" : n->description) << "  "
      << memory_category_name(n->category) << "  ";
    if (n->site.file)
      m << n->site.file << ":" << n->site.line << " (" << (n->site.function ? n->site.function : "?") << ")";
    else
      m << "(created before tracking began, or from C++)";
    i = j;
  }
  m << "\nTo need less memory: recompute activations in the backward pass (dg.utils.checkpoint, "
       "Module.recompute()), or use a smaller micro-batch.";
  return m.str();
}

// --- allocate --------------------------------------------------------------------------------------------------
// A request that no cached block serves, and what its steps leave for the next.
struct CachingAllocator::Miss {
  Miss(size_t request, MemoryCategory tag, bool ordered, const AllocContextPtr& stack, bool expandable_segments)
      : nbytes(request), rounded(round_size(request)), small(request <= kSmallRequest), stream_ordered(ordered),
        expandable(expandable_segments), category(tag), context(stack) {}
  const size_t nbytes, rounded;
  const bool small, stream_ordered;
  const bool expandable;  // expandable_ when the miss began
  const MemoryCategory category;
  const AllocContextPtr& context;
  Placement placement;       // expandable: the pages to map (none: a new range must be reserved)
  size_t segment_bytes = 0;  // the old kind: the new segment's size
  Released to_unmap;         // segments of the old kind given back, unmapped outside the lock
  bool mapped_now = false;   // the block's end was just mapped (an expandable segment's pages)
  size_t needed = 0;         // on failure: the bytes that could not be had (the message names them)

  // The bytes this miss would add to `reserved`.
  size_t bytes_to_map() const {
    if (!expandable) return segment_bytes;
    return placement.unmapped ? placement.cost : round_up(rounded, kPageSize);
  }
  Node* fail(size_t bytes) {
    needed = bytes;
    return nullptr;
  }
};

CachingAllocator::Block CachingAllocator::allocate(size_t nbytes, MemoryCategory category, bool stream_ordered) {
  Block block;
  if (nbytes == 0) return block;
  DG_CHECK(nbytes < (size_t{1} << 50), Runtime, "[alloc] cannot allocate ", nbytes, " bytes");
  const size_t rounded = round_size(nbytes);
  AllocContextPtr context;
  if (history_on_.load(std::memory_order_relaxed)) [[unlikely]]
    context = capture_context(false);  // outside the lock: it walks the Python frames
  Lock lock(mutex_);
  if (!pending_.empty()) [[unlikely]] process_pending_locked();
  Node* node = take_free_locked(rounded, nbytes <= kSmallRequest, stream_ordered);
  bool mapped_now = false;
  if (node) {
    ++stats_.cache_hits;
  } else {
    Miss miss(nbytes, category, stream_ordered, context, expandable_);
    node = allocate_on_miss_locked(miss, lock);
    mapped_now = miss.mapped_now;
  }
  split_locked(node, rounded, mapped_now);
  node->allocated = true;
  node->requested = nbytes;
  node->category = category;
  if (allocation_tracking()) [[unlikely]] {
    node->site = current_call_site();
    node->context = context;
  }
  count_allocation_locked(node, nbytes, category, std::move(context));
  block.ptr = node->ptr;
  block.bin_bytes = node->size;
  block.handle = node;
  // A block reused while queued Tasks still use it keeps that Task's number while it is live: its next free
  // must not forget it (an owner that no Task ever used frees it with in_use_until 0).
  if (busy(node->in_use_until)) block.in_use_until = node->in_use_until;
  else node->in_use_until = 0;
  return block;
}

// The statistics, the trace's alloc entry and the observer of a block handed out.
void CachingAllocator::count_allocation_locked(Node* node, size_t nbytes, MemoryCategory category,
                                               AllocContextPtr&& context) {
  ++stats_.num_allocs;
  // A Task's scratch, given back stream-ordered as soon as the Task is enqueued, is not the host running ahead
  // of the device (the in-flight allocation window).
  if (category != MemoryCategory::Scratch) total_allocated_.fetch_add(nbytes, std::memory_order_relaxed);
  stats_.active += static_cast<int64_t>(node->size);
  stats_.allocated += static_cast<int64_t>(nbytes);
  const auto c = static_cast<int>(category);
  stats_.allocated_by_category[c] += static_cast<int64_t>(nbytes);
  if (stats_.allocated_by_category[c] > stats_.peak_by_category[c])
    stats_.peak_by_category[c] = stats_.allocated_by_category[c];
  if (stats_.allocated > stats_.peak_allocated) {
    stats_.peak_allocated = stats_.allocated;
    stats_.reserved_at_peak = stats_.reserved;
  }
  const uint64_t pushed = g_trace_pushed;
  record_locked(TraceAction::Alloc, reinterpret_cast<uintptr_t>(node->ptr), nbytes, category, std::move(context));
  node->trace_index = g_trace_pushed != pushed ? pushed : UINT64_MAX;
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::Allocate, static_cast<int64_t>(nbytes), category, stats_);
}

// A miss: memory from the segment source (pages of an expandable segment, or a new segment of the old kind), or a
// cached block that fits once queued Tasks have run. Never null: when nothing is left, raises OutOfMemory.
CachingAllocator::Node* CachingAllocator::allocate_on_miss_locked(Miss& miss, Lock& lock) {
  Node* node = miss.expandable ? map_pages_locked(miss, lock) : map_new_segment_locked(miss, lock);
  if (!node) raise_out_of_memory_locked(miss, lock);
  if (!miss.to_unmap.empty()) {
    lock.unlock();
    unmap_segments(miss.to_unmap);
    miss.to_unmap.clear();
    lock.lock();
  }
  return node;
}

// docs/memory.md, "Expandable segments": map the pages of the placement that needs the fewest.
CachingAllocator::Node* CachingAllocator::map_pages_locked(Miss& miss, Lock& lock) {
  miss.placement = place_expandable_locked(miss.rounded, miss.small, miss.stream_ordered);
  release_above_margin_locked(miss);
  if (Node* cached = make_room_locked(miss, lock)) return cached;
  if (over_limit_locked(miss)) return miss.fail(miss.bytes_to_map());
  if (!miss.placement.unmapped) {  // no reserved range has room: reserve another
    Segment* segment = reserve_segment_locked(miss.small, miss.rounded);
    if (!segment) return miss.fail(round_up(miss.rounded, kPageSize));
    miss.placement = {segment->first, round_up(miss.rounded, kPageSize)};
  }
  Node* node = map_placement_locked(miss.placement, miss.rounded, miss.stream_ordered);
  if (!node) {  // the system refused the pages: give the cache back and try once more
    release_cache_locked(miss);
    if (miss.placement.unmapped) node = map_placement_locked(miss.placement, miss.rounded, miss.stream_ordered);
    if (!node) return miss.fail(miss.bytes_to_map());
  }
  miss.mapped_now = node->size - miss.rounded < kPageSize;
  return node;
}

// Release on a miss: `reserved` stays within the margin above `allocated`; the idle free blocks' pages go back to
// the system, the largest blocks first, down to half the margin (docs/memory.md, "Expandable segments").
void CachingAllocator::release_above_margin_locked(Miss& miss) {
  if (release_fraction_ < 0) return;
  const int64_t after = stats_.allocated + static_cast<int64_t>(miss.nbytes);
  const auto margin = std::max(static_cast<int64_t>(kMinReleaseMargin),
                               static_cast<int64_t>(release_fraction_ * static_cast<double>(after)));
  const int64_t excess = stats_.reserved + static_cast<int64_t>(miss.bytes_to_map()) - after;
  if (excess <= margin) return;
  release_expandable_locked(static_cast<size_t>(excess - margin / 2));
  miss.placement = place_expandable_locked(miss.rounded, miss.small, miss.stream_ordered);
}

// A segment of the old kind, mapped outside the lock (docs/memory.md, "Pools, segments and splitting").
CachingAllocator::Node* CachingAllocator::map_new_segment_locked(Miss& miss, Lock& lock) {
  miss.segment_bytes = miss.small ? kSmallSegment : segment_size(miss.rounded);
  // Reserve no more while entirely free segments (which cannot serve this request) could be returned instead:
  // give back enough of them to cover the new segment (docs/memory.md, "Release on a miss").
  static const bool release_on_miss = env_size("DYGRAD_ALLOC_RELEASE_ON_MISS", 1) != 0;
  if (release_on_miss && free_whole_ >= static_cast<int64_t>(miss.segment_bytes))
    release_free_segments_locked(miss.to_unmap, miss.segment_bytes);
  if (Node* cached = make_room_locked(miss, lock)) return cached;
  if (over_limit_locked(miss)) miss.segment_bytes = round_up(miss.rounded, kPage);  // no spare room in the segment
  if (over_limit_locked(miss)) return miss.fail(miss.segment_bytes);
  // The segment's bytes count as reserved from here, so that a concurrent allocation sees them (the limit holds
  // exactly); the system calls are made outside the lock.
  const size_t bytes = miss.segment_bytes;
  stats_.reserved += static_cast<int64_t>(bytes);
  lock.unlock();
  unmap_segments(miss.to_unmap);
  miss.to_unmap.clear();
  void* base = source_->map_segment(bytes);
  if (!base) {  // give the cache back and try once more
    empty_cache(/*wait_for_stream=*/false);
    base = source_->map_segment(bytes);
  }
  lock.lock();
  if (!base) {
    stats_.reserved -= static_cast<int64_t>(bytes);
    return miss.fail(bytes);
  }
  return add_segment_locked(base, bytes, miss);
}

// A new segment of `bytes` at `base`, one free block (not in the free set: the caller takes it).
CachingAllocator::Node* CachingAllocator::add_segment_locked(void* base, size_t bytes, const Miss& miss) {
  if (stats_.reserved > stats_.peak_reserved) stats_.peak_reserved = stats_.reserved;
  ++stats_.num_segment_allocs;
  ++stats_.segments;
  auto* segment = new Segment();
  segment->base = static_cast<char*>(base);
  segment->size = bytes;
  segment->small = miss.small;
  auto* node = new Node();
  node->ptr = segment->base;
  node->size = bytes;
  node->segment = segment;
  segment->first = node;
  segments_.insert(segment);
  record_locked(TraceAction::SegmentAlloc, reinterpret_cast<uintptr_t>(base), bytes, miss.category, miss.context);
  return node;
}

// --- a miss over the memory limit; out of memory ---------------------------------------------------------------
bool CachingAllocator::over_limit_locked(const Miss& miss) const {
  return limit_ && static_cast<size_t>(stats_.reserved) + miss.bytes_to_map() > limit_;
}

// Gives the whole idle cache back to the system (and places an expandable request again).
void CachingAllocator::release_cache_locked(Miss& miss) {
  release_free_segments_locked(miss.to_unmap);
  if (!miss.expandable) return;
  release_expandable_locked();
  miss.placement = place_expandable_locked(miss.rounded, miss.small, miss.stream_ordered);
}

// Over the memory limit: first the idle cache goes back to the system; then the free blocks that queued Tasks
// still use, once those have run. Returns a cached block that fits after that wait, or null.
CachingAllocator::Node* CachingAllocator::make_room_locked(Miss& miss, Lock& lock) {
  if (!over_limit_locked(miss)) return nullptr;
  release_cache_locked(miss);
  if (!over_limit_locked(miss)) return nullptr;
  if (Node* cached = wait_for_busy_free_blocks_locked(miss, lock)) return cached;
  release_cache_locked(miss);
  return nullptr;
}

// Only the thread that enqueues (a stream-ordered request) may wait for queued Tasks; another one (the
// communication thread, which the stream may be waiting for) must not.
CachingAllocator::Node* CachingAllocator::wait_for_busy_free_blocks_locked(Miss& miss, Lock& lock) {
  if (!miss.stream_ordered) return nullptr;
  const uint64_t last = busy_free_segments_locked();
  if (!last) return nullptr;
  lock.unlock();
  unmap_segments(miss.to_unmap);
  miss.to_unmap.clear();
  wait_until_run(last);
  lock.lock();
  Node* found = take_free_locked(miss.rounded, miss.small, miss.stream_ordered);
  if (found) ++stats_.cache_hits;
  return found;
}

// The one way out of a miss that found nothing: counted, traced, reported with the largest live tensors.
void CachingAllocator::raise_out_of_memory_locked(Miss& miss, Lock& lock) {
  ++stats_.num_ooms;
  record_locked(TraceAction::Oom, 0, miss.nbytes, miss.category, miss.context);
  std::string message = oom_message_locked(miss.nbytes, miss.needed);
  lock.unlock();
  unmap_segments(miss.to_unmap);
  fail(ErrorKind::OutOfMemory, message);
}

// --- free, retag, statistics, empty_cache ----------------------------------------------------------------------
void CachingAllocator::free(Block block, size_t nbytes, MemoryCategory category, uint64_t in_use_until) {
  if (!block.ptr) return;
  AllocContextPtr context;
  if (history_on_.load(std::memory_order_relaxed)) [[unlikely]]
    context = capture_context(true);
  std::lock_guard<std::mutex> lock(mutex_);
  // Another device's stream may still use the block (a copy between devices): it waits, out of the pools and still
  // counted as allocated, until that event has run (docs/devices.md, "Memory and streams").
  if (block.foreign_use != 0 && !Stream::event_done(block.foreign_use)) [[unlikely]] {
    pending_.push_back(Pending{block, nbytes, category, in_use_until});
    return;
  }
  free_locked(block, nbytes, category, in_use_until, context);
}

[[gnu::always_inline]] inline void CachingAllocator::free_locked(Block block, size_t nbytes, MemoryCategory category,
                                                                 uint64_t in_use_until, AllocContextPtr& context) {
  Node* node = static_cast<Node*>(block.handle);
  ++stats_.num_frees;
  stats_.active -= static_cast<int64_t>(node->size);
  stats_.allocated -= static_cast<int64_t>(nbytes);
  stats_.allocated_by_category[static_cast<int>(category)] -= static_cast<int64_t>(nbytes);
  const auto addr = reinterpret_cast<uintptr_t>(node->ptr);
  record_locked(TraceAction::FreeRequested, addr, nbytes, category, context);
  // The CPU stream runs in order: the block is reusable at once by later Tasks, even while earlier ones still
  // use it (docs/memory.md, "Stream-ordered reuse").
  record_locked(TraceAction::FreeCompleted, addr, nbytes, category, std::move(context));
  node->allocated = false;
  // The later of the Tasks that used this allocation and those that used the memory before it was handed out
  // (stream-ordered reuse): a block freed by an owner that no Task used is still busy until the earlier ones ran.
  node->in_use_until = std::max(node->in_use_until, in_use_until);
  node->requested = 0;
  node->description.clear();
  node->site = {};
  node->context.reset();
  node->trace_index = UINT64_MAX;
  if (Node* prev = node->prev; prev && !prev->allocated && prev->mapped) {  // merge with the free block before
    erase_free(prev);
    prev->absorb_next();
    node = prev;
  }
  if (Node* next = node->next; next && !next->allocated && next->mapped) {  // and with the one after
    erase_free(next);
    node->absorb_next();
  }
  insert_free(node);
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::Free, static_cast<int64_t>(nbytes), category, stats_);
}

void CachingAllocator::process_pending_locked() {
  size_t kept = 0;
  for (Pending& p : pending_) {
    AllocContextPtr none;
    if (Stream::event_done(p.block.foreign_use)) free_locked(p.block, p.nbytes, p.category, p.in_use_until, none);
    else pending_[kept++] = p;
  }
  pending_.resize(kept);
}

void CachingAllocator::retag(const Block& block, size_t nbytes, MemoryCategory from, MemoryCategory to) {
  if (from == to || nbytes == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (block.handle) {
    Node* node = static_cast<Node*>(block.handle);
    node->category = to;
    // The trace's alloc entry takes the new category, so that the timeline by category adds up (the free
    // entry carries it too).
    const uint64_t first = g_trace_pushed - trace_.size();
    if (node->trace_index != UINT64_MAX && node->trace_index >= first) trace_[node->trace_index - first].category = to;
  }
  stats_.allocated_by_category[static_cast<int>(from)] -= static_cast<int64_t>(nbytes);
  auto t = static_cast<int>(to);
  stats_.allocated_by_category[t] += static_cast<int64_t>(nbytes);
  if (stats_.allocated_by_category[t] > stats_.peak_by_category[t])
    stats_.peak_by_category[t] = stats_.allocated_by_category[t];
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::Retag, static_cast<int64_t>(nbytes), to, stats_);
}

void CachingAllocator::annotate(const Block& block, const char* description) {
  if (!block.handle) return;
  std::lock_guard<std::mutex> lock(mutex_);
  static_cast<Node*>(block.handle)->description = description;
}

void CachingAllocator::set_observer(AllocatorObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);  // calls happen under this lock: none is in flight after this
  observer_.store(observer, std::memory_order_release);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // Blocks another stream has finished with are freed: what is still counted is what a stream may still use. (The
  // pending list is bookkeeping of frees already asked for, so the statistics stay a const query.)
  if (!pending_.empty()) const_cast<CachingAllocator*>(this)->process_pending_locked();
  MemoryStats s = stats_;
  s.inactive_split = s.reserved - s.active - free_whole_;
  s.limit = static_cast<int64_t>(limit_);
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
  stats_.reserved_at_peak = stats_.reserved;
  stats_.peak_by_category = stats_.allocated_by_category;
}

void CachingAllocator::empty_cache(bool wait_for_stream) {
  Released to_unmap;
  uint64_t last = 0;
  if (wait_for_stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    process_pending_locked();
    last = busy_free_segments_locked();
  }
  if (last) wait_until_run(last);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    release_free_segments_locked(to_unmap);
    release_expandable_locked();  // the idle free blocks' whole pages
  }
  unmap_segments(to_unmap);  // the pages go back to the system: the process RSS drops
}

void CachingAllocator::set_expandable_segments(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  expandable_ = on;
}
bool CachingAllocator::expandable_segments() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return expandable_;
}
void CachingAllocator::set_release_fraction(double fraction) {
  std::lock_guard<std::mutex> lock(mutex_);
  release_fraction_ = fraction;
}
double CachingAllocator::release_fraction() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return release_fraction_;
}

uint64_t CachingAllocator::busy_free_segments_locked() const {
  uint64_t last = 0;
  for (const Segment* s : segments_) {
    if (s->expandable) {  // its free blocks, each of which could be unmapped
      for (const Node* n = s->first; n; n = n->next)
        if (!n->allocated && n->mapped && busy(n->in_use_until)) last = std::max(last, n->in_use_until);
      continue;
    }
    const Node* n = s->first;
    if (!n->allocated && !n->next && busy(n->in_use_until)) last = std::max(last, n->in_use_until);
  }
  return last;
}

void CachingAllocator::release_free_segments_locked(Released& to_unmap, size_t enough) {
  size_t released = 0;
  for (auto it = segments_.begin(); it != segments_.end() && released < enough;) {
    Segment* s = *it;
    Node* n = s->first;
    // Expandable segments are kept (their free pages are unmapped by release_expandable_locked); a segment a
    // queued Task may still use stays mapped.
    if (s->expandable || n->allocated || n->next || busy(n->in_use_until)) {
      ++it;
      continue;
    }
    erase_free(n);
    stats_.reserved -= static_cast<int64_t>(s->size);
    --stats_.segments;
    ++stats_.num_segment_frees;
    record_locked(TraceAction::SegmentFree, reinterpret_cast<uintptr_t>(s->base), s->size, MemoryCategory::Other,
                  nullptr);
    to_unmap.emplace_back(s->base, s->size);
    released += s->size;
    delete n;
    delete s;
    it = segments_.erase(it);
  }
  if (AllocatorObserver* obs = observer())
    obs->on_memory_event(MemoryEventKind::ReleaseCache, 0, MemoryCategory::Other, stats_);
}

// --- the limit -------------------------------------------------------------------------------------------------
void CachingAllocator::update_tracking_locked() { set_allocation_tracking(limit_ > 0 || history_.enabled); }

void CachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
  update_tracking_locked();
}

size_t CachingAllocator::memory_limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

// --- history and snapshots -------------------------------------------------------------------------------------
void CachingAllocator::set_python_frame_provider(PythonFrameProvider provider) {
  g_frame_provider.store(provider, std::memory_order_release);
}

void CachingAllocator::record_history(const HistoryOptions& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  history_ = options;
  if (!options.enabled || !options.trace) trace_.clear();
  while (trace_.size() > history_.max_entries) trace_.pop_front();
  g_alloc_stacks.store(options.enabled && options.alloc_stacks, std::memory_order_relaxed);
  g_free_stacks.store(options.enabled && options.free_stacks, std::memory_order_relaxed);
  g_cpp_stacks.store(options.enabled && options.cpp_stacks, std::memory_order_relaxed);
  history_on_.store(options.enabled, std::memory_order_relaxed);
  update_tracking_locked();
}

HistoryOptions CachingAllocator::history_options() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return history_;
}

MemorySnapshot CachingAllocator::snapshot() const {
  MemorySnapshot out;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pending_.empty()) const_cast<CachingAllocator*>(this)->process_pending_locked();  // as stats()
  out.segments.reserve(segments_.size());
  for (const Segment* s : segments_) {
    SnapshotSegment seg;
    seg.address = reinterpret_cast<uintptr_t>(s->base);
    seg.size = s->size;
    seg.small = s->small;
    seg.expandable = s->expandable;
    for (const Node* n = s->first; n; n = n->next) {
      if (!n->mapped) {  // an expandable segment: each contiguous mapped range is a segment (as torch's snapshot)
        if (!seg.blocks.empty()) out.segments.push_back(std::move(seg));
        seg = SnapshotSegment{};
        seg.small = s->small;
        seg.expandable = true;
        continue;
      }
      if (seg.blocks.empty() && s->expandable) {
        seg.address = reinterpret_cast<uintptr_t>(n->ptr);
        seg.size = 0;
      }
      if (s->expandable) seg.size += n->size;
      SnapshotBlock b;
      b.address = reinterpret_cast<uintptr_t>(n->ptr);
      b.size = n->size;
      b.requested = n->requested;
      b.live = n->allocated;
      b.category = n->category;
      b.description = n->description;
      b.site = n->site;
      b.context = n->context;
      seg.blocks.push_back(std::move(b));
    }
    if (!seg.blocks.empty()) out.segments.push_back(std::move(seg));
  }
  std::sort(out.segments.begin(), out.segments.end(),
            [](const SnapshotSegment& a, const SnapshotSegment& b) { return a.address < b.address; });
  out.trace.assign(trace_.begin(), trace_.end());
  out.stats = stats_;
  out.stats.inactive_split = stats_.reserved - stats_.active - free_whole_;
  out.stats.limit = static_cast<int64_t>(limit_);
  return out;
}

AllocFrame CachingAllocator::symbolize(void* address) {
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<void*, AllocFrame>();
  static auto* strings = new std::vector<std::unique_ptr<std::string>>();  // kept for the process
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache->find(address); it != cache->end()) return it->second;
  auto keep = [&](std::string text) {
    strings->push_back(std::make_unique<std::string>(std::move(text)));
    return strings->back()->c_str();
  };
  AllocFrame frame;
  Dl_info info{};
  if (dladdr(address, &info) && info.dli_fname) {
    frame.filename = keep(info.dli_fname);
    if (info.dli_sname) {
      int status = 0;
      char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
      frame.name = keep(status == 0 && demangled ? demangled : info.dli_sname);
      std::free(demangled);
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%zx", static_cast<size_t>(reinterpret_cast<char*>(address) -
                                                                  static_cast<char*>(info.dli_fbase)));
      frame.name = keep(buf);
    }
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", address);
    frame.filename = "??";
    frame.name = keep(buf);
  }
  (*cache)[address] = frame;
  return frame;
}

}  // namespace dg
