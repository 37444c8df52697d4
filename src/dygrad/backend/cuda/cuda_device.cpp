// The CUDA backend's devices, streams and their completion (cuda_device.h; docs/cuda.md).
#include "dygrad/backend/cuda/cuda_device.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "dygrad/backend/cuda/cuda_check.h"
#include "dygrad/backend/cuda/cuda_memory.h"
#include "dygrad/runtime/allocator.h"
#include "dygrad/runtime/devices.h"
#include "dygrad/runtime/stream.h"

namespace dg::cuda {

void raise_cuda_error(const char* what, cudaError_t err) {
  cudaGetLastError();  // a non-sticky error is cleared, so the next call does not report it again
  fail(ErrorKind::Runtime, what, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

void raise_driver_error(const char* what, CUresult err) {
  fail(ErrorKind::Runtime, what, " failed: CUDA driver error ", static_cast<int>(err));
}

namespace {

// One GPU's launch state and the dygrad stream's view of its completion (runtime/stream.h, DeviceCompletion): an
// event per ring slot, recorded after each Task's launch (a slot's event is recorded again only after the Task that
// used it completed: the ring's bound), and the error word (fault.h).
class CudaDevice final : public DeviceCompletion {
 public:
  explicit CudaDevice(int index) : index_(index) {
    DG_CUDA_CHECK("[cuda] cudaSetDevice", cudaSetDevice(index));
    DG_CUDA_CHECK("[cuda] cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // Blocking sync: the completer sleeps in cudaEventSynchronize instead of spinning on a core the host needs.
    for (cudaEvent_t& e : events_)
      DG_CUDA_CHECK("[cuda] cudaEventCreateWithFlags",
                    cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync));
    DG_CUDA_CHECK("[cuda] cudaMalloc (the error word)", cudaMalloc(&word_, sizeof(unsigned long long)));
    DG_CUDA_CHECK("[cuda] cudaMemset (the error word)", cudaMemset(word_, 0, sizeof(unsigned long long)));
    void* host = nullptr;
    DG_CUDA_CHECK("[cuda] cudaHostAlloc (the fault record)", cudaHostAlloc(&host, sizeof(HostFault), cudaHostAllocMapped));
    std::memset(host, 0, sizeof(HostFault));
    host_fault_ = static_cast<HostFault*>(host);
    void* mapped = nullptr;
    DG_CUDA_CHECK("[cuda] cudaHostGetDevicePointer", cudaHostGetDevicePointer(&mapped, host, 0));
    device_fault_ = static_cast<HostFault*>(mapped);
  }

  int index() const { return index_; }
  cudaStream_t stream() const { return stream_; }
  FaultContext fault_context(uint64_t seq) const { return {word_, device_fault_, seq}; }

  void launched(const Task& task) override {
    make_current(index_);
    DG_CUDA_CHECK("[cuda] cudaEventRecord", cudaEventRecord(events_[(task.seq - 1) % Stream::kCapacity], stream_));
  }

  bool wait_completed(uint64_t seq, DeviceFault& fault) override {
    const cudaError_t err = cudaEventSynchronize(events_[(seq - 1) % Stream::kCapacity]);
    if (err != cudaSuccess) {
      // A sticky error (the context is lost: an illegal address, a trap) cannot be recovered from; it is reported
      // once as this Task's failure, and the device's later Tasks fail the same way.
      fault.seq = seq;
      fault.kind = ErrorKind::Runtime;
      fault.message = std::string("the GPU failed: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
      return true;
    }
    const unsigned long long faulted = host_fault_->seq;
    if (faulted == 0 || faulted > seq) return false;  // a later Task's fault: read at its own event
    fault.seq = faulted;
    fault.kind = host_fault_->code == kFaultGather ? ErrorKind::Runtime : ErrorKind::Index;
    fault.message = describe(host_fault_->code, host_fault_->value, host_fault_->bound, host_fault_->dim);
    return true;
  }

  void clear_fault() override {
    host_fault_->seq = 0;  // before the word, in stream order: only a kernel after the clear writes it again
    make_current(index_);
    DG_CUDA_CHECK("[cuda] cudaMemsetAsync (clearing the error word)",
                  cudaMemsetAsync(word_, 0, sizeof(unsigned long long), stream_));
  }

  // The device current on this thread (the launcher's, the completer's), set once per thread and device.
  static void make_current(int index) {
    thread_local int current = -1;
    if (current == index) return;
    DG_CUDA_CHECK("[cuda] cudaSetDevice", cudaSetDevice(index));
    current = index;
  }

 private:
  // The CPU kernels' wording for the same mistakes (backend/cpu/index.cpp, embedding.cpp, nll_loss.cpp).
  static std::string describe(int32_t code, long long value, long long bound, int32_t dim) {
    switch (code) {
      case kFaultIndexSelect:
      case kFaultGather:
        return "index " + std::to_string(value) + " is out of bounds for dimension " + std::to_string(dim) +
               " with size " + std::to_string(bound);
      case kFaultEmbedding:
        return "index " + std::to_string(value) + " is out of range for a table of " + std::to_string(bound) +
               " rows (expected an index in [0, " + std::to_string(bound - 1) + "])";
      case kFaultTargetOutOfRange:
        return "Target " + std::to_string(value) + " is out of bounds (" + std::to_string(bound) + " classes)";
      default:
        return "a kernel reported fault " + std::to_string(code);
    }
  }

  int index_;
  cudaStream_t stream_{};
  cudaEvent_t events_[Stream::kCapacity]{};
  unsigned long long* word_ = nullptr;
  HostFault* host_fault_ = nullptr;    // the host's view of the record
  HostFault* device_fault_ = nullptr;  // the same memory as kernels address it
};

std::mutex g_mutex;
int g_enabled = 0;
CudaDevice* g_devices[kMaxCudaDevices] = {};  // made once, never destroyed (the streams hold them)

std::unique_ptr<SegmentSource> device_source(int index) {
  const char* env = std::getenv("DYGRAD_CUDA_EXPANDABLE");
  if (!env || std::strcmp(env, "0") != 0)
    if (auto vmm = VirtualMemorySource::create(index)) return vmm;
  return std::make_unique<MallocSource>(index);
}

}  // namespace

// Asked once (the driver's answer does not change while the process runs); why there is none is kept for the errors
// that name it, in torch's words (c10/cuda/CUDAFunctions.cpp: a CUDA build of torch on a machine without a GPU).
int device_count() {
  static const int count = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) cudaGetLastError();  // no driver or no device: not an error, just none
    const char* why = err == cudaErrorInsufficientDriver
                          ? "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
                            "installed a driver from http://www.nvidia.com/Download/index.aspx"
                      : err == cudaErrorNoDevice || (err == cudaSuccess && n == 0) ? "No CUDA GPUs are available"
                      : err != cudaSuccess ? cudaGetErrorString(err) : "";
    set_backend_info(Device::Type::CUDA, "unavailable", why);
    return err == cudaSuccess ? (n < kMaxCudaDevices ? n : kMaxCudaDevices) : 0;
  }();
  return count;
}

int enable(int count) {
  const int available = device_count();
  DG_CHECK(count >= 1 && count <= available, Runtime, "[cuda] cannot bring up ", count, " GPU(s): ",
           available == 0 ? std::string("no GPU is available (no CUDA driver or device)")
                          : "the machine has " + std::to_string(available));
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_enabled == 0) {
    CachingAllocator::create_pinned(std::make_unique<PinnedSource>());
    set_backend_info(Device::Type::CUDA, "memory", std::getenv("DYGRAD_CUDA_EXPANDABLE") &&
                     std::strcmp(std::getenv("DYGRAD_CUDA_EXPANDABLE"), "0") == 0 ? "cudaMalloc" : "expandable");
  }
  for (int i = g_enabled; i < count; ++i) {
    const Device device{Device::Type::CUDA, static_cast<int16_t>(i)};
    g_devices[i] = new CudaDevice(i);
    cudaDeviceProp props{};
    DG_CUDA_CHECK("[cuda] cudaGetDeviceProperties", cudaGetDeviceProperties(&props, i));
    const std::string key = "name" + std::to_string(i);  // dygrad.cuda.get_device_name(i)
    set_backend_info(Device::Type::CUDA, key.c_str(), props.name);
    CachingAllocator& allocator = CachingAllocator::create(device, device_source(i));
    register_device_allocator(device, &allocator);
    Stream::create(device, allocator, g_devices[i]);
  }
  if (count > g_enabled) g_enabled = count;
  return g_enabled;
}

int enabled_count() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_enabled;
}

LaunchContext launch_context(const Task& task) {
  const Device device = device_of_stream(task.stream);
  CudaDevice* d = g_devices[device.index];
  CudaDevice::make_current(d->index());
  return {d->stream(), d->fault_context(task.seq)};
}

void check_launch(const Task& task) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    fail(ErrorKind::Runtime, "[", task.op->name, "] the kernel's launch failed: ", cudaGetErrorName(err), ": ",
         cudaGetErrorString(err));
}

namespace {
// The devices the process has are the ones brought up (count); the driver's GPUs (available) are brought up on first
// use, as torch initialises CUDA lazily (runtime/devices.cpp, check_device_available).
[[maybe_unused]] const bool g_registered =
    (register_backend(Device::Type::CUDA),
     register_device_backend(Device::Type::CUDA, {.enable = enable, .count = enabled_count, .available = device_count}),
     true);
}  // namespace

}  // namespace dg::cuda
