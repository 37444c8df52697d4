// Where the caching allocator's memory comes from: segments mapped and unmapped whole, and reserved address ranges
// whose pages are mapped on demand (expandable segments). The allocator's block pool decides what to ask for and
// when; a SegmentSource only talks to the system (docs/memory.md, "The allocator's structure").
#pragma once
#include <cstddef>

namespace dg {

class SegmentSource {
 public:
  struct Range {
    char* base = nullptr;  // null: the system refused it
    size_t size = 0;
  };
  virtual ~SegmentSource() = default;

  // A segment of `bytes` (a multiple of the page), readable and writable and page aligned; null when the system
  // refuses it. Called without the allocator's lock.
  virtual void* map_segment(size_t bytes) = 0;
  virtual void unmap_segment(void* base, size_t bytes) = 0;

  // Expandable segments. A range of address space of at least `at_least` bytes that backs nothing; the source
  // chooses its size (Range::size). Ranges are kept for the process.
  virtual Range reserve_range(size_t at_least) = 0;
  // Backs the whole pages [at, at + bytes) of a reserved range with memory that faults in when first touched;
  // false when the system refuses them.
  virtual bool map_pages(void* at, size_t bytes) = 0;
  // Gives the pages [at, at + bytes) back to the system at once; the address space stays reserved.
  virtual void unmap_pages(void* at, size_t bytes) = 0;
};

// The host's: anonymous private mmap. A reserved range is the machine's memory (at least 1 GiB), an eighth of an
// address-space limit (RLIMIT_AS, at least 64 MiB) when there is one, halved down to the request if the system
// refuses it; DYGRAD_ALLOC_RESERVE (bytes) overrides the size.
class HostSegmentSource final : public SegmentSource {
 public:
  void* map_segment(size_t bytes) override;
  void unmap_segment(void* base, size_t bytes) override;
  Range reserve_range(size_t at_least) override;
  bool map_pages(void* at, size_t bytes) override;
  void unmap_pages(void* at, size_t bytes) override;
};

}  // namespace dg
