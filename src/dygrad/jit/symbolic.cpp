// Symbolic shapes: one graph for many sizes, fitted from captures at different sizes (jit/symbolic.h, docs/jit.md).
#include "dygrad/jit/symbolic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "dygrad/core/error.h"
#include "dygrad/core/shape.h"
#include "dygrad/core/storage.h"
#include "dygrad/runtime/op_attrs.h"
#include "dygrad/runtime/scratch.h"

namespace dg::jit {

namespace {
using i128 = SymbolicGraph::Wide;
constexpr int kMaxExponent = 2;      // a monomial's exponent of each symbol: 0, 1 or 2 (attention's T x T)
constexpr size_t kMaxSymbols = 16;   // exponents of 16 symbols in base 3 fit a uint32
constexpr size_t kMaxVaried = 4;     // symbols varied among the samples that one fit may combine
constexpr int64_t kNotIntegral = INT64_MIN;  // a scalar attribute that is no whole number: compared, not fitted

std::string point_text(const std::vector<int64_t>& p) {
  std::string s = "(";
  for (size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + std::to_string(p[i]);
  return s + ")";
}

std::string where(const GraphOp& op) {
  if (!op.site.file) return "";
  return std::string(" (at ") + op.site.file + ":" + std::to_string(op.site.line) + ")";
}

// A scalar attribute as a quantity: its value when it is a whole number (a mean's divisor), else kNotIntegral.
int64_t scalar_quantity(const Scalar& s) {
  if (s.kind == Scalar::Kind::Int) return s.v.i;  // a UInt, [2**63, 2**64), counts nothing: not a quantity
  // The range test first: it also keeps inf and nan (a mask's -inf) out of the conversion.
  if (s.is_floating() && s.v.f > -9.0e15 && s.v.f < 9.0e15 && s.v.f == std::trunc(s.v.f))
    return static_cast<int64_t>(s.v.f);
  return kNotIntegral;
}

// Every integer of a graph that may follow the sizes, in one fixed order (the same for graphs of one structure):
// io(x) reads or, with `write`, replaces each. `args`: each tensor argument's sizes and strides.
template <typename Io>
void walk_quantities(std::vector<Buffer>& buffers, std::vector<Value>& values, std::vector<GraphOp>& ops,
                     uint64_t& rng_total, std::vector<std::pair<Dims, Dims>>& args, bool write, Io&& io) {
  for (Buffer& b : buffers) {
    if (b.kind != BufferKind::Internal && b.kind != BufferKind::Escaping) continue;
    int64_t n = static_cast<int64_t>(b.nbytes);
    io(n);
    if (write) {
      DG_CHECK(n >= 0, Value, "[jit] a buffer of ", n, " bytes");
      b.nbytes = static_cast<size_t>(n);
    }
  }
  for (Value& v : values) {
    Buffer& b = buffers[size_t(v.buffer)];
    const int64_t item = static_cast<int64_t>(itemsize(v.dtype));
    if (b.kind == BufferKind::Argument) {  // relative to the argument's own offset, in bytes
      int64_t x = v.offset * item - b.arg_byte_offset;
      io(x);
      if (write) {
        DG_CHECK(x % item == 0, Value, "[jit] an offset of ", x, " bytes is no whole number of elements");
        v.offset = x / item;
      }
    } else {
      io(v.offset);
    }
    for (int64_t& s : v.sizes) io(s);
    for (int64_t& s : v.strides) io(s);
  }
  if (write)
    for (Buffer& b : buffers)
      if (b.kind == BufferKind::Argument) b.arg_byte_offset = 0;
  // Integral scalar attributes (a mean's divisor is the count it averages).
  for (GraphOp& op : ops) {
    if (op.attrs.type() != attrs_type<ScalarAttrs>()) continue;
    Scalar& s = op.attrs.get<ScalarAttrs>().value;
    int64_t x = scalar_quantity(s);
    io(x);  // kNotIntegral stays kNotIntegral: such a value is compared between the captures (difference())
    if (write && x != kNotIntegral) s = s.is_integral() ? Scalar(x) : Scalar(static_cast<double>(x));
  }
  // RNG: the counters each random sub-op draws (the gap to the next one's first counter, or to the graph's total).
  int64_t previous = 0;
  std::vector<GraphOp*> random;
  for (GraphOp& op : ops)
    if (op.random) random.push_back(&op);
  std::vector<int64_t> gaps;
  for (GraphOp* op : random) {
    gaps.push_back(static_cast<int64_t>(op->rng_delta) - previous);
    previous = static_cast<int64_t>(op->rng_delta);
  }
  gaps.push_back(static_cast<int64_t>(rng_total) - previous);
  for (int64_t& x : gaps) io(x);
  if (write) {
    uint64_t at = 0;
    for (size_t i = 0; i < random.size(); ++i) {
      DG_CHECK(gaps[i] >= 0, Value, "[jit] a negative RNG counter gap");
      at += static_cast<uint64_t>(gaps[i]);
      random[i]->rng_delta = at;
    }
    DG_CHECK(gaps.back() >= 0, Value, "[jit] a negative RNG counter gap");
    rng_total = at + static_cast<uint64_t>(gaps.back());
  }
  for (auto& [sizes, strides] : args) {
    for (int64_t& s : sizes) io(s);
    for (int64_t& s : strides) io(s);
  }
}

std::vector<std::pair<Dims, Dims>> geometry_of(const std::vector<Tensor>& args) {
  std::vector<std::pair<Dims, Dims>> out;
  for (const Tensor& t : args)
    if (t.defined())
      out.emplace_back(Dims(t.shape().begin(), t.shape().end()), Dims(t.strides().begin(), t.strides().end()));
    else
      out.emplace_back();
  return out;
}

// Attributes equal up to what is fitted (integral scalars) and what a launch sets (RNG counters).
bool same_attributes(const GraphOp& a, const GraphOp& b) {
  if (a.attrs.type() != b.attrs.type()) return false;
  if (a.attrs.type() == attrs_type<ScalarAttrs>()) {
    const Scalar& x = a.attrs.get<ScalarAttrs>().value;
    const Scalar& y = b.attrs.get<ScalarAttrs>().value;
    if (x.kind != y.kind) return false;
    const bool fx = scalar_quantity(x) != kNotIntegral, fy = scalar_quantity(y) != kNotIntegral;
    if (fx && fy) return true;
    return a.attrs == b.attrs;
  }
  Attrs x = a.attrs, y = b.attrs;
  if (RngCounter* r = x.rng()) *r = RngCounter{};
  if (RngCounter* r = y.rng()) *r = RngCounter{};
  return x == y;
}

bool same_site(const CallSite& a, const CallSite& b) {
  if (a.line != b.line || !a.file != !b.file) return false;
  return !a.file || std::strcmp(a.file, b.file) == 0;
}

// A monomial: exponents of each symbol in base 3.
i128 monomial_at(uint32_t m, const std::vector<int64_t>& point, bool& overflow) {
  i128 value = 1;
  for (size_t j = 0; j < point.size(); ++j, m /= 3)
    for (uint32_t e = 0; e < m % 3; ++e)
      if (__builtin_mul_overflow(value, static_cast<i128>(point[j]), &value)) overflow = true;
  return value;
}

bool checked_mul(i128 a, i128 b, i128& out) { return !__builtin_mul_overflow(a, b, &out); }
bool checked_add(i128 a, i128 b, i128& out) { return !__builtin_add_overflow(a, b, &out); }
}  // namespace

SymbolicGraph::SymbolicGraph(std::vector<std::string> symbol_names) : names_(std::move(symbol_names)) {
  DG_CHECK(names_.size() <= kMaxSymbols, Value, "[jit] at most ", kMaxSymbols, " dynamic sizes, got ",
           names_.size());
}

std::vector<int64_t> SymbolicGraph::quantities_of(Graph& g, const std::vector<Tensor>& args) {
  std::vector<int64_t> out;
  std::vector<std::pair<Dims, Dims>> geometry = geometry_of(args);
  uint64_t total = g.rng_total_;
  walk_quantities(g.buffers_, g.values_, g.ops_, total, geometry, false, [&](int64_t& x) { out.push_back(x); });
  return out;
}

std::string SymbolicGraph::difference(const Graph& a, const Graph& b, const std::string& at) {
  const std::string tail = " at the sizes " + at + " than at the first capture";
  if (a.ops_.size() != b.ops_.size())
    return "the function issued " + std::to_string(b.ops_.size()) + " ops" + tail + " (" +
           std::to_string(a.ops_.size()) + "): Python chose its ops by the sizes";
  for (size_t i = 0; i < a.ops_.size(); ++i) {
    const GraphOp& x = a.ops_[i];
    const GraphOp& y = b.ops_[i];
    const std::string op = std::string("[") + y.op->name + "]" + where(y);
    if (x.op != y.op || !same_site(x.site, y.site))
      return std::string("op ") + std::to_string(i) + " is " + op + tail + " (" + x.op->name + where(x) +
             "): Python chose its ops by the sizes";
    if (x.inputs != y.inputs || x.outputs != y.outputs || x.random != y.random || x.kernel != y.kernel)
      return op + " has other operands" + tail;
    if (!same_attributes(x, y))
      return op + " has the attributes " + y.attrs.to_string() + tail + " (" + x.attrs.to_string() +
             "): a value Python computed from a dynamic size, which a symbolic replay cannot re-derive";
  }
  if (a.buffers_.size() != b.buffers_.size() || a.values_.size() != b.values_.size() || a.results_ != b.results_)
    return "the function made other buffers" + tail;
  for (size_t i = 0; i < a.buffers_.size(); ++i) {
    const Buffer& x = a.buffers_[i];
    const Buffer& y = b.buffers_[i];
    if (x.kind != y.kind || x.arg != y.arg || x.first != y.first || x.last != y.last || x.bumps != y.bumps ||
        x.written != y.written || x.host_memory != y.host_memory || x.category != y.category)
      return "the function used its buffers otherwise" + tail;
    if (x.kind == BufferKind::Fixed && x.fixed.get() != y.fixed.get())
      return "a tensor from outside the function (a parameter, a buffer, optimizer state) was another one" + tail +
             " (a cache sized by the sizes?)";
  }
  for (size_t i = 0; i < a.values_.size(); ++i) {
    const Value& x = a.values_[i];
    const Value& y = b.values_[i];
    if (x.buffer != y.buffer || x.dtype != y.dtype || x.is_view != y.is_view || x.sizes.size() != y.sizes.size() ||
        x.strides.size() != y.strides.size())
      return "an operand has another buffer, dtype or rank" + tail;
  }
  return "";
}

std::string SymbolicGraph::add(std::shared_ptr<Graph> graph, const std::vector<int64_t>& point,
                               const std::vector<Tensor>& args, const std::vector<int64_t>& extras) {
  DG_CHECK(graph && point.size() == names_.size(), Value, "[jit] a sample needs a graph and a value per symbol");
  std::lock_guard<std::mutex> lock(mutex_);
  if (!samples_.empty()) {
    const std::string why = difference(*samples_[0].graph, *graph, point_text(point));
    if (!why.empty()) return why;
  }
  std::vector<int64_t> q = quantities_of(*graph, args);
  if (!sample_quantities_.empty() && extras.size() != num_extras_)
    return "Python compared " + std::to_string(extras.size()) + " sizes at the sizes " + point_text(point) +
           " where it compared " + std::to_string(num_extras_) + " at the first capture";
  if (!sample_quantities_.empty() && q.size() + extras.size() != sample_quantities_[0].size())
    return "the tensor arguments have another rank at the sizes " + point_text(point);
  num_extras_ = extras.size();
  q.insert(q.end(), extras.begin(), extras.end());
  std::vector<size_t> ranks;
  for (const Tensor& t : args) ranks.push_back(t.defined() ? size_t(t.dim()) : 0);
  if (!samples_.empty() && ranks != arg_ranks_)
    return "the tensor arguments have another rank at the sizes " + point_text(point);
  arg_ranks_ = std::move(ranks);
  samples_.push_back({std::move(graph), point, {}});
  sample_quantities_.push_back(std::move(q));
  fitted_ = false;
  return "";
}

void SymbolicGraph::refit() {
  const size_t n = samples_.size();
  // Dims equal at every sample are one symbol (torch's duck sizing): each dim's class is the first dim equal to it.
  class_of_.assign(names_.size(), 0);
  classes_.clear();
  for (size_t j = 0; j < names_.size(); ++j) {
    size_t c = 0;
    for (; c < classes_.size(); ++c) {
      bool equal = true;
      for (const Sample& s : samples_) equal = equal && s.point[j] == s.point[classes_[c]];
      if (equal) break;
    }
    if (c == classes_.size()) classes_.push_back(j);
    class_of_[j] = c;
  }
  const size_t k = classes_.size();
  for (Sample& s : samples_) s.reduced = reduce(s.point);
  // Settled symbols: two samples differ in it alone.
  settled_.assign(k, 0);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      int differs = -1, count = 0;
      for (size_t j = 0; j < k; ++j)
        if (samples_[a].reduced[j] != samples_[b].reduced[j]) differs = int(j), ++count;
      if (count == 1) settled_[size_t(differs)] = 1;
    }
  // Monomials over the symbols the samples vary (the others are constant factors).
  std::vector<size_t> varied;
  for (size_t j = 0; j < k; ++j)
    for (size_t a = 1; a < n; ++a)
      if (samples_[a].reduced[j] != samples_[0].reduced[j]) {
        varied.push_back(j);
        break;
      }
  std::vector<uint32_t> monomials{0};
  if (varied.size() <= kMaxVaried)
    for (size_t j : varied) {
      uint32_t unit = 1;
      for (size_t i = 0; i < j; ++i) unit *= 3;
      const size_t before = monomials.size();
      for (size_t m = 0; m < before; ++m)
        for (int e = 1; e <= kMaxExponent; ++e) monomials.push_back(monomials[m] + unit * uint32_t(e));
    }
  // Per monomial, its value at each sample.
  std::vector<std::vector<i128>> at(monomials.size(), std::vector<i128>(n));
  std::vector<uint8_t> usable(monomials.size(), 1);
  for (size_t m = 0; m < monomials.size(); ++m)
    for (size_t s = 0; s < n; ++s) {
      bool overflow = false;
      at[m][s] = monomial_at(monomials[m], samples_[s].reduced, overflow);
      if (overflow) usable[m] = 0;
    }
  // Distinct vectors of values over the samples, each fitted once.
  std::map<std::vector<int64_t>, int32_t> index;
  quantities_.clear();
  const size_t slots = sample_quantities_.empty() ? 0 : sample_quantities_[0].size();
  layout_.assign(slots, -1);
  std::vector<int64_t> v(n);
  for (size_t slot = 0; slot < slots; ++slot) {
    for (size_t s = 0; s < n; ++s) v[s] = sample_quantities_[s][slot];
    auto [it, fresh] = index.emplace(v, int32_t(quantities_.size()));
    layout_[slot] = it->second;
    if (!fresh) continue;
    Quantity q;
    q.values = v;
    const bool constant = std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; });
    if (v[0] == kNotIntegral || std::find(v.begin(), v.end(), kNotIntegral) != v.end()) {
      if (constant && n >= 2) q.fits.push_back(Fit{1, {0, 0}, {0, 0}, 1});  // compared in difference(): kept
      quantities_.push_back(std::move(q));
      continue;
    }
    // One term, c m(s), with a sample to spare: c from sample 0, checked on the others.
    if (n >= 2)
      for (size_t m = 0; m < monomials.size(); ++m) {
        if (!usable[m]) continue;
        bool fits = true;
        for (size_t s = 1; s < n && fits; ++s) {
          i128 l, r;
          fits = checked_mul(v[s], at[m][0], l) && checked_mul(v[0], at[m][s], r) && l == r;
        }
        if (fits) q.fits.push_back(Fit{1, {monomials[m], 0}, {v[0], 0}, at[m][0]});
      }
    // Two terms, c0 m0(s) + c1 m1(s), from two samples that tell them apart, checked on the others.
    if (q.fits.empty() && n >= 3)
      for (size_t m0 = 0; m0 < monomials.size(); ++m0)
        for (size_t m1 = m0 + 1; m1 < monomials.size(); ++m1) {
          if (!usable[m0] || !usable[m1]) continue;
          size_t b = 0;
          i128 det = 0, x, y;
          for (size_t s = 1; s < n && det == 0; ++s)
            if (checked_mul(at[m0][0], at[m1][s], x) && checked_mul(at[m0][s], at[m1][0], y)) det = x - y, b = s;
          if (det == 0) continue;
          i128 p, r, num0, num1;
          if (!checked_mul(v[0], at[m1][b], p) || !checked_mul(v[b], at[m1][0], r)) continue;
          num0 = p - r;
          if (!checked_mul(at[m0][0], v[b], p) || !checked_mul(at[m0][b], v[0], r)) continue;
          num1 = p - r;
          if (num0 == 0 || num1 == 0) continue;
          bool fits = true;
          for (size_t s = 1; s < n && fits; ++s) {
            if (s == b) continue;
            i128 l, t0, t1, sum;
            fits = checked_mul(v[s], det, l) && checked_mul(num0, at[m0][s], t0) &&
                   checked_mul(num1, at[m1][s], t1) && checked_add(t0, t1, sum) && l == sum;
          }
          if (fits) q.fits.push_back(Fit{2, {monomials[m0], monomials[m1]}, {num0, num1}, det});
        }
    quantities_.push_back(std::move(q));
  }
  fitted_ = true;
}

