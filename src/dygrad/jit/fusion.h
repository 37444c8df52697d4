// dygrad.jit's O1 (docs/jit-fusion.md): passes over a captured graph before its arena is planned, and the C++
// generator of its fused elementwise programs. The passes are backend-neutral (they read the op table: fusion class,
// flags, attributes); the CPU runs a fused program with `jit_fused`'s kernel (backend/cpu/fused_jit.cpp) and this
// file writes its C++.
#pragma once
#include <string>
#include <vector>

#include "dygrad/runtime/fused_program.h"
#include "dygrad/runtime/op_def.h"

namespace dg::jit {

// Which passes run (dygrad.jit.config). Each keeps the replay guarantees of docs/jit.md; all but `patterns` keep
// eager's bits too (none reassociates or contracts), so they run under deterministic mode.
struct PassConfig {
  bool dce = true;     // dead-code elimination: ops whose results nothing reads
  bool cse = true;     // common subexpressions: a second op of the same op, attributes and input values
  bool fold = true;    // constant folding: factories and elementwise ops on them computed once, when optimized
  bool fusion = true;  // consecutive elementwise sub-ops of one shape and dtype as one `jit_fused` sub-op
  // Composed code matched into the fused ops that exist (attention): within float rounding, not eager's bits, so
  // dygrad.jit turns it off under deterministic mode.
  bool patterns = true;
  // Elementwise results a forward wrote and the backward reads computed again there from what is still alive
  // instead of held in between (eager's bits: the same functors on the same values).
  bool rematerialize = true;
  // After fusion: an elementwise sub-op's output written over an input that dies with it (eager's bits).
  bool inplace = true;
};

// The graph after each pass (dygrad.jit.graph(fn, ..., passes=True)).
struct PassLog {
  std::string pass;                // "captured", "versions", "cse", "dce", "fold", "patterns", "rematerialize", "fusion", "inplace"
  std::vector<std::string> lines;  // the graph's description after it
  std::string note;                // what it did ("removed 2 ops", "3 groups, 9 ops, 2 buffers eliminated")
};

extern const OpDef op_jit_fused;

// Whether a record runs a guarded fast form in the generated code (float32 exp and log): a loop holding one may run
// twice, so it must read no slot it stores (jit/fusion_codegen.cpp; the inplace pass keeps such programs as they are).
bool guarded_op(const FusedRecord& r, DType dtype);

// The C++ translation unit of these programs: one extern "C" function dg_fused_<index> each.
std::string generate_cpp(const std::vector<std::shared_ptr<FusedProgram>>& programs);

}  // namespace dg::jit
