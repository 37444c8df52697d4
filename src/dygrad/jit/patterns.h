// The O1 pattern pass's shared pieces (docs/jit-fusion.md, "Patterns"): a view of the graph being rewritten, who
// reads and writes each buffer, and the edit that drops matched ops and puts the fused ones in their place. Each
// family matches in a file of its own: jit/patterns.cpp (attention, and the pass itself), jit/patterns_loss.cpp
// (cross-entropy); Passes::patterns runs them one after the other, each on the graph the previous one left.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dygrad/jit/graph.h"

namespace dg::jit {

const OpDef* op_named(std::string_view name);
bool same_view(const Value& a, const Value& b);
Dims contiguous_strides(const Dims& sizes);
int64_t numel_of(const Dims& sizes);
size_t rounded_scratch(size_t n);  // up to kScratchAlignment, as a sub-op's declared scratch

// The graph a family rewrites (Graph's vectors: Passes::patterns is its friend and hands them over).
struct PatternGraph {
  std::vector<Buffer>& buffers;
  std::vector<Value>& values;
  std::vector<GraphOp>& ops;
  Device device;
};

// The ops that write and read each buffer.
struct Uses {
  std::vector<std::vector<int32_t>> writers, readers;
  explicit Uses(const PatternGraph& g);
};

// Matched ops removed, fused ops inserted after the op at a given position (in the order added); apply() makes the
// new op list. New buffers are internal and written (the fused op writes them).
class PatternEdit {
 public:
  explicit PatternEdit(PatternGraph& g) : g_(g), at_(g.ops.size()), removed_(g.ops.size(), 0) {}
  int32_t add_buffer(const Dims& sizes, DType dtype);  // a contiguous value over a new internal buffer
  int32_t add_value(const Value& v);
  int32_t add_constant(double value, DType dtype);  // a 0-d value over a new Fixed buffer (never written) holding it
  GraphOp new_op(const OpDef* def, Attrs attrs, const GraphOp& like) const;  // like's call site
  void insert_after(int32_t position, GraphOp op) { at_[size_t(position)].push_back(std::move(op)); }
  void remove(int32_t op) { removed_[size_t(op)] = 1; }
  void apply();

 private:
  PatternGraph& g_;
  std::vector<std::vector<GraphOp>> at_;
  std::vector<uint8_t> removed_;
};

// The families: each returns what it did ("" when it matched nothing).
std::string attention_patterns(PatternGraph& g);      // jit/patterns.cpp
std::string cross_entropy_patterns(PatternGraph& g);  // jit/patterns_loss.cpp

}  // namespace dg::jit
