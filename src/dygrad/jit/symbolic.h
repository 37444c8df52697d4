// Symbolic shapes for dygrad.jit (docs/jit.md, "Symbolic shapes"): one graph serving many sizes of the dimensions a
// compiled function marks dynamic. Built from captures of the same function at different sizes (samples): every integer
// a graph holds (a buffer's bytes, a value's offset, sizes and strides, an integral scalar attribute such as a mean's
// divisor, the RNG counters each random sub-op draws, an argument's own geometry) is fitted as a sum of at most two
// monomials of the symbols, and an instance at new sizes evaluates the fits, then plans its own arena, Tasks and
// scratch from them (Graph::prepare).
//
// The rule that keeps it from guessing: a fit is accepted only with one sample to spare (a one-term fit needs two
// samples, a two-term fit three), and a size is served only when every accepted fit of the fewest terms agrees there
// and every symbol it changes has been varied alone between two samples. Anything else (a symbol not varied yet, an
// ambiguous or fractional fit, an argument laid out otherwise) is a refusal with its reason: the caller captures that
// call instead. Captures that differ in more than integers (ops, attributes other than integral scalars, buffers
// outside the function) cannot join: each size is then captured on its own.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dygrad/jit/graph.h"

namespace dg::jit {

class SymbolicGraph {
 public:
  // One name per dynamic dim ("tensor argument 0 dim 1"), as messages name it. Dims equal at every capture are one
  // symbol (torch's duck sizing); a point gives every dim's size.
  explicit SymbolicGraph(std::vector<std::string> symbol_names);

  // Adds a capture made at `point` (each symbol's value) with these tensor arguments. Returns "" or why it cannot
  // join the earlier samples (they differ in more than sizes): the caller then captures each size on its own.
  // `extras`: integers the caller fits beside the graph's own (the sizes Python compared during the capture, whose
  // comparisons it re-evaluates at an instance's point: docs/jit.md, "Python comparing sizes"); every sample gives as
  // many.
  std::string add(std::shared_ptr<Graph> graph, const std::vector<int64_t>& point, const std::vector<Tensor>& args,
                  const std::vector<int64_t>& extras = {});

  struct Instance {
    std::shared_ptr<Graph> graph;  // null: refused
    std::string reason;            // why not
    bool more_samples = false;     // a capture at this point would teach the fits what they miss
    std::vector<int64_t> extras;   // the extras of add() at this point
    std::vector<std::pair<Dims, Dims>> arg_geometry;  // each tensor argument's sizes and strides at this point
  };
  // The graph at `point` for these arguments, or a refusal. An undefined argument takes the geometry the fits
  // predict (returned in arg_geometry): the caller checks the tensor it later binds there against it (a compiled
  // forward's backward, instantiated before its gradients exist).
  Instance instantiate(const std::vector<int64_t>& point, const std::vector<Tensor>& args);

  size_t num_samples() {
    std::lock_guard<std::mutex> lock(mutex_);
    return samples_.size();
  }
  size_t num_symbols() const { return names_.size(); }

  // Exact products of sizes and fitted coefficients (a GCC/Clang extension).
  __extension__ typedef __int128 Wide;
  // One fit: q(s) = (num[0] m0(s) + num[1] m1(s)) / den, m a monomial given by its exponents (0..2 per symbol).
  struct Fit {
    int terms = 1;
    uint32_t monomial[2] = {0, 0};
    Wide num[2] = {0, 0};
    Wide den = 1;
  };

 private:
  struct Sample {
    std::shared_ptr<Graph> graph;
    std::vector<int64_t> point;    // per dynamic dim
    std::vector<int64_t> reduced;  // per symbol (refit())
  };
  struct Quantity {  // one distinct vector of values over the samples
    std::vector<int64_t> values;
    std::vector<Fit> fits;  // the accepted fits of the fewest terms (empty: none yet)
  };
  void refit();
  // Why capture `b` (made at `at`) differs from `a` in more than its integers; "" when it does not.
  static std::string difference(const Graph& a, const Graph& b, const std::string& at);
  static std::vector<int64_t> quantities_of(Graph& g, const std::vector<Tensor>& args);
  std::vector<int64_t> reduce(const std::vector<int64_t>& point) const;  // per dim -> per symbol
  std::string predict(const Quantity& q, const std::vector<int64_t>& point, int64_t& out, bool& more) const;

  std::vector<std::string> names_;
  std::mutex mutex_;  // replays, hence instances, may be asked for from any thread
  std::vector<Sample> samples_;
  std::vector<std::vector<int64_t>> sample_quantities_;  // per sample, in the layout of quantities_of()
  std::vector<int32_t> layout_;                          // per quantity slot: its index in quantities_
  std::vector<Quantity> quantities_;
  std::vector<size_t> class_of_;  // per dynamic dim: its symbol (dims equal at every sample share one)
  std::vector<size_t> classes_;   // per symbol: its first dim
  std::vector<uint8_t> settled_;  // per symbol: two samples differ in it alone
  std::vector<size_t> arg_ranks_;  // each tensor argument's rank at the samples
  size_t num_extras_ = 0;  // the trailing quantity slots that are add()'s extras
  bool fitted_ = false;
};

}  // namespace dg::jit
