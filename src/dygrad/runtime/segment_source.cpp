// The host's segment source: mmap (segment_source.h, docs/memory.md).
#include "dygrad/runtime/segment_source.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace dg {

namespace {
constexpr size_t kRangeRounding = size_t{2} << 20;  // reserved ranges are multiples of 2 MiB

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
size_t round_down(size_t n, size_t m) { return n / m * m; }

// The size of a reserved range: the machine's memory (a pool never needs more; another range is reserved if it
// does), at least 1 GiB; under an address-space limit (RLIMIT_AS), an eighth of it (at least 64 MiB), so that
// reserved ranges leave the rest of the limit to the process. DYGRAD_ALLOC_RESERVE (bytes) overrides it.
size_t preferred_range_bytes() {
  static const size_t machine = [] {
    if (const char* v = std::getenv("DYGRAD_ALLOC_RESERVE"); v && *v)
      return round_up(std::max<size_t>(std::strtoull(v, nullptr, 10), 1), kRangeRounding);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    const size_t ram = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
    return std::max<size_t>(round_up(ram, size_t{1} << 30), size_t{1} << 30);
  }();
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    return std::min(machine, std::max(round_down(static_cast<size_t>(limit.rlim_cur) / 8, kRangeRounding),
                                      size_t{64} << 20));
  return machine;
}

// A reserved range is inaccessible and commits nothing (MAP_NORESERVE).
void* reserve(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
}  // namespace

void* HostSegmentSource::map_segment(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void HostSegmentSource::unmap_segment(void* base, size_t bytes) { munmap(base, bytes); }

SegmentSource::Range HostSegmentSource::reserve_range(size_t at_least) {
  // Under an address-space limit (RLIMIT_AS, `ulimit -v`: reserved address space counts) the machine-sized range
  // may be refused: then halve it, down to the request (the allocator reserves another range when one is full).
  const size_t needed = round_up(at_least, kRangeRounding);
  size_t bytes = std::max(preferred_range_bytes(), needed);
  void* p = reserve(bytes);
  while (!p && bytes > needed) {
    bytes = std::max(round_up(bytes / 2, kRangeRounding), needed);
    p = reserve(bytes);
  }
  if (!p) return {};
  return {static_cast<char*>(p), bytes};
}

// Mapping a part of a reserved range replaces it with ordinary anonymous memory (committed as a segment is; its
// pages fault in on first touch); unmapping replaces it with an inaccessible range again, which frees the pages at
// once.
bool HostSegmentSource::map_pages(void* at, size_t bytes) {
  return mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
}

void HostSegmentSource::unmap_pages(void* at, size_t bytes) {
  if (mmap(at, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
    madvise(at, bytes, MADV_DONTNEED);  // cannot fail for a range we own; if it did, still drop the pages
}

}  // namespace dg
