// A device stream whose kernels complete after their launch returns (CUDA): the launcher and the completer
// (runtime/stream.h, DeviceCompletion; docs/stream.md, "Device completion"). The CPU's worker and the test device's
// launcher (stream.cpp, worker_loop) do not come here.
#include <algorithm>
#include <chrono>

#include "dygrad/runtime/run_ahead.h"
#include "dygrad/runtime/stream.h"

namespace dg {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

// Launches the published Tasks in order. A launch is cheap and returns before the device runs the kernel, so the
// launcher runs ahead of the device by as many Tasks as the ring holds (the host's own run-ahead bound is on the
// estimates the completer measures). It sleeps on work_signal_ as the CPU's worker does, without spinning: a launch
// costs microseconds, a futex wake-up is small next to the device's own latency.
void Stream::launcher_loop() {
  for (;;) {
    const uint64_t launched = launched_.load(std::memory_order_relaxed);
    if (published_.load(std::memory_order_seq_cst) <= launched) {
      const uint32_t signal = work_signal_.load(std::memory_order_seq_cst);
      worker_sleeping_.store(true, std::memory_order_seq_cst);
      if (published_.load(std::memory_order_seq_cst) <= launched && !stopping_.load()) work_signal_.wait(signal);
      worker_sleeping_.store(false, std::memory_order_seq_cst);
      if (stopping_.load(std::memory_order_acquire) && published_.load(std::memory_order_seq_cst) <= launched) return;
      continue;
    }
    if (paused_.load(std::memory_order_acquire)) [[unlikely]] {  // tests hold a device's launcher
      paused_.wait(1, std::memory_order_acquire);
      continue;
    }
    Task& task = slots_[launched % kCapacity];
    // The completer saw a fault: clear the word before this launch, so this Task and later ones run again. The
    // completer reads cleared_before_ only for Tasks launched after this store (launched_'s release below).
    if (clear_fault_requested_.exchange(false, std::memory_order_acq_rel)) {
      completion_->clear_fault();
      cleared_before_.store(task.seq, std::memory_order_release);
    }
    launch_ns_[launched % kCapacity] = now_ns();
    run_task(task);  // the poisoned-input rule on the marks known now, then the kernel's launch
    completion_->launched(task);
    launched_.store(launched + 1, std::memory_order_release);
    launch_signal_.fetch_add(1, std::memory_order_seq_cst);
    launch_signal_.notify_one();
  }
}

// Counts Tasks completed in order, each once its device work has run. A fault in the device's error word becomes the
// failure of the Task that wrote it (naming its op and the Python line, as a CPU kernel's exception does); the Tasks
// launched after it until the launcher clears the word did nothing and are treated as skipped. Each Task's run time,
// from its launch or the previous completion (whichever is later) to its own, feeds the run-ahead bound's estimates.
void Stream::completer_loop() {
  uint64_t open_fault = 0;  // the failed Task while the word is set (Tasks after it are skipped), else 0
  int64_t last_end = now_ns();
  for (;;) {
    const uint64_t seq = completed_.load(std::memory_order_relaxed) + 1;
    while (launched_.load(std::memory_order_acquire) < seq) {
      const uint32_t signal = launch_signal_.load(std::memory_order_seq_cst);
      if (launched_.load(std::memory_order_acquire) >= seq) break;
      if (stopping_.load(std::memory_order_acquire)) return;  // set once everything published has completed
      launch_signal_.wait(signal, std::memory_order_seq_cst);
    }
    Task& task = slots_[(seq - 1) % kCapacity];  // not reclaimed: the host clears only slots below completed_
    if (open_fault != 0 && seq >= cleared_before_.load(std::memory_order_acquire)) {
      open_fault = 0;
      cleared_before_.store(UINT64_MAX, std::memory_order_relaxed);
    }
    DeviceFault fault;
    const bool faulted = completion_->wait_completed(seq, fault);
    const int64_t end = now_ns();
    if (faulted && open_fault == 0) {
      open_fault = fault.seq;
      Task& failed = slots_[(fault.seq - 1) % kCapacity];  // fault.seq <= seq: not reclaimed either
      record_failure(failed, fault.kind, std::string("[") + failed.op->name + "] " + fault.message);
      clear_fault_requested_.store(true, std::memory_order_release);  // at the launcher's next launch
    }
    if (open_fault != 0 && seq > open_fault) skipped_after_fault(task, open_fault);
    const uint64_t took = static_cast<uint64_t>(end - std::max(last_end, launch_ns_[(seq - 1) % kCapacity]));
    last_end = end;
    run_ahead::observe(*task.op, task_units_[(seq - 1) % kCapacity], took);
    busy_ns_.store(busy_ns_.load(std::memory_order_relaxed) + took, std::memory_order_release);
    completed_.store(seq, std::memory_order_seq_cst);
    if (seq >= wait_target_.load(std::memory_order_seq_cst)) {
      done_signal_.fetch_add(1, std::memory_order_seq_cst);
      done_signal_.notify_all();
    }
  }
}

void Stream::skipped_after_fault(Task& task, uint64_t failed_seq) {
  const uint64_t bad = event_of(failed_seq);
  bool kept = false;
  for (Tensor& out : task.outputs) {
    if (out.storage().poisoned_by()) continue;  // keeps the failure it names
    if (out.device() == device_ && out.storage().birth_seq() < failed_seq) kept = true;
    else out.storage().poison(bad);
  }
  if (kept) note_skipped_update(task, failed_seq);
}

void Stream::stop_completer() {
  if (!completer_.joinable()) return;
  // The launcher has stopped (worker_ joined) and every launched Task completed (shutdown drained the ring).
  stopping_.store(true, std::memory_order_seq_cst);
  launch_signal_.fetch_add(1, std::memory_order_seq_cst);
  launch_signal_.notify_all();
  completer_.join();
}

}  // namespace dg