std::vector<int64_t> SymbolicGraph::reduce(const std::vector<int64_t>& point) const {
  std::vector<int64_t> out;
  for (size_t first : classes_) out.push_back(point[first]);
  return out;
}

std::string SymbolicGraph::predict(const Quantity& q, const std::vector<int64_t>& point, int64_t& out,
                                   bool& more) const {
  if (q.fits.empty()) {
    more = true;
    return "a size takes the values " + point_text(q.values) + " at the " + std::to_string(samples_.size()) +
           " captures, which no sum of at most two monomials of the symbols explains with a capture to spare";
  }
  if (q.values[0] == kNotIntegral) {
    out = kNotIntegral;
    return "";
  }
  bool first = true;
  for (const Fit& f : q.fits) {
    bool overflow = false;
    i128 total = 0;
    for (int t = 0; t < f.terms; ++t) {
      i128 term;
      if (!checked_mul(f.num[t], monomial_at(f.monomial[t], point, overflow), term) || !checked_add(total, term, total))
        overflow = true;
    }
    if (overflow) return "a size overflows at these sizes";
    if (total % f.den != 0)
      return "a size fitted as " + std::to_string(int64_t(f.num[0])) + "/" + std::to_string(int64_t(f.den)) +
             " x a monomial is no whole number at these sizes";
    const i128 value = total / f.den;
    if (value > INT64_MAX || value < INT64_MIN + 1) return "a size overflows at these sizes";
    // 0, 1 and negative values are where ops take other paths (broadcasting, empty tensors): never reached by a fit.
    const bool small = value < 2 && std::none_of(q.values.begin(), q.values.end(), [&](int64_t x) { return x < 2; });
    if (small)
      return "a size that was at least 2 at every capture " + point_text(q.values) + " would be " +
             std::to_string(int64_t(value)) + " at these sizes";
    if (first) {
      out = static_cast<int64_t>(value);
      first = false;
    } else if (out != static_cast<int64_t>(value)) {
      more = true;
      return "a size taking the values " + point_text(q.values) + " at the captures has several fits that differ "
             "at these sizes";
    }
  }
  return "";
}

