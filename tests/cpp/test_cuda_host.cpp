// The host side of the CUDA backend, run without a GPU (docs/cuda.md, "What runs without a GPU"):
// - DeviceCompletion (runtime/stream.h): a device stream whose Tasks complete when the device says so, not when their
//   launch returns, and whose device faults become the failing Task's error. A fake device stands in for the GPU: its
//   kernels "launch" at once and the test decides when each Task's device work has run and which one faulted.
// - The elementwise kernels' strided offset calculator (backend/cuda/offset_calc.h), compiled for the host.
#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include "dygrad/backend/cuda/offset_calc.h"
#include "dygrad/core/storage.h"
#include "dygrad/runtime/allocator.h"
#include "dygrad/runtime/op_def.h"
#include "dygrad/runtime/segment_source.h"
#include "dygrad/runtime/stream.h"

namespace dg {
namespace {

// --- DeviceCompletion ---------------------------------------------------------------------------------------------
// A device the test drives: `release(n)` lets Tasks 1..n complete; `plant_fault` makes the word hold a Task's fault
// from its completion on (sticky until the launcher clears it, as the GPU's).
class FakeDevice final : public DeviceCompletion {
 public:
  void launched(const Task& task) override {
    std::lock_guard<std::mutex> lock(mutex_);
    launched_ = task.seq;
    changed_.notify_all();
  }
  bool wait_completed(uint64_t seq, DeviceFault& fault) override {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return released_ >= seq; });
    if (fault_seq_ == 0 || fault_seq_ > seq || cleared_) return false;
    fault = DeviceFault{fault_seq_, ErrorKind::Index, "index 9 is out of bounds for dimension 0 with size 4"};
    return true;
  }
  void clear_fault() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cleared_ = true;
    ++clears_;
  }
  void release(uint64_t upto) {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = upto;
    changed_.notify_all();
  }
  void plant_fault(uint64_t seq) {
    std::lock_guard<std::mutex> lock(mutex_);
    fault_seq_ = seq;
    cleared_ = false;
  }
  void wait_launched(uint64_t seq) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return launched_ >= seq; });
  }
  int clears() {
    std::lock_guard<std::mutex> lock(mutex_);
    return clears_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t launched_ = 0, released_ = 0, fault_seq_ = 0;
  bool cleared_ = false;
  int clears_ = 0;
};

// out = in + 1 (float32), run on the fake device's launcher: what a GPU kernel's launch stands for.
void add_one_kernel(Task& task) {
  const float* in = task.inputs[0].data<float>();
  float* out = task.outputs[0].data<float>();
  for (int64_t i = 0; i < task.outputs[0].numel(); ++i) out[i] = in[i] + 1.0f;
}
// The CPU's too: every op has a CPU kernel (OpTable.EveryOpIsDeclaredOnceAndHasACpuKernel).
[[maybe_unused]] const bool registered =
    (register_kernel("test_fake_device_add_one", Device::Type::CUDA, add_one_kernel),
     register_kernel("test_fake_device_add_one", Device::Type::CPU, add_one_kernel), true);
const OpDef op_add_one("test_fake_device_add_one", nullptr);

// cuda:15 with the fake device behind its stream and host memory behind its allocator: no CUDA code is involved.
const Device kFake{Device::Type::CUDA, 15};
FakeDevice& fake_device() {
  static FakeDevice* device = [] {
    auto* d = new FakeDevice;
    CachingAllocator& allocator = CachingAllocator::create(kFake, std::make_unique<HostSegmentSource>());
    register_device_allocator(kFake, &allocator);
    Stream::create(kFake, allocator, d);
    return d;
  }();
  return *device;
}

Tensor add_one(const Tensor& in, const CallSite& site = {}) {
  Tensor out = Tensor::empty(in.shape(), DType::Float32, kFake);
  const Tensor inputs[1] = {in}, outputs[1] = {out};
  Stream::of(kFake).submit(op_add_one, inputs, outputs, Attrs(), site);
  return out;
}

// Reads a device tensor on this thread, as a kernel would (the host may not, docs/devices.md).
float first_value(const Tensor& t) {
  Storage::set_thread_runs_device_kernels(true);
  const float v = t.data<float>()[0];
  Storage::set_thread_runs_device_kernels(false);
  return v;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceCompletion, ATaskCompletesWhenTheDeviceSaysSoNotWhenItsLaunchReturns) {
  FakeDevice& device = fake_device();
  Stream& stream = Stream::of(kFake);
  const uint64_t base = stream.enqueued();
  Tensor x = Tensor::empty(std::vector<int64_t>{4}, DType::Float32, kFake);
  Tensor a = add_one(x), b = add_one(a), c = add_one(b);
  device.wait_launched(base + 3);  // all three launched ...
  EXPECT_EQ(stream.completed(), base);  // ... none completed: the device has not run them
  device.release(base + 2);
  stream.wait_until_run(base + 2);
  EXPECT_EQ(stream.completed(), base + 2);
  EXPECT_FALSE(Stream::event_done(stream.event_of(base + 3)));
  device.release(base + 3);
  stream.synchronize();
  EXPECT_EQ(stream.completed(), base + 3);
}

