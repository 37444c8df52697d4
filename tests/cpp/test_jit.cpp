// dygrad.jit's core (jit/graph.h): a capture's buffers, the replay as one Task (results, arena reuse, RNG, the
// poisoned-input rule per sub-op, version counters), the segment batcher, and a graph on the test device (its
// stream, its memory). The Python API and the bitwise training steps: tests/python/test_jit.py, test_jit_device.py.
#include <cstring>
#include <string>
#include <vector>

#include "dygrad/jit/graph.h"
#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/math.h"
#include "dygrad/runtime/context.h"
#include "dygrad/runtime/devices.h"
#include "harness.h"

namespace dg::test {
namespace {
using jit::Capture;
using jit::Graph;
using jit::SegmentBatcher;

void drain() { Stream::cpu().synchronize(); }

// test_jit_checked: out = in, but the kernel fails when its attribute says so (a data error found by a kernel).
struct JitCheckedAttrs {
  static constexpr const char* kName = "JitCheckedAttrs";
  bool fail = false;
  DG_ATTRS_FIELDS(fail);
};
void jit_checked_kernel(Task& task) {
  DG_CHECK(!task.attrs.get<JitCheckedAttrs>().fail, Index, "[test_jit_checked] a bad value");
  std::memcpy(task.outputs[0].raw_data(), task.inputs[0].raw_data(),
              static_cast<size_t>(task.inputs[0].numel()) * task.inputs[0].itemsize());
}
const OpDef op_test_jit_checked("test_jit_checked", attrs_type<JitCheckedAttrs>());
DG_REGISTER_KERNEL(test_jit_checked, Device::Type::CPU, jit_checked_kernel);
Tensor checked(const Tensor& a, bool fail) {
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  enqueue(op_test_jit_checked, {a}, {out}, JitCheckedAttrs{fail});
  return out;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(JitGraph, AReplayRunsAsOneTaskOnNewArgumentsAndEqualsEager) {
  drain();
  Tensor w = full(Shape{4}, 2.0);  // existed before: a fixed buffer
  auto body = [&](const Tensor& x) { return add(mul(exp(x), w), x); };
  Tensor x0 = full(Shape{4}, 0.5);
  std::shared_ptr<Graph> graph;
  {
    Capture capture({x0});
    Tensor y = body(x0);
    capture.end();
    EXPECT_EQ(capture.num_ops(), 3u);
    graph = capture.build({y});
    ASSERT_TRUE(graph) << (capture.problems().empty() ? "" : capture.problems()[0]);
  }
  EXPECT_EQ(graph->num_ops(), 3u);
  EXPECT_EQ(graph->num_escaping(), 1u);  // y
  EXPECT_GT(graph->arena_bytes(), 0u);   // exp's and mul's temporaries
  for (float v : {0.25f, -1.0f, 3.0f}) {
    Tensor x = full(Shape{4}, v);
    x.wait_readable();
    const uint64_t before = Stream::cpu().enqueued();
    std::vector<Tensor> out = graph->launch({x});
    EXPECT_EQ(Stream::cpu().enqueued(), before + 1);  // one Task
    EXPECT_EQ(values(out[0]), values(body(x)));
  }
}

TEST(JitGraph, TheArenaPlacesBuffersByLifetime) {
  drain();
  Tensor x0 = full(Shape{1024}, 1.0);
  std::shared_ptr<Graph> graph;
  {
    Capture capture({x0});
    Tensor t = x0;
    for (int i = 0; i < 8; ++i) t = add(t, 1.0);  // a chain: each temporary dies at the next op
    capture.end();
    graph = capture.build({t});
    ASSERT_TRUE(graph);
  }
  // Seven temporaries of 4 KiB, at most two alive at once: the arena holds two, not seven.
  EXPECT_LE(graph->arena_bytes(), 2u * 4096u);
  Tensor x = full(Shape{1024}, 3.0);
  EXPECT_EQ(values(graph->launch({x})[0]), std::vector<float>(1024, 11.0f));
}

TEST(JitGraph, RandomSubOpsDrawNewCountersEachLaunchAsEagerWould) {
  drain();
  manual_seed(7);
  std::shared_ptr<Graph> graph;
  Tensor dummy = full(Shape{1}, 0.0);
  {
    Capture capture({dummy});
    Tensor r = add(rand(Shape{8}), rand(Shape{8}));
    capture.end();
    graph = capture.build({r});
    ASSERT_TRUE(graph);
  }
  manual_seed(11);
  std::vector<float> eager1 = values(add(rand(Shape{8}), rand(Shape{8})));
  std::vector<float> eager2 = values(add(rand(Shape{8}), rand(Shape{8})));
  manual_seed(11);
  EXPECT_EQ(values(graph->launch({dummy})[0]), eager1);
  EXPECT_EQ(values(graph->launch({dummy})[0]), eager2);
}

TEST(JitGraph, AFailingSubOpPoisonsWhatFollowsAndKeepsBuffersThatExisted) {
  drain();
  Tensor state = full(Shape{4}, 1.0);  // an optimizer state: updated in place by the graph
  Tensor flag = full(Shape{1}, 0.0);
  std::shared_ptr<Graph> good, bad;
  for (bool fail : {false, true}) {
    CallSiteScope site(CallSite{"model.py", "step", 12});  // the line the failing sub-op's error names
    Capture capture({flag});
    Tensor z;
    {  // the temporaries die inside the captured code, as a Python function's locals do
      Tensor v = checked(full(Shape{4}, 5.0), false);
      Tensor y = checked(v, fail);
      z = add(y, 1.0);
      copy_(state, add(state, z));  // reads the failed value: skipped, state kept
    }
    capture.end();
    (fail ? bad : good) = capture.build({z});
    for (const std::string& p : capture.problems()) ADD_FAILURE() << p;
    if (fail) {
      EXPECT_THROW(drain(), Error);  // the capture ran eagerly: its own failure, at the sync
    }
  }
  ASSERT_TRUE(good && bad);
  drain();
  std::vector<float> before = values(state);
  std::vector<Tensor> out = bad->launch({flag});
  try {
    drain();
    FAIL() << "the replay's failure must raise at the sync";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[test_jit_checked] a bad value"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(at model.py:12, in a graph dygrad.jit replayed)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(values(state), before);             // existed before the launch: kept
  EXPECT_NE(out[0].storage().poisoned_by(), 0u);  // made by the failed computation: poisoned
  good->launch({flag});                          // the arena's poison marks are cleared by the next replay
  EXPECT_EQ(values(state), std::vector<float>(4, before[0] + 6.0f));
}

TEST(JitGraph, VersionCountersOfBuffersWrittenInPlaceAreBumpedAtLaunch) {
  drain();
  Tensor s = full(Shape{2}, 0.0);
  Tensor arg = full(Shape{2}, 1.0);
  std::shared_ptr<Graph> graph;
  {
    Capture capture({arg});
    add_(s, arg);
    add_(s, arg);
    capture.end();
    graph = capture.build({});
    ASSERT_TRUE(graph);
  }
  const uint32_t v = s.version();
  graph->launch({arg});
  EXPECT_EQ(s.version(), v + 2);
  EXPECT_EQ(values(s), std::vector<float>(2, 4.0f));  // two captured adds, two replayed
}

TEST(JitGraph, WhatOnlyTheHostKnowsIsACutOrAProblem) {
  drain();
  Tensor x = full(Shape{3}, 1.0);
  {
    Capture capture({x});
    Tensor y = add(x, 1.0);
    (void)y.to_vector<float>();  // a host read: the function is cut here
    Tensor z = mul(y, 2.0);
    capture.end();
    EXPECT_EQ(capture.cuts().size(), 1u);
    EXPECT_EQ(capture.cuts()[0].before_op, 1u);
    EXPECT_EQ(capture.cuts()[0].reader, "to_vector");
    EXPECT_FALSE(capture.build({z}));
  }
  Tensor kept;
  {
    Capture capture({x});
    kept = add(x, 1.0);  // made inside, held outside its results
    Tensor z = mul(kept, 2.0);
    capture.end();
    EXPECT_FALSE(capture.build({z}));
    ASSERT_EQ(capture.problems().size(), 1u);
    EXPECT_NE(capture.problems()[0].find("still referenced"), std::string::npos);
  }
  {
    Capture capture({x}, /*fullgraph=*/true);
    Tensor y = add(x, 1.0);
    EXPECT_THROW((void)y.to_vector<float>(), Error);
    capture.end();
  }
}

TEST(JitSegments, TheOpsBetweenHostReadsRunAsOneTaskEach) {
  drain();
  Tensor x = full(Shape{3}, 1.0);
  x.wait_readable();
  const uint64_t before = Stream::cpu().enqueued();
  std::vector<float> read;
  Tensor z;
  {
    SegmentBatcher batcher;
    Tensor y = add(mul(x, 3.0), 1.0);
    read = y.to_vector<float>();  // the first segment is enqueued here
    z = exp(add(y, -4.0));
    batcher.end();  // the second here
    EXPECT_EQ(batcher.segments(), 2u);
    EXPECT_EQ(batcher.ops_gathered(), 4u);
  }
  EXPECT_EQ(Stream::cpu().enqueued(), before + 2);
  EXPECT_EQ(read, std::vector<float>(3, 4.0f));
  EXPECT_EQ(values(z), std::vector<float>(3, 1.0f));
}

// --- on the test device (docs/jit.md, "On a device") --------------------------------------------------------------
const Device kTest0{Device::Type::Test, 0};
void enable_test_devices() { ASSERT_GE(enable_devices(Device::Type::Test, 1), 1); }
Tensor on_test0(const Tensor& t) { return to_device(t, kTest0); }

TEST(JitDevice, AGraphOfDeviceTensorsReplaysAsOneTaskOnTheDevicesStreamWithTheCpusValues) {
  enable_test_devices();
  Stream& device = Stream::of(kTest0);
  auto body = [](const Tensor& x, const Tensor& w) { return add(mul(exp(x), w), x); };
  Tensor w = on_test0(full(Shape{4}, 2.0));
  Tensor x0 = on_test0(full(Shape{4}, 0.5));
  device.synchronize();
  std::shared_ptr<Graph> graph;
  {
    Capture capture({x0});
    Tensor y = body(x0, w);
    capture.end();
    graph = capture.build({y});
    ASSERT_TRUE(graph) << (capture.problems().empty() ? "" : capture.problems()[0]);
  }
  EXPECT_EQ(graph->device(), kTest0);
  EXPECT_GT(graph->arena_bytes(), 0u);
  for (float v : {0.25f, -1.0f, 3.0f}) {
    Tensor x = on_test0(full(Shape{4}, v));
    device.synchronize();
    drain();
    const uint64_t on_device = device.enqueued(), on_cpu = Stream::cpu().enqueued();
    std::vector<Tensor> out = graph->launch({x});
    EXPECT_EQ(device.enqueued(), on_device + 1);  // one Task, on the device's stream
    EXPECT_EQ(Stream::cpu().enqueued(), on_cpu);
    EXPECT_EQ(out[0].device(), kTest0);  // a new buffer of the device
    EXPECT_EQ(values(out[0]), values(body(full(Shape{4}, v), full(Shape{4}, 2.0))));
  }
}

TEST(JitDevice, AFailingSubOpOnTheDevicePoisonsWhatFollowsAndKeepsBuffersThatExisted) {
  enable_test_devices();
  Stream& device = Stream::of(kTest0);
  Tensor state = on_test0(full(Shape{4}, 1.0));
  Tensor flag = on_test0(full(Shape{1}, 0.0));
  std::shared_ptr<Graph> good, bad;
  for (bool fail : {false, true}) {
    CallSiteScope site(CallSite{"model.py", "step", 12});
    Capture capture({flag});
    Tensor z;
    {
      Tensor v = checked(full(Shape{4}, 5.0, {.device = kTest0}), false);  // made on the device: no copy
      Tensor y = checked(v, fail);
      z = add(y, 1.0);
      copy_(state, add(state, z));
    }
    capture.end();
    (fail ? bad : good) = capture.build({z});
    for (const std::string& p : capture.problems()) ADD_FAILURE() << p;
    if (fail) {
      EXPECT_THROW(device.synchronize(), Error);
    }
  }
  ASSERT_TRUE(good && bad);
  drain();
  device.synchronize();
  const std::vector<float> before = values(state);
  std::vector<Tensor> out = bad->launch({flag});
  try {
    device.synchronize();
    FAIL() << "the replay's failure must raise at the device's sync";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[test_jit_checked] a bad value"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(at model.py:12, in a graph dygrad.jit replayed)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(values(state), before);
  // The poison mark is the device's event: reading the result names the failure of the device's stream.
  ASSERT_NE(out[0].storage().poisoned_by(), 0u);
  EXPECT_EQ(event_stream(out[0].storage().poisoned_by()), stream_id(kTest0));
  good->launch({flag});
  EXPECT_EQ(values(state), std::vector<float>(4, before[0] + 6.0f));
}

TEST(JitDevice, AFunctionThatCopiesBetweenDevicesIsNoGraphAndItsSegmentsRunPerDevice) {
  enable_test_devices();
  Tensor x = full(Shape{3}, 1.5);
  drain();
  {
    Capture capture({x});
    Tensor y = to_device(mul(on_test0(x), 2.0), Device::cpu());
    capture.end();
    EXPECT_FALSE(capture.build({y}));
    bool named = false;
    for (const std::string& p : capture.problems()) named = named || p.find("[copy_device] copies from") == 0;
    EXPECT_TRUE(named);
  }
  Stream& device = Stream::of(kTest0);
  device.synchronize();
  const uint64_t on_device = device.enqueued();
  Tensor z, e;
  {
    SegmentBatcher batcher;
    Tensor d = mul(add(on_test0(x), 1.0), 2.0);  // the copy passes through; add and mul: one device segment
    z = add(to_device(d, Device::cpu()), 1.0);    // the copy back passes through; a CPU segment follows
    e = mul(d, 3.0);  // a device op right after CPU ops, no copy between: a segment of its own, on the device
    batcher.end();
  }
  // The device's stream ran two copies and two segments (not three ops); reading e copies it, after this count.
  EXPECT_EQ(device.enqueued(), on_device + 4);
  EXPECT_EQ(values(z), std::vector<float>(3, 6.0f));
  EXPECT_EQ(values(e), std::vector<float>(3, 15.0f));
}

}  // namespace
}  // namespace dg::test
