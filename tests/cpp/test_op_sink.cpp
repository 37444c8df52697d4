// The op-sink chain (runtime/op_sink.h): what a sink is shown, consumption, the order of the chain, re-entry, the
// stream's numbering, and the host-read hook.
#include <string>
#include <thread>
#include <vector>

#include "dygrad/ops/dispatch.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/op_sink.h"
#include "harness.h"

namespace dg::test {
namespace {

void drain() { Stream::cpu().synchronize(); }

// Records what it is shown; consumes the ops named `consume`.
struct Recorder : OpSink {
  std::string tag;
  std::vector<std::string>* log;
  std::string consume;
  std::vector<std::string> ops, reads, read_sites;
  std::vector<uint64_t> enqueued;
  std::vector<std::string> attrs;
  Recorder(std::string tag_, std::vector<std::string>* log_, std::string consume_ = "")
      : tag(std::move(tag_)), log(log_), consume(std::move(consume_)) {}
  bool on_op(const OpCall& call) override {
    ops.push_back(call.op.name);
    attrs.push_back(call.attrs.to_string());
    if (log) log->push_back(tag + ":" + call.op.name);
    return call.op.name == consume;
  }
  void on_enqueued(const Task& task) override { enqueued.push_back(task.seq); }
  void on_host_read(const HostRead& read) override {
    reads.push_back(read.reader);
    read_sites.push_back(read.site.file ? std::string(read.site.file) + ":" + std::to_string(read.site.line) : "");
  }
};

TEST(OpSink, ASinkSeesTheOpItsOperandsTypedAttrsAndCallSite) {
  drain();
  Tensor a = full(Shape{3}, 1.0), b = full(Shape{3}, 2.0);
  a.wait_readable();
  b.wait_readable();
  struct Inspect : OpSink {
    bool seen = false;
    bool on_op(const OpCall& call) override {
      if (std::string(call.op.name) != "add") return false;
      seen = true;
      EXPECT_EQ(call.inputs.size(), 2u);
      EXPECT_EQ(call.outputs.size(), 1u);
      EXPECT_EQ(call.outputs[0].shape(), (Dims{3}));
      EXPECT_EQ(call.attrs.get<AddAttrs>().alpha.to_double(), 3.0);
      EXPECT_STREQ(call.site.file, "model.py");
      EXPECT_EQ(call.site.line, 12u);
      return false;
    }
  } inspect;
  Tensor c;
  {
    OpSinkScope scope(inspect);
    CallSiteScope site({"model.py", "forward", 12});
    c = add(a, b, 3.0);
  }
  EXPECT_TRUE(inspect.seen);
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(3, 7.0f));  // not consumed: the stream ran it
}

TEST(OpSink, AConsumedOpNeverReachesTheSinksAfterItOrTheStream) {
  drain();
  Tensor a = full(Shape{4}, 1.0);
  a.wait_readable();
  std::vector<std::string> log;
  Recorder outer("outer", &log), inner("inner", &log, "mul_scalar");
  uint64_t before = 0;
  {
    OpSinkScope o(outer), i(inner);  // inner is newest: it sees each op first
    before = Stream::cpu().enqueued();
    Tensor m = mul(a, 2.0);         // consumed by inner
    EXPECT_EQ(Stream::cpu().enqueued(), before);
    Tensor s = add(a, 1.0);         // both see it, the stream runs it
    EXPECT_EQ(Stream::cpu().enqueued(), before + 1);
  }
  EXPECT_EQ(log, (std::vector<std::string>{"inner:mul_scalar", "inner:add_scalar", "outer:add_scalar"}));
  EXPECT_EQ(inner.enqueued, std::vector<uint64_t>{before + 1});  // the stream told both the number it gave
  EXPECT_EQ(outer.enqueued, std::vector<uint64_t>{before + 1});
  EXPECT_NE(inner.attrs[0].find("2"), std::string::npos) << inner.attrs[0];  // mul_scalar's value
}

TEST(OpSink, ThreadSinksComeBeforeProcessSinksAndProcessSinksSeeEveryThread) {
  drain();
  std::vector<std::string> log;
  Recorder process("process", &log), thread("thread", &log);
  op_sinks::add_process_sink(process);
  {
    OpSinkScope scope(thread);
    Tensor z = zeros(Shape{2});
  }
  std::thread other([&] { Tensor z = ones(Shape{2}); });
  other.join();
  drain();
  op_sinks::remove_process_sink(process);
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0], "thread:" + thread.ops[0]);
  EXPECT_EQ(log[1], "process:" + thread.ops[0]);
  EXPECT_EQ(process.ops.size(), 2u);  // the other thread's op too
  EXPECT_THROW(op_sinks::remove_process_sink(process), Error);
}

