// dygrad.jit's O1 passes (docs/jit-fusion.md), as Graph's friend: jit/fusion.cpp (CSE, DCE, elementwise fusion,
// the pass pipeline), jit/fold.cpp (constant folding), jit/patterns.cpp (composed code matched into the fused ops that exist), jit/remat.cpp
// (elementwise results computed again where they are read late instead of held) and jit/inplace.cpp (outputs written
// over the inputs that die with them).
#pragma once
#include <string>
#include <vector>

#include "dygrad/jit/graph.h"

namespace dg::jit {

// An op elementwise fusion takes (a functor the fused program knows, float32 or float64 operands of one dtype, one
// output that no dim broadcasts): what the rematerialize pass may compute again.
bool fusible_elementwise(const GraphOp& op, const std::vector<Value>& values);
// What a run takes besides: bfloat16 ops and the float32<->bfloat16 casts too (float32 programs); `compute` the
// program's compute type (jit/fusion.cpp).
bool fusible_in_run(const GraphOp& op, const std::vector<Value>& values, DType& compute);

struct Passes {
  static void run(Graph& g, const PassConfig& config, std::vector<PassLog>* log);
  static std::string dce(Graph& g);
  static std::string cse(Graph& g);
  static std::string versions(Graph& g);
  static std::string fold(Graph& g);
  static std::string patterns(Graph& g);
  static std::string rematerialize(Graph& g);
  static std::string fuse(Graph& g);
  static std::string inplace(Graph& g);  // jit/inplace.cpp: an output written over an input dying with it
  static size_t lower_cats(Graph& g);  // jit/lower.cpp: `cat` into copies into its output's slices (fuse runs it)
  static void lifetimes(Graph& g);
  // After the passes: each fused one-pass program's slots that lie in one buffer at a fixed distance from another of
  // the same dtype and strides (FusedProgram::slot_base, jit/fusion.cpp).
  static void alias_slots(Graph& g);
};

}  // namespace dg::jit
