// Where the CUDA backend's memory comes from (docs/cuda.md, "Memory"; runtime/segment_source.h): the caching
// allocator's segment sources over a GPU's memory and over page-locked host memory.
#pragma once
#include <cuda.h>

#include <memory>
#include <mutex>
#include <unordered_map>

#include "dygrad/runtime/segment_source.h"

namespace dg::cuda {

// Whole segments through cudaMalloc (expandable segments off: DYGRAD_CUDA_EXPANDABLE=0, or no virtual memory API).
class MallocSource final : public SegmentSource {
 public:
  explicit MallocSource(int device) : device_(device) {}
  void* map_segment(size_t bytes) override;
  void unmap_segment(void* base, size_t bytes) override;
  Range reserve_range(size_t) override { return {}; }  // refused: the allocator maps whole segments
  bool map_pages(void*, size_t) override { return false; }
  void unmap_pages(void*, size_t) override {}

 private:
  int device_;
};

// Expandable segments through the driver's virtual memory API: a reserved range (cuMemAddressReserve) whose pages are
// backed on demand by physical allocations (cuMemCreate, cuMemMap, cuMemSetAccess). The driver maps at its
// granularity (2 MiB on current GPUs) and the allocator at its 4 KiB page (allocator.h, kPageSize): each granule is
// one physical allocation, mapped when the first of its pages is and released when the last is unmapped (a count of
// mapped pages per granule). The driver's functions come through cudaGetDriverEntryPointByVersion, so the plugin
// never links libcuda.so.1 and loads on a machine without a driver (then it reports no GPU).
class VirtualMemorySource final : public SegmentSource {
 public:
  // Null when the driver lacks the API or the device does not support it.
  static std::unique_ptr<VirtualMemorySource> create(int device);
  void* map_segment(size_t bytes) override;  // whole segments: a range of their own, mapped at once
  void unmap_segment(void* base, size_t bytes) override;
  Range reserve_range(size_t at_least) override;
  bool map_pages(void* at, size_t bytes) override;
  void unmap_pages(void* at, size_t bytes) override;

  struct Driver;  // the entry points

 private:
  VirtualMemorySource(int device, const Driver* driver, size_t granularity, size_t total_memory);
  struct Granule {
    CUmemGenericAllocationHandle handle;
    size_t pages;  // the allocator's pages mapped in it
  };
  bool map_granule_locked(CUdeviceptr at);
  void unmap_granule_locked(CUdeviceptr at, Granule& g);
  void unmap_pages_locked(CUdeviceptr begin, CUdeviceptr end);  // [begin, end): whole allocator pages
  int device_;
  const Driver* driver_;
  size_t granularity_;
  size_t total_memory_;
  std::mutex mutex_;
  std::unordered_map<CUdeviceptr, Granule> granules_;  // by the granule's address
};

// Page-locked host memory (cudaHostAlloc) for the pinned pool (docs/devices.md, "Pinned host memory"): never
// expandable.
class PinnedSource final : public SegmentSource {
 public:
  void* map_segment(size_t bytes) override;
  void unmap_segment(void* base, size_t bytes) override;
  Range reserve_range(size_t) override { return {}; }
  bool map_pages(void*, size_t) override { return false; }
  void unmap_pages(void*, size_t) override {}
};

}  // namespace dg::cuda
