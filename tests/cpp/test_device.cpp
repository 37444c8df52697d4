// The runtime's second device, on the asynchronous test device (docs/devices.md): copies between devices, streams
// ordered by events, memory reused across streams only after the other stream's event, the host kept out of device
// memory, a missed sync caught, and a device-side data error raised at the next sync with the device still usable.
#include <cmath>
#include <string>
#include <vector>

#include "harness.h"

namespace dg::test {
namespace {

const Device kTest0{Device::Type::Test, 0};
const Device kTest1{Device::Type::Test, 1};

void enable() { ASSERT_GE(enable_devices(Device::Type::Test, 2), 2); }

Tensor iota(int64_t n, DType dtype = DType::Float32) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i) + 1.0f;
  return from_vector<float>(v, Shape{n}, dtype);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Paused {  // holds a device's launcher for the scope
  Device device;
  explicit Paused(Device d) : device(d) { Stream::of(d).set_paused(true); }
  ~Paused() { Stream::of(device).set_paused(false); }
};

}  // namespace

TEST(Device, CopiesAndOpsOnTheTestDeviceGiveTheCpusValues) {
  enable();
  Tensor a = reshape(iota(12), Shape{3, 4}), b = iota(4);
  Tensor on_cpu = sum(mul(add(a, b), a), Shape{1});
  Tensor a_dev = to_device(a, kTest0), b_dev = to_device(b, kTest0);
  EXPECT_EQ(a_dev.device(), kTest0);
  Tensor on_dev = sum(mul(add(a_dev, b_dev), a_dev), Shape{1});
  EXPECT_EQ(on_dev.device(), kTest0);  // outputs on the inputs' device
  EXPECT_EQ(on_dev.to_vector<float>(), on_cpu.to_vector<float>());
  // Between two test devices (on the source's stream) and back.
  Tensor on_dev1 = to_device(on_dev, kTest1);
  EXPECT_EQ(on_dev1.device(), kTest1);
  EXPECT_EQ(to_device(on_dev1, Device::cpu()).to_vector<float>(), on_cpu.to_vector<float>());
}

TEST(Device, OperandsOnTwoDevicesAreRefusedNamingBoth) {
  enable();
  Tensor a = iota(4), a_dev = to_device(a, kTest0);
  const std::string m = message_of([&] { (void)add(a, a_dev); });
  EXPECT_NE(m.find("[add]"), std::string::npos) << m;
  EXPECT_NE(m.find("cpu"), std::string::npos) << m;
  EXPECT_NE(m.find("test:0"), std::string::npos) << m;
}

TEST(Device, TheHostNeverTouchesDeviceMemory) {
  enable();
  Tensor a_dev = to_device(iota(8), kTest0);
  Stream::of(kTest0).synchronize();
  const std::string m = message_of([&] { (void)a_dev.data<float>(); });
  EXPECT_NE(m.find("[test:0] the host touched device memory"), std::string::npos) << m;
  EXPECT_EQ(sum(a_dev).item<float>(), 36.0f) << "item() reads through a copy";
}

TEST(Device, FreshDeviceMemoryIsPoisoned) {
  enable();
  // A test device's arena is filled with 0xFF bytes when mapped: a kernel reading memory it never wrote sees NaNs.
  Tensor fresh = Tensor::empty(Shape{1 << 16}, DType::Float32, kTest1);
  const std::vector<float> v = to_device(fresh, Device::cpu()).to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_TRUE(std::isnan(v.back()));
}

TEST(Device, ACopyWaitsForItsSourcesProducerOnTheOtherStream) {
  enable();
  // The source is written by a CPU Task; the copy on the test stream waits for that Task's event.
  for (int round = 0; round < 50; ++round) {
    Tensor a = iota(1 << 14);
    Tensor b = mul(a, 3.0);  // queued on the CPU stream
    Tensor b_dev = to_device(b, kTest0);
    const std::vector<float> got = to_device(b_dev, Device::cpu()).to_vector<float>();
    ASSERT_EQ(got[100], 303.0f) << "round " << round;
  }
}

TEST(Device, MemoryFreedWhileAnotherStreamUsesItIsReusedOnlyAfterItsEvent) {
  enable();
  const int64_t n = 1 << 16;
  Tensor on_dev;
  const void* freed = nullptr;
  {
    Paused hold(kTest0);
    Tensor a = pin_memory(iota(n));  // pinned: the device's copy reads it directly
    Stream::cpu().synchronize();
    freed = a.storage().address();
    on_dev = to_device(a, kTest0);  // queued behind the held launcher: it still has to read a
    a = Tensor();                   // the program drops the source: its block goes back to the pinned pool
    // The next pinned allocations of that size must not get the block before the copy's event, or the fill below
    // would overwrite what the copy has yet to read.
    for (int i = 0; i < 4; ++i) {
      Tensor c = full(Shape{n}, -7.0, {.pinned = true});
      EXPECT_NE(c.storage().address(), freed) << "reused before the test stream's event";
      Stream::cpu().synchronize();
    }
  }
  const std::vector<float> got = to_device(on_dev, Device::cpu()).to_vector<float>();
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[static_cast<size_t>(n - 1)], static_cast<float>(n));
}

