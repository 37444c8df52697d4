#include "dygrad/runtime/run_ahead.h"

#include <algorithm>

namespace dg::run_ahead {

namespace {
// The means weigh the last kWindow samples most (an exponential moving average; the plain mean before that many).
constexpr float kWindow = 8.0f;
}  // namespace

uint64_t estimate_ns(const OpDef& op, float units) {
  const OpTiming& t = op.timing;
  if (t.samples.load(std::memory_order_relaxed) == 0.0f)
    return static_cast<uint64_t>(kNominalTaskNs + static_cast<double>(units) * kNominalNsPerUnit);
  const double ns = t.ns.load(std::memory_order_relaxed), mean_units = t.units.load(std::memory_order_relaxed);
  // The op's measured rate over its recent Tasks (a ratio of means: large Tasks weigh most, as they do in the queue);
  // an op without a cost (a batch whose sub-ops carry it) takes its mean run time.
  if (units > 0.0f && mean_units > 0.0) return static_cast<uint64_t>(static_cast<double>(units) * ns / mean_units);
  return static_cast<uint64_t>(ns);
}

void observe(const OpDef& op, float units, uint64_t ns) {
  OpTiming& t = op.timing;
  const float n = t.samples.load(std::memory_order_relaxed);
  const float w = 1.0f / std::min(n + 1.0f, kWindow);
  auto update = [w](std::atomic<float>& mean, float x) {
    const float m = mean.load(std::memory_order_relaxed);
    mean.store(m + w * (x - m), std::memory_order_relaxed);
  };
  update(t.ns, static_cast<float>(ns));
  update(t.units, units);
  t.samples.store(std::min(n + 1.0f, kWindow), std::memory_order_relaxed);
}

}  // namespace dg::run_ahead
