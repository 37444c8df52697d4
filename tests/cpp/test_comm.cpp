// The communication layer without MPI (distributed/comm.h): the group of one runs every operation through
// comm_start, the communication thread and comm_wait, so the ordering with the compute stream, buffers kept
// alive by the Work and errors are tested here, and under TSan (Comm* in the Makefile's TSAN_TESTS).
#include <chrono>
#include <thread>
#include <vector>

#include "dygrad/distributed/comm.h"
#include "dygrad/runtime/stream.h"
#include "harness.h"

using namespace dg;
using namespace dg::test;

namespace {
template <typename F>
void expect_message(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}
// A waited operation returns once its Work completes; the communication thread retires it (and lowers the in-flight
// count) just after, so the count drains to zero rather than being zero at once.
void expect_in_flight_drains() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (dist::comm_in_flight() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(dist::comm_in_flight(), 0u);
}

}  // namespace

TEST(Comm, AllReduceOfOneRankOrdersLaterOpsAfterIt) {
  auto g = dist::single_process_group();
  Tensor x = tensor_from({1, 2, 3, 4}, Shape{4}, DType::Float32);
  Tensor y = mul(x, 2.0);  // written by the stream before comm_start runs
  auto w = g->all_reduce(y, dist::ReduceOp::Avg, /*async_op=*/true);
  w->wait_on_stream();
  w->wait_on_stream();  // once only
  Tensor z = add(y, 1.0);
  EXPECT_EQ(z.to_vector<double>(), (std::vector<double>{3, 5, 7, 9}));
  EXPECT_TRUE(w->completed());
  EXPECT_FALSE(w->failed());
}

TEST(Comm, ManyOperationsInFlightFromSeveralThreadsComplete) {
  auto g = dist::single_process_group();
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        Tensor in = full(Shape{16}, static_cast<double>(t * 100 + i));
        Tensor out = zeros(Shape{16});
        auto w = g->all_gather_into_tensor(out, in, /*async_op=*/false);  // in dies here; the Work keeps it
        in = Tensor();
        ASSERT_EQ(out.to_vector<double>()[15], static_cast<double>(t * 100 + i));
      }
    });
  for (auto& th : threads) th.join();
  Stream::cpu().synchronize();
  expect_in_flight_drains();
}

TEST(Comm, ValidationNamesTheFunctionAndTheShapes) {
  auto g = dist::single_process_group();
  Tensor x = zeros(Shape{4, 4});
  expect_message([&] { g->all_reduce(transpose(x, 0, 1), dist::ReduceOp::Sum, false); },
                 "[all_reduce] tensor of shape (4, 4)");
  expect_message([&] { g->all_gather_into_tensor(zeros(Shape{3}), zeros(Shape{2}), false); },
                 "world_size times input tensor size");
  expect_message([&] { g->all_reduce(zeros(Shape{2}, {.dtype = DType::Int64}), dist::ReduceOp::Avg, false); },
                 "ReduceOp.AVG needs a floating-point tensor");
  expect_message([&] { g->send(x, 0, 0, false); }, "[send] Invalid destination rank");
}

TEST(Comm, BarrierOfOneReturns) {
  auto g = dist::single_process_group();
  g->barrier();
  expect_in_flight_drains();
}

// DistributedDataParallel's buckets: the communication thread reads the pieces and hands them back to the host
// (Stream::release_on_host), from several threads at once under TSan.
TEST(Comm, GatheredAllReduceReadsThePiecesFromSeveralThreads) {
  auto g = dist::single_process_group();
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const double v = t * 100 + i;
        Tensor out = full(Shape{2, 12}, -1.0);
        std::vector<Tensor> pieces{full(Shape{16}, v), zeros(Shape{0}), full(Shape{2, 4}, v + 1)};
        auto w = g->all_reduce_gathered(out, std::move(pieces), dist::ReduceOp::Sum, /*async_op=*/i % 2 == 0);
        if (i % 2 == 0) w->wait_on_stream();
        const std::vector<double> got = out.to_vector<double>();
        ASSERT_EQ(got[0], v);
        ASSERT_EQ(got[15], v);
        ASSERT_EQ(got[16], v + 1);
        ASSERT_EQ(got[23], v + 1);
      }
    });
  for (auto& th : threads) th.join();
  Stream::cpu().synchronize();
  expect_in_flight_drains();
  expect_message([&] { g->all_reduce_gathered(zeros(Shape{3}), {zeros(Shape{2})}, dist::ReduceOp::Sum, false); },
                 "[all_reduce] the pieces have 2 elements in all, the output (3,) has 3");
}