TEST(Device, PageableMemoryIsStagedThroughPinnedBuffersReusedOnlyAfterTheCopy) {
  enable();
  const int64_t n = 1 << 16;
  Tensor on_dev;
  {
    Paused hold(kTest0);
    Tensor a = iota(n);
    ASSERT_FALSE(a.storage().is_pinned());
    on_dev = to_device(a, kTest0);  // a CPU copy into a pinned staging buffer, then the device's copy (held) from it
    a = Tensor();
    // The staging buffer was dropped at once; pinned allocations of its size that are filled now must not be it.
    std::vector<Tensor> fills;
    for (int i = 0; i < 4; ++i) {
      fills.push_back(full(Shape{n}, -7.0, {.pinned = true}));
      Stream::cpu().synchronize();
    }
  }
  const std::vector<float> got = to_device(on_dev, Device::cpu()).to_vector<float>();
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[static_cast<size_t>(n / 2)], static_cast<float>(n / 2 + 1));
  EXPECT_EQ(got[static_cast<size_t>(n - 1)], static_cast<float>(n));
  // Both directions go through pinned memory: a blocking copy back lands in pageable memory, a non-blocking one in
  // pinned memory (torch's).
  EXPECT_FALSE(to_device(on_dev, Device::cpu()).storage().is_pinned());
  EXPECT_TRUE(to_device(on_dev, Device::cpu(), /*non_blocking=*/true).storage().is_pinned());
}

TEST(Device, AWriteIntoABufferACopyStillReadsWaitsForTheCopy) {
  enable();
  Tensor a = pin_memory(iota(1024));  // pinned: the device's copy reads a itself
  Stream::cpu().synchronize();
  Tensor on_dev;
  {
    Paused hold(kTest0);
    on_dev = to_device(a, kTest0);
    add_(a, 100.0);  // the CPU Task waits for the copy's event before it writes (write after read)
  }
  EXPECT_EQ(to_device(on_dev, Device::cpu()).to_vector<float>()[5], 6.0f);
  EXPECT_EQ(a.to_vector<float>()[5], 106.0f);
}

TEST(Device, AMissedSyncIsCaught) {
  enable();
  Tensor x_dev = to_device(iota(256), kTest0);
  Stream::of(kTest0).synchronize();
  Tensor host;
  {
    Paused hold(kTest0);
    // The copy is queued, not run; non-blocking, so the device's copy writes `host` itself (pinned memory; a blocking
    // copy lands in pinned staging and a CPU copy, which waits for the device's event, fills `host`).
    host = to_device(x_dev, Device::cpu(), /*non_blocking=*/true);
    // Planted: host reads that skip the wait for the device's copy. Touching the buffer then raises.
    set_host_waits_skipped(true);
    const std::string m = message_of([&] { (void)host.to_vector<float>(); });
    set_host_waits_skipped(false);
    EXPECT_NE(m.find("missed sync"), std::string::npos) << m;
  }
  EXPECT_EQ(host.to_vector<float>()[255], 256.0f);  // with the wait, the right values
}

TEST(Device, ADeviceDataErrorSurfacesAtTheNextSyncAndTheDeviceStaysUsable) {
  enable();
  Tensor table = to_device(reshape(iota(40), Shape{10, 4}), kTest0);
  Tensor bad_index = to_device(from_vector<int64_t>({1, 12, 3}, Shape{3}), kTest0);
  Tensor out;
  {
    CallSiteScope site({"train.py", "step", 42});
    out = index_select(table, 0, bad_index);  // returns: the launcher runs the kernel later
  }
  const std::string m = message_of([&] { Stream::of(kTest0).synchronize(); });
  EXPECT_NE(m.find("[index_select]"), std::string::npos) << m;
  EXPECT_NE(m.find("train.py:42"), std::string::npos) << m;
  const std::string read = message_of([&] { (void)out.to_vector<float>(); });
  EXPECT_NE(read.find("invalid"), std::string::npos) << read;  // the failed op's output stays poisoned
  // The next step runs.
  Tensor good_index = to_device(from_vector<int64_t>({1, 2}, Shape{2}), kTest0);
  EXPECT_EQ(index_select(table, 0, good_index).to_vector<float>()[0], 5.0f);
}

TEST(Device, BackwardGivesGradientsOnTheInputsDevice) {
  enable();
  Tensor w = reshape(iota(6), Shape{2, 3});
  w.set_requires_grad(true);
  Tensor w_dev = to_device(w, kTest0);
  Tensor loss = sum(mul(w_dev, w_dev));
  EXPECT_EQ(loss.device(), kTest0);
  Tensor roots[1] = {loss};
  backward(roots, {});
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().device(), Device::cpu());  // through the copy's backward
  EXPECT_EQ(w.grad().to_vector<float>()[4], 10.0f);
}

}  // namespace dg::test
