// dygrad.jit's O1 passes (docs/jit-fusion.md), as Graph's friend: jit/fusion.cpp (CSE, DCE, elementwise fusion,
// the pass pipeline) and jit/patterns.cpp (composed code matched into the fused ops that exist).
#pragma once
#include <string>
#include <vector>

#include "dygrad/jit/graph.h"

namespace dg::jit {

struct Passes {
  static void run(Graph& g, const PassConfig& config, std::vector<PassLog>* log);
  static std::string dce(Graph& g);
  static std::string cse(Graph& g);
  static std::string patterns(Graph& g);
  static std::string fuse(Graph& g);
  static void lifetimes(Graph& g);
};

}  // namespace dg::jit
