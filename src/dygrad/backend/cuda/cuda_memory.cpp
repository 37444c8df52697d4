// The CUDA backend's segment sources (cuda_memory.h).
#include "dygrad/backend/cuda/cuda_memory.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "dygrad/backend/cuda/cuda_check.h"

namespace dg::cuda {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
constexpr size_t kAllocatorPage = 4096;  // CachingAllocator::kPageSize: what map_pages/unmap_pages are given in
}  // namespace

// --- cudaMalloc ----------------------------------------------------------------------------------------------------
void* MallocSource::map_segment(size_t bytes) {
  cudaSetDevice(device_);
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // an out-of-memory error is the allocator's to report, not a sticky one
    return nullptr;
  }
  return p;
}

void MallocSource::unmap_segment(void* base, size_t) {
  cudaSetDevice(device_);
  cudaFree(base);  // synchronises the device: only empty_cache and the allocator's limit return segments
}

// --- the driver's virtual memory API ---------------------------------------------------------------------------------
struct VirtualMemorySource::Driver {
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDeviceGetAttribute) attribute = nullptr;
};

namespace {
template <typename F>
bool entry_point(const char* name, F& f) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || !p)
    return false;
  f = reinterpret_cast<F>(p);
  return true;
}

const VirtualMemorySource::Driver* driver() {
  static const VirtualMemorySource::Driver* d = [] {
    static VirtualMemorySource::Driver e;
    const bool ok = entry_point("cuMemCreate", e.create) && entry_point("cuMemRelease", e.release) &&
                    entry_point("cuMemAddressReserve", e.reserve) && entry_point("cuMemAddressFree", e.address_free) &&
                    entry_point("cuMemMap", e.map) && entry_point("cuMemUnmap", e.unmap) &&
                    entry_point("cuMemSetAccess", e.set_access) &&
                    entry_point("cuMemGetAllocationGranularity", e.granularity) &&
                    entry_point("cuDeviceGet", e.device_get) && entry_point("cuDeviceGetAttribute", e.attribute);
    return ok ? &e : nullptr;
  }();
  return d;
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;  // the driver's word for device memory that is not migratable
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}
}  // namespace

std::unique_ptr<VirtualMemorySource> VirtualMemorySource::create(int device) {
  const Driver* d = driver();
  if (!d) return nullptr;
  CUdevice handle{};
  int supported = 0;
  if (d->device_get(&handle, device) != CUDA_SUCCESS ||
      d->attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, handle) != CUDA_SUCCESS ||
      !supported)
    return nullptr;
  const CUmemAllocationProp prop = device_memory(device);
  size_t granularity = 0;
  if (d->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || granularity == 0 ||
      granularity % kAllocatorPage != 0)
    return nullptr;
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) return nullptr;
  return std::unique_ptr<VirtualMemorySource>(new VirtualMemorySource(device, d, granularity, props.totalGlobalMem));
}

VirtualMemorySource::VirtualMemorySource(int device, const Driver* d, size_t granularity, size_t total_memory)
    : device_(device), driver_(d), granularity_(granularity), total_memory_(total_memory) {}

// A reserved range as large as the GPU's memory (address space is free; the mapped pages are what count), at least
// the request, in whole granules.
SegmentSource::Range VirtualMemorySource::reserve_range(size_t at_least) {
  const size_t size = round_up(at_least > total_memory_ ? at_least : total_memory_, granularity_);
  CUdeviceptr base = 0;
  if (driver_->reserve(&base, size, granularity_, 0, 0) != CUDA_SUCCESS) return {};
  return {reinterpret_cast<char*>(base), size};
}

bool VirtualMemorySource::map_granule_locked(CUdeviceptr at) {
  const CUmemAllocationProp prop = device_memory(device_);
  CUmemGenericAllocationHandle handle{};
  if (driver_->create(&handle, granularity_, &prop, 0) != CUDA_SUCCESS) return false;
  if (driver_->map(at, granularity_, 0, handle, 0) != CUDA_SUCCESS) {
    driver_->release(handle);
    return false;
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (driver_->set_access(at, granularity_, &access, 1) != CUDA_SUCCESS) {
    driver_->unmap(at, granularity_);
    driver_->release(handle);
    return false;
  }
  granules_[at] = Granule{handle, 0};
  return true;
}

void VirtualMemorySource::unmap_granule_locked(CUdeviceptr at, Granule& g) {
  driver_->unmap(at, granularity_);  // the driver waits for work using it: only idle blocks are unmapped
  driver_->release(g.handle);
  granules_.erase(at);
}

// Pages [at, at + bytes): every granule they touch is mapped (if it is not yet) and counts its pages among them.
// On a refusal the pages counted so far are given back, so the call maps all or nothing.
bool VirtualMemorySource::map_pages(void* at, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const CUdeviceptr begin = reinterpret_cast<CUdeviceptr>(at), end = begin + bytes;
  for (CUdeviceptr g = begin / granularity_ * granularity_; g < end; g += granularity_) {
    const CUdeviceptr lo = g > begin ? g : begin, hi = g + granularity_ < end ? g + granularity_ : end;
    if (!granules_.count(g) && !map_granule_locked(g)) {
      unmap_pages_locked(begin, lo);
      return false;
    }
    granules_[g].pages += (hi - lo) / kAllocatorPage;
  }
  return true;
}

void VirtualMemorySource::unmap_pages(void* at, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const CUdeviceptr begin = reinterpret_cast<CUdeviceptr>(at);
  unmap_pages_locked(begin, begin + bytes);
}

void VirtualMemorySource::unmap_pages_locked(CUdeviceptr begin, CUdeviceptr end) {
  for (CUdeviceptr g = begin / granularity_ * granularity_; g < end; g += granularity_) {
    const CUdeviceptr lo = g > begin ? g : begin, hi = g + granularity_ < end ? g + granularity_ : end;
    auto it = granules_.find(g);
    if (it == granules_.end()) continue;
    it->second.pages -= (hi - lo) / kAllocatorPage;
    if (it->second.pages == 0) unmap_granule_locked(g, it->second);
  }
}

void* VirtualMemorySource::map_segment(size_t bytes) {
  const size_t size = round_up(bytes, granularity_);
  CUdeviceptr base = 0;
  if (driver_->reserve(&base, size, granularity_, 0, 0) != CUDA_SUCCESS) return nullptr;
  if (!map_pages(reinterpret_cast<void*>(base), size)) {
    driver_->address_free(base, size);
    return nullptr;
  }
  return reinterpret_cast<void*>(base);
}

void VirtualMemorySource::unmap_segment(void* base, size_t bytes) {
  const size_t size = round_up(bytes, granularity_);
  unmap_pages(base, size);
  driver_->address_free(reinterpret_cast<CUdeviceptr>(base), size);
}

// --- page-locked host memory ------------------------------------------------------------------------------------------
void* PinnedSource::map_segment(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void PinnedSource::unmap_segment(void* base, size_t) { cudaFreeHost(base); }

}  // namespace dg::cuda