SymbolicGraph::Instance SymbolicGraph::instantiate(const std::vector<int64_t>& point,
                                                   const std::vector<Tensor>& args) {
  Instance result;
  DG_CHECK(point.size() == names_.size(), Value, "[jit] expected ", names_.size(), " symbol values, got ",
           point.size());
  std::lock_guard<std::mutex> lock(mutex_);
  if (samples_.size() < 2) {
    result.more_samples = true;
    result.reason = "one capture so far: a second at other sizes teaches it which sizes follow the symbols";
    return result;
  }
  if (!fitted_) refit();
  for (size_t j = 0; j < names_.size(); ++j) {
    const size_t first = classes_[class_of_[j]];
    if (point[j] != point[first]) {
      result.more_samples = true;
      result.reason = names_[first] + " and " + names_[j] + " were equal at every capture, and are " +
                      std::to_string(point[first]) + " and " + std::to_string(point[j]) + " now";
      return result;
    }
  }
  const std::vector<int64_t> reduced = reduce(point);
  for (size_t c = 0; c < classes_.size(); ++c) {
    if (settled_[c]) continue;
    bool constant = true;
    for (const Sample& s : samples_) constant = constant && s.reduced[c] == samples_[0].reduced[c];
    if (!constant || reduced[c] != samples_[0].reduced[c]) {
      result.more_samples = true;
      result.reason = names_[classes_[c]] + " = " + std::to_string(reduced[c]) +
                      " has not been varied alone between two captures";
      return result;
    }
  }
  std::vector<int64_t> predicted(quantities_.size());
  for (size_t i = 0; i < quantities_.size(); ++i) {
    std::string why = predict(quantities_[i], reduced, predicted[i], result.more_samples);
    if (!why.empty()) {
      result.reason = why + " " + point_text(point);
      return result;
    }
  }
  // The instance: the first sample's structure with the predicted integers.
  const Graph& base = *samples_[0].graph;
  auto g = std::make_shared<Graph>();
  g->device_ = base.device_;
  g->buffers_ = base.buffers_;
  g->values_ = base.values_;
  g->ops_ = base.ops_;
  g->results_ = base.results_;
  g->rng_total_ = base.rng_total_;
  std::unordered_map<const char*, const char*> files;
  for (const auto& f : base.files_) {
    g->files_.push_back(std::make_unique<std::string>(*f));
    files[f->c_str()] = g->files_.back()->c_str();
  }
  for (GraphOp& op : g->ops_)
    if (op.site.file) op.site.file = files.at(op.site.file);
  std::vector<std::pair<Dims, Dims>> geometry = geometry_of(args);
  DG_CHECK(args.size() == arg_ranks_.size(), Value, "[jit] expected ", arg_ranks_.size(), " tensor arguments, got ",
           args.size());
  for (size_t a = 0; a < args.size(); ++a)
    if (!args[a].defined()) geometry[a] = {Dims(arg_ranks_[a], 0), Dims(arg_ranks_[a], 0)};  // predicted below
  try {
    size_t slot = 0;
    walk_quantities(g->buffers_, g->values_, g->ops_, g->rng_total_, geometry, true,
                    [&](int64_t& x) { x = predicted[size_t(layout_[slot++])]; });
    DG_CHECK(slot + num_extras_ == layout_.size(), Value, "[jit] internal error: ", slot, " quantities of ",
             layout_.size());
    for (size_t i = 0; i < num_extras_; ++i) result.extras.push_back(predicted[size_t(layout_[slot + i])]);
    const std::vector<std::pair<Dims, Dims>> actual = geometry_of(args);
    for (size_t a = 0; a < actual.size(); ++a)
      if (args[a].defined() && actual[a] != geometry[a]) {
        result.reason = "tensor argument " + std::to_string(a) + " has the strides " + shape_str(actual[a].second) +
                        " where the symbolic graph expects " + shape_str(geometry[a].second);
        return result;
      }
    // Each sub-op's scratch, declared from its operands at these sizes (their geometry only: a dummy storage).
    static char dummy[64];
    Ref<Storage> none = Storage::wrap_external(dummy, 0, [](void*) {}, nullptr);
    for (GraphOp& op : g->ops_) {
      if (!op.op->scratch) continue;
      Task t;
      t.op = op.op;
      t.attrs = op.attrs;
      auto operand = [&](int32_t v) {
        if (v < 0) return Tensor();
        const Value& val = g->values_[size_t(v)];
        return Tensor(make_ref<TensorImpl>(none, val.sizes, val.strides, val.offset, val.dtype));
      };
      for (int32_t v : op.inputs) t.inputs.push_back(operand(v));
      for (int32_t v : op.outputs) t.outputs.push_back(operand(v));
      const size_t n = op.op->scratch(t);
      op.scratch = (n + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
    }
    g->prepare();  // raises where a view of a fixed or internal buffer would leave it
    for (const Value& v : g->values_) {
      const Buffer& b = g->buffers_[size_t(v.buffer)];
      if (b.kind == BufferKind::Escaping)
        check_view_bounds("jit", v.sizes, v.strides, v.offset, int64_t(b.nbytes / itemsize(v.dtype)));
    }
  } catch (const Error& e) {
    result.reason = std::string("the fitted sizes do not hold together at ") + point_text(point) + ": " + e.message();
    return result;
  }
  result.graph = std::move(g);
  result.arg_geometry = std::move(geometry);
  return result;
}

}  // namespace dg::jit