TEST(DeviceCompletion, AFaultIsTheFailingTasksErrorAndTheTasksLaunchedMeanwhileAreSkipped) {
  FakeDevice& device = fake_device();
  Stream& stream = Stream::of(kFake);
  const uint64_t base = stream.enqueued();
  device.release(base);
  Tensor weights = Tensor::empty(std::vector<int64_t>{4}, DType::Float32, kFake);  // born before the failure
  Storage::set_thread_runs_device_kernels(true);  // no queued Task uses it: every earlier one has completed
  for (int i = 0; i < 4; ++i) weights.data<float>()[i] = static_cast<float>(i);
  Storage::set_thread_runs_device_kernels(false);
  Tensor good = add_one(weights);
  Tensor bad = add_one(good, {"train.py", "step", 42});  // its kernel "faults" on the device
  Tensor after = add_one(bad);                            // launched while the word is set: skipped
  device.wait_launched(base + 3);
  device.plant_fault(base + 2);
  device.release(base + 3);
  const std::string m = message_of([&] { stream.synchronize(); });
  EXPECT_NE(m.find("[test_fake_device_add_one] index 9 is out of bounds"), std::string::npos) << m;
  EXPECT_NE(m.find("train.py:42"), std::string::npos) << m;
  EXPECT_EQ(good.storage().poisoned_by(), 0u);
  EXPECT_NE(bad.storage().poisoned_by(), 0u);    // the failed Task's output
  EXPECT_NE(after.storage().poisoned_by(), 0u);  // a skipped Task's fresh output
  // The device stays usable: the launcher clears the word before its next launch, and that Task runs.
  Tensor next = add_one(good);
  device.release(base + 4);
  stream.synchronize();
  EXPECT_EQ(device.clears(), 1);
  EXPECT_EQ(next.storage().poisoned_by(), 0u);
  EXPECT_EQ(first_value(next), 2.0f);  // weights[0] + 1 + 1
}

// An op without a CUDA kernel raises at enqueue naming the op and the device (test_op_table.cpp declares the op).
TEST(DeviceCompletion, AnOpWithoutACudaKernelRaisesNamingIt) {
  fake_device();
  const OpDef* op = find_op("test_no_kernel");
  ASSERT_NE(op, nullptr);
  Tensor out = Tensor::empty(std::vector<int64_t>{2}, DType::Float32, kFake);
  const Tensor outputs[1] = {out};
  const std::string m = message_of([&] { Stream::of(kFake).submit(*op, {}, outputs, Attrs(), {}); });
  const std::string want = backend_built(Device::Type::CUDA)
                               ? "[test_no_kernel] has no kernel for device cuda:15 (the cuda backend does not implement it)"
                               : "[test_no_kernel] no kernel for device cuda:15: dygrad was built without the cuda backend";
  EXPECT_EQ(m, want);
}

// --- the offset calculator -------------------------------------------------------------------------------------------
// Every element's offsets against the plain walk over the multi-index, for an operand with broadcast, permuted and
// sliced strides.
TEST(CudaOffsets, MatchAPlainMultiIndexWalk) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int rank = static_cast<int>(rng() % 5);
    std::vector<int64_t> shape(static_cast<size_t>(rank));
    for (int64_t& s : shape) s = 1 + static_cast<int64_t>(rng() % 4);
    // The output: contiguous. The input: broadcast in some dims, with strides of a permuted, sliced buffer.
    std::vector<int64_t> out_strides(shape.size()), in_shape = shape, in_strides(shape.size());
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; --d) out_strides[static_cast<size_t>(d)] = step, step *= shape[static_cast<size_t>(d)];
    std::vector<int> order(shape.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    step = 1;
    for (int d : order) {
      if (rng() % 3 == 0) in_shape[static_cast<size_t>(d)] = 1;  // broadcast
      in_strides[static_cast<size_t>(d)] = step;
      step *= shape[static_cast<size_t>(d)] * (1 + static_cast<int64_t>(rng() % 2));  // every other row: a slice
    }
    const int drop = rank > 0 ? static_cast<int>(rng() % 2) : 0;  // a missing leading dim broadcasts too
    const std::span<const int64_t> in_shape_span(in_shape.data() + drop, in_shape.size() - static_cast<size_t>(drop));
    const std::span<const int64_t> in_strides_span(in_strides.data() + drop, in_strides.size() - static_cast<size_t>(drop));
    const cuda::OperandLayout operands[2] = {{shape, out_strides}, {in_shape_span, in_strides_span}};
    cuda::OffsetCalculator<2> calc;
    ASSERT_TRUE(cuda::make_offset_calculator<2>(shape, operands, calc));
    int64_t numel = 1;
    for (int64_t s : shape) numel *= s;
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t linear = 0; linear < numel; ++linear) {
      int64_t want[2] = {0, 0};
      for (int d = 0; d < rank; ++d) {
        want[0] += index[static_cast<size_t>(d)] * out_strides[static_cast<size_t>(d)];
        if (d >= drop && in_shape[static_cast<size_t>(d)] != 1)
          want[1] += index[static_cast<size_t>(d)] * in_strides[static_cast<size_t>(d)];
      }
      int64_t got[2];
      calc.get(linear, got);
      ASSERT_EQ(got[0], want[0]) << "trial " << trial << " element " << linear;
      ASSERT_EQ(got[1], want[1]) << "trial " << trial << " element " << linear;
      for (int d = rank - 1; d >= 0 && ++index[static_cast<size_t>(d)] == shape[static_cast<size_t>(d)]; --d)
        index[static_cast<size_t>(d)] = 0;
    }
  }
}

TEST(CudaOffsets, ContiguousOperandsCollapseToOneDim) {
  const std::vector<int64_t> shape{2, 3, 4}, strides{12, 4, 1};
  const cuda::OperandLayout operands[2] = {{shape, strides}, {shape, strides}};
  cuda::OffsetCalculator<2> calc;
  ASSERT_TRUE(cuda::make_offset_calculator<2>(shape, operands, calc));
  EXPECT_EQ(calc.dims, 1);
  EXPECT_EQ(calc.sizes[0], 24);
}

}  // namespace
}  // namespace dg