TEST(OpSink, WhatASinkDoesInsideItsCallbackGoesToTheSinksAfterIt) {
  drain();
  Tensor a = full(Shape{2}, 5.0);
  a.wait_readable();
  std::vector<std::string> log;
  Recorder outer("outer", &log);
  struct Reentrant : OpSink {
    std::vector<std::string>* log;
    int calls = 0;
    Tensor a;
    bool on_op(const OpCall& call) override {
      log->push_back(std::string("reentrant:") + call.op.name);
      if (++calls == 1) {
        Tensor inner = neg(a);   // an op of its own: only `outer` sees it
        (void)inner.to_vector<float>();  // a host read of its own: only `outer` is told
      }
      return false;
    }
  } reentrant;
  reentrant.log = &log;
  reentrant.a = a;
  {
    OpSinkScope o(outer), r(reentrant);
    Tensor s = sum(a);
  }
  EXPECT_EQ(log, (std::vector<std::string>{"reentrant:sum", "outer:neg", "outer:sum"}));
  EXPECT_EQ(reentrant.calls, 1);
  EXPECT_EQ(outer.reads, std::vector<std::string>{"to_vector"});
}

TEST(OpSink, TheChainIsKeptInOrderAndMisuseRaises) {
  std::vector<std::string> log;
  Recorder a("a", &log), b("b", &log), c("c", &log);
  op_sinks::push(a);
  op_sinks::push(b);
  op_sinks::push(c);
  EXPECT_THROW(op_sinks::push(b), Error);  // already in a chain
  op_sinks::remove(b);                     // from the middle
  Tensor z = zeros(Shape{1});
  op_sinks::remove(c);
  op_sinks::remove(a);
  EXPECT_THROW(op_sinks::remove(a), Error);
  EXPECT_EQ(log, (std::vector<std::string>{"c:" + c.ops[0], "a:" + a.ops[0]}));
  EXPECT_FALSE(op_sinks::engaged());
}

TEST(OpSink, HostReadsAreReportedWithTheReaderAndTheLine) {
  drain();
  Tensor t = full(Shape{3}, 2.0);
  Recorder rec("rec", nullptr);
  {
    OpSinkScope scope(rec);
    CallSiteScope site({"train.py", "step", 40});
    EXPECT_THROW(t.item_scalar(), Error);  // 3 elements: raises before reading
  }
  EXPECT_TRUE(rec.reads.empty());
  {
    OpSinkScope scope(rec);
    CallSiteScope site({"train.py", "step", 41});
    (void)sum(t).item<float>();
    (void)t.to_vector<float>();
    t.wait_readable();
    {
      HostReadScope reader("one_hot");
      (void)t.to_vector<float>();
    }
  }
  EXPECT_EQ(rec.reads, (std::vector<std::string>{"item", "to_vector", "read", "one_hot"}));
  EXPECT_EQ(rec.read_sites[0], "train.py:41");
}

TEST(OpSink, ASinkRefusesAHostReadAndNothingIsRead) {
  drain();
  Tensor t = full(Shape{1}, 4.0);
  struct Refuse : OpSink {
    void on_host_read(const HostRead& read) override {
      fail(ErrorKind::Runtime, "[", read.reader, "] a host read inside a recorded region (", read.site.file, ":",
           read.site.line, ")");
    }
  } refuse;
  {
    OpSinkScope scope(refuse);
    CallSiteScope site({"loop.py", "run", 7});
    try {
      (void)t.item<float>();
      ADD_FAILURE() << "the read was not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[item] a host read inside a recorded region (loop.py:7)"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(t.item<float>(), 4.0f);  // the chain is gone: the read goes ahead, the stream is intact
}

}  // namespace
}  // namespace dg::test
