// Selective recompute's op cache as an op sink (runtime/op_sink.h; docs/recompute.md, "How"): each op that writes
// fresh outputs (no view, no in-place op, no output sharing an input's memory) is shown to a policy, which lets it
// run, skips it (a recomputation that stops before anything reads its outputs) or gives cached tensors whose
// storage the outputs adopt (no copy, no Task). The policy is the recompute context's (Python, utils/checkpoint.py);
// the rules around it are here.
#pragma once
#include <functional>
#include <vector>

#include "dygrad/runtime/op_sink.h"

namespace dg {

class RecomputeSink final : public OpSink {
 public:
  enum class Decision { Run, Skip, Adopt };
  // Adopt: `cached` holds one tensor per output, of the output's shape, dtype and device (checked here).
  using Policy = std::function<Decision(const OpCall& call, std::vector<Tensor>& cached)>;
  explicit RecomputeSink(Policy policy) : policy_(std::move(policy)) {}
  bool on_op(const OpCall& call) override;

  // Only fresh outputs are shown: an op whose outputs alias anything cannot be replaced by adopting storage.
  static bool fresh_outputs(const OpCall& call);

 private:
  Policy policy_;
};

}  // namespace dg
