// dygrad.jit's C++ generator (jit/fusion.h, docs/jit-fusion.md): a fused program (runtime/fused_program.h) as one
// extern "C" function of a translation unit per graph, the records written as eager's scalar functors (math/).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "dygrad/core/error.h"
#include "dygrad/jit/fusion.h"
#include "dygrad/runtime/scratch.h"

namespace dg::jit {

// exp and log in float32 (eager's guarded kernels, backend/cpu/unary.cpp): a loop holding them runs first with their
// fast forms, bitwise the full functions in range (math::exp_normal_range, math::log_normal_range), and an or of
// "out of range" over its elements; where any element was outside, the loop runs again with the full functions
// (math::exp, math::log), so every element gets the full function's bits, as eager's block recompute gives. A loop
// may run twice only where it reads no slot it stores (it then computes the same values from the same inputs).
// sin and cos likewise: math::sin_bounded / cos_bounded where math::sin_cos_in_range, libm's sinf / cosf elsewhere.
bool guarded_op(const FusedRecord& r, DType dtype) {
  return dtype == DType::Float32 && (r.op == FusedOpCode::Exp || r.op == FusedOpCode::Log ||
                                     r.op == FusedOpCode::Sin || r.op == FusedOpCode::Cos);
}

namespace {

std::string literal(double k, DType dtype) {
  char buf[64];
  if (dtype == DType::Float64) std::snprintf(buf, sizeof buf, "%a", k);
  else std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(k)));
  std::string s = buf;
  if (s.find("inf") != std::string::npos || s.find("nan") != std::string::npos) {
    const char* t = dtype == DType::Float64 ? "double" : "float";
    if (s.find("nan") != std::string::npos)
      return dtype == DType::Float64 ? std::string("__builtin_nan(\"\")") : std::string("__builtin_nanf(\"\")");
    return std::string(k < 0 ? "-" : "") + "static_cast<" + t + ">(__builtin_huge_val())";
  }
  return s;
}

std::string expression(const FusedRecord& r, const std::string& x, const std::string& y, DType dtype,
                       const std::string& z = std::string()) {
  const std::string k = literal(r.k, dtype);
  const std::string one = "T(1)";
  auto boolean = [](const std::string& condition) { return "(" + condition + " ? T(1) : T(0))"; };
  auto is_true = [](const std::string& b) { return "(" + b + " != T(0))"; };
  switch (r.op) {
    case FusedOpCode::Add: return "dg::math::add_scaled(" + x + ", " + y + ", " + (r.k == 1.0 ? one : k) + ")";
    case FusedOpCode::Mul: return "dg::math::mul(" + x + ", " + y + ")";
    case FusedOpCode::Div: return "dg::math::div(" + x + ", " + y + ")";
    case FusedOpCode::AddScalar: return x + " + " + k;
    case FusedOpCode::MulScalar: return x + " * " + k;
    case FusedOpCode::DivScalar: return x + " / " + k;
    case FusedOpCode::RsubScalar: return "dg::math::rsub(" + x + ", " + k + ")";
    case FusedOpCode::RdivScalar: return k + " / " + x;
    case FusedOpCode::Neg: return "dg::math::neg(" + x + ")";
    case FusedOpCode::Sqrt: return "std::sqrt(" + x + ")";
    case FusedOpCode::Rsqrt: return "T(1) / std::sqrt(" + x + ")";
    case FusedOpCode::Reciprocal: return "T(1) / " + x;
    case FusedOpCode::Abs: return "std::fabs(" + x + ")";
    case FusedOpCode::Relu: return x + " < T(0) ? T(0) : " + x;
    case FusedOpCode::Sigmoid: return "dg::math::sigmoid(" + x + ")";
    case FusedOpCode::Silu: return "dg::math::silu(" + x + ")";
    case FusedOpCode::Tanh: return "dg::math::tanh(" + x + ")";
    case FusedOpCode::PowScalar: {
      const double p = r.k;
      if (p == 0) return "T(1)";
      if (p == 1) return x;
      if (p == 2) return x + " * " + x;
      if (p == 3) return x + " * " + x + " * " + x;
      if (p == -1) return "T(1) / " + x;
      if (p == -2) return "T(1) / (" + x + " * " + x + ")";
      if (p == 0.5) return "std::sqrt(" + x + ")";
      if (p == -0.5) return "T(1) / std::sqrt(" + x + ")";
      return "dg::math::pow(" + x + ", " + k + ")";
    }
    case FusedOpCode::Maximum: return "dg::math::maximum(" + x + ", " + y + ")";
    case FusedOpCode::Minimum: return "dg::math::minimum(" + x + ", " + y + ")";
    case FusedOpCode::SigmoidBackward: return "dg::math::sigmoid_backward(" + x + ", " + y + ")";
    case FusedOpCode::TanhBackward: return "dg::math::tanh_backward(" + x + ", " + y + ")";
    case FusedOpCode::SiluBackward: return "dg::math::silu_backward(" + x + ", " + y + ")";
    case FusedOpCode::ReluBackward: return "dg::math::relu_backward(" + x + ", " + y + ")";
    case FusedOpCode::Copy: return x;
    case FusedOpCode::Exp: return "dg::math::exp(" + x + ")";
    case FusedOpCode::Log: return "dg::math::log(" + x + ")";
    case FusedOpCode::Expm1: return "dg::math::expm1(" + x + ")";
    case FusedOpCode::Log1p: return "dg::math::log1p(" + x + ")";
    case FusedOpCode::Gelu: return (r.k == 0 ? "dg::math::gelu_erf(" : "dg::math::gelu_tanh(") + x + ")";
    case FusedOpCode::GeluBackward:
      return (r.k == 0 ? "dg::math::gelu_erf_backward(" : "dg::math::gelu_tanh_backward(") + x + ", " + y + ")";
    case FusedOpCode::Sign: return "T(int(T(0) < " + x + ") - int(" + x + " < T(0)))";
    case FusedOpCode::LerpScalar: return "dg::math::lerp(" + x + ", " + y + ", " + k + ")";
    case FusedOpCode::MaskedFill: return "(" + y + " != T(0) ? " + k + " : " + x + ")";
    case FusedOpCode::Eq: return boolean(x + " == " + y);
    case FusedOpCode::Ne: return boolean(x + " != " + y);
    case FusedOpCode::Lt: return boolean(x + " < " + y);
    case FusedOpCode::Le: return boolean(x + " <= " + y);
    case FusedOpCode::Gt: return boolean(x + " > " + y);
    case FusedOpCode::Ge: return boolean(x + " >= " + y);
    case FusedOpCode::EqScalar: return boolean(x + " == " + k);
    case FusedOpCode::NeScalar: return boolean(x + " != " + k);
    case FusedOpCode::LtScalar: return boolean(x + " < " + k);
    case FusedOpCode::LeScalar: return boolean(x + " <= " + k);
    case FusedOpCode::GtScalar: return boolean(x + " > " + k);
    case FusedOpCode::GeScalar: return boolean(x + " >= " + k);
    case FusedOpCode::LogicalNot: return "(" + x + " != T(0) ? T(0) : T(1))";
    case FusedOpCode::LogicalAnd: return boolean(is_true(x) + " & " + is_true(y));
    case FusedOpCode::LogicalOr: return boolean(is_true(x) + " | " + is_true(y));
    case FusedOpCode::LogicalXor: return boolean(is_true(x) + " ^ " + is_true(y));
    case FusedOpCode::Where: return "(" + is_true(x) + " ? " + y + " : " + z + ")";
    case FusedOpCode::WhereScalar: return "(" + is_true(x) + " ? " + y + " : " + k + ")";
    case FusedOpCode::WhereScalarTrue: return "(" + is_true(x) + " ? " + k + " : " + y + ")";
    case FusedOpCode::ClampScalar: {  // a missing bound (+-inf) is the identity: left out
      std::string v = x;
      if (r.k != -std::numeric_limits<double>::infinity()) v = "dg::math::clamp_below(" + v + ", " + k + ")";
      if (r.k2 != std::numeric_limits<double>::infinity())
        v = "dg::math::clamp_above(" + v + ", " + literal(r.k2, dtype) + ")";
      return v;
    }
    case FusedOpCode::ClampTensor:
      return "dg::math::clamp_above_propagating(dg::math::clamp_below_propagating(" + x + ", " + y + "), " + z + ")";
    case FusedOpCode::ClampMinTensor: return "dg::math::clamp_below_propagating(" + x + ", " + y + ")";
    case FusedOpCode::ClampMaxTensor: return "dg::math::clamp_above_propagating(" + x + ", " + y + ")";
    case FusedOpCode::Sin: case FusedOpCode::Cos: {  // eager's guarded kernel, element by element
      const std::string f = r.op == FusedOpCode::Sin ? "sin" : "cos";
      if (dtype == DType::Float64) return "std::" + f + "(" + x + ")";
      return "(dg::math::sin_cos_in_range(" + x + ") ? dg::math::" + f + "_bounded(" + x + ") : std::" + f + "(" + x +
             "))";
    }
    default: return x;  // the row reductions: row_program() computes them
  }
  return x;
}

bool is_bf16(const FusedProgram& p, size_t s) { return s < p.slot_dtype.size() && p.slot_dtype[s] == DType::BFloat16; }
bool is_bool(const FusedProgram& p, size_t s) { return s < p.slot_dtype.size() && p.slot_dtype[s] == DType::Bool; }

// The slot whose pointer addresses slot s (itself unless FusedProgram::slot_base says otherwise).
int32_t slot_base(const FusedProgram& p, size_t s) { return p.slot_base.empty() ? int32_t(s) : p.slot_base[s]; }

// The function's opening: the slots as typed pointers (`__restrict`: distinct slots never overlap).
void open_function(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots();
  const char* type = p.dtype == DType::Float64 ? "double" : "float";
  o << "// kernel " << p.index << ": " << p.name << ", shape " << shape_str(p.shape) << ", " << dtype_name(p.dtype);
  if (p.row_reduction) o << ", " << p.passes << " pass(es) per row";
  if (p.full_reduction) o << ", a sum over every element (chunks of " << kFullReduceChunk << ")";
  o << "\n";
  for (const FusedRecord& r : p.records)
    o << "//   " << (p.row_reduction || p.full_reduction ? (r.row ? "row  p" : "elem p") + std::to_string(r.pass) + "  " : "")
      << r.source
      << "\n";
  o << "// iteration " << shape_str(p.dims) << "; slot strides:";
  for (size_t s = 0; s < slots; ++s) o << " s" << s << shape_str(p.strides[s]);
  o << "\n";
  o << "extern \"C\" DG_FUSED_EXPORT void dg_fused_" << p.index << "(char* const* p, int64_t begin, int64_t end) {\n";
  o << "  using T = " << type << ";\n";
  // A slot addressed through another's pointer (FusedProgram::slot_base) has none of its own; a pointer is writable
  // where any slot it addresses is stored.
  std::vector<uint8_t> written(slots, 0);
  for (size_t s = 0; s < slots; ++s)
    if (p.slot_output[s] >= 0) written[size_t(slot_base(p, s))] = 1;
  for (size_t s = 0; s < slots; ++s) {
    if (slot_base(p, s) != int32_t(s)) {
      o << "  // s" << s << ": s" << slot_base(p, s) << "'s elements " << (p.slot_delta[s] < 0 ? "" : "+") << p.slot_delta[s]
        << " (one buffer: the accesses one interleaved group)\n";
      continue;
    }
    const std::string t = std::string(written[s] ? "" : "const ") +
                          (is_bf16(p, s) ? "uint16_t" : is_bool(p, s) ? "uint8_t" : "T");
    o << "  " << t << "* __restrict s" << s << " = reinterpret_cast<" << t << "*>(p[" << s << "]);"
      << (is_bf16(p, s) ? "  // bfloat16" : is_bool(p, s) ? "  // bool" : "") << "\n";
  }
}

// A slot's element at index expression `index` (relative to the slot's element 0), through its base's pointer.
std::string slot_element(const FusedProgram& p, size_t s, const std::string& index) {
  const int32_t b = slot_base(p, s);
  if (b == int32_t(s)) return "s" + std::to_string(s) + "[" + index + "]";
  return "s" + std::to_string(b) + "[" + index + " + " + std::to_string(p.slot_delta[s]) + "]";
}

// A slot's element as the compute type, and a value stored into it (bfloat16 slots: the conversions of
// core/dtype.h's BFloat16, which eager's kernels use).
std::string load(const FusedProgram& p, size_t s, const std::string& element) {
  if (is_bool(p, s)) return "(" + element + " ? T(1) : T(0))";
  return is_bf16(p, s) ? "dg_bf16_load(" + element + ")" : element;
}
std::string store(const FusedProgram& p, size_t s, const std::string& value) {
  if (is_bool(p, s)) return "uint8_t(" + value + " != T(0))";  // a boolean result: eager's bool byte, 0 or 1
  return is_bf16(p, s) ? "dg_bf16_bits(" + value + ")" : value;
}

// The rows' offsets: for row r of the coalesced iteration (every dim but the innermost), each slot's element offset
// o<s>.
void row_offsets(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots(), nd = p.dims.size();
  o << "    int64_t q = r;\n";
  for (size_t s = 0; s < slots; ++s) o << "    int64_t o" << s << " = 0;\n";
  for (size_t d = nd - 1; d-- > 0;) {
    o << "    {\n      const int64_t c = q % " << p.dims[d] << ";\n      q /= " << p.dims[d] << ";\n";
    for (size_t s = 0; s < slots; ++s)
      if (p.strides[s][d] != 0) o << "      o" << s << " += c * " << p.strides[s][d] << ";\n";
    o << "    }\n";
  }
}

std::string fast_expression(const FusedRecord& r, const std::string& x) {
  if (r.op == FusedOpCode::Sin || r.op == FusedOpCode::Cos)
    return std::string(r.op == FusedOpCode::Sin ? "dg::math::sin_bounded(" : "dg::math::cos_bounded(") + x + ")";
  return r.op == FusedOpCode::Exp ? "dg::math::exp_normal_range(" + x + ")" : "dg::math::log_normal_range(" + x + ")";
}
std::string out_of_range(const FusedRecord& r, const std::string& x) {
  if (r.op == FusedOpCode::Sin || r.op == FusedOpCode::Cos) return "!dg::math::sin_cos_in_range(" + x + ")";
  return (r.op == FusedOpCode::Exp ? "!dg::math::exp_in_normal_range(" : "!dg::math::log_in_normal_range(") + x + ")";
}

// One record's line in a loop body: its value (the fast form where `fast`; rounded to bfloat16 where eager's op
// wrote bfloat16), and the guard's or.
void record_line(std::ostringstream& o, const std::string& indent, const FusedRecord& rec, int32_t r,
                 const std::string* operand, DType dtype, bool fast) {
  const bool guarded = fast && guarded_op(rec, dtype);
  const std::string value =
      guarded ? fast_expression(rec, operand[0]) : expression(rec, operand[0], operand[1], dtype, operand[2]);
  o << indent << "const T v" << r << " = " << (rec.round_bf16 ? "dg_bf16_round(" + value + ")" : value) << ";  // "
    << rec.source << "\n";
  if (guarded) o << indent << "outside |= " << out_of_range(rec, operand[0]) << ";\n";
}

// A loop over [b, e) whose body is body(fast): once, or (guarded) with the fast forms and again where needed.
void guarded_loop(std::ostringstream& o, const std::string& indent, const std::string& b, const std::string& e,
                  bool guarded, const std::function<std::string(bool)>& body) {
  if (!guarded) {
    o << indent << "for (int64_t i = " << b << "; i < " << e << "; ++i) {\n" << body(false) << indent << "}\n";
    return;
  }
  auto indented = [](const std::string& text, const std::string& more) {  // each line of the body, further in
    std::string out;
    for (size_t at = 0; at < text.size();) {
      const size_t eol = text.find('\n', at);
      out += more + text.substr(at, eol - at + 1);
      at = eol + 1;
    }
    return out;
  };
  o << indent << "{\n" << indent << "  int outside = 0;\n";
  o << indent << "  for (int64_t i = " << b << "; i < " << e << "; ++i) {\n" << indented(body(true), "  ") << indent
    << "  }\n";
  o << indent << "  if (outside)  // an element outside the fast forms' range: again, with the full functions\n";
  o << indent << "    for (int64_t i = " << b << "; i < " << e << "; ++i) {\n" << indented(body(false), "    ")
    << indent << "    }\n";
  o << indent << "}\n";
}

// Heavy records (transcendental functors, a general power): a row sum over a pass holding one is computed from a
// row of the summed values (a loop the compiler vectorises at the level's full width) rather than inside
// eight_lane_sum's loop, whose eight lanes make the compiler run the whole body at eight floats a step (the composed
// softmax's exp: 2x its time). The additions and their order are the same.
bool heavy_op(const FusedRecord& r) {
  switch (r.op) {
    case FusedOpCode::Exp: case FusedOpCode::Log: case FusedOpCode::Expm1: case FusedOpCode::Log1p:
    case FusedOpCode::Gelu: case FusedOpCode::Sigmoid: case FusedOpCode::Silu: case FusedOpCode::Tanh:
    case FusedOpCode::SiluBackward: case FusedOpCode::Sin: case FusedOpCode::Cos: case FusedOpCode::GeluBackward:
      return true;
    case FusedOpCode::PowScalar:
      return r.k != 0 && r.k != 1 && r.k != 2 && r.k != 3 && r.k != -1 && r.k != -2 && r.k != 0.5 && r.k != -0.5;
    default:
      return false;
  }
}

constexpr int64_t kGuardBlock = 512;  // elements per guarded block of a flat program (eager's block: unary.cpp)

// The loop body of a one-pass program at element i (`index[s]`: slot s's element): each slot read loaded once, the
// vector records in order (exp and log in their fast forms where `fast`), then each slot they wrote stored with its
// last value. Row and reduction records are not the body's. Marks the slots both read from memory and stored in
// `read_and_stored`; `fold` (a full sum's operand): its value's name into `folded`.
std::string element_body(const FusedProgram& p, const std::vector<std::string>& index, const std::string& indent,
                         bool fast, std::vector<uint8_t>* read_and_stored, const FusedOperand* fold = nullptr,
                         std::string* folded = nullptr) {
  const size_t slots = p.num_slots();
  std::ostringstream b;
  std::vector<int32_t> current(slots, -1);
  std::vector<uint8_t> loaded(slots, 0);
  auto value = [&](const FusedOperand& in) {
    if (in.record >= 0 || current[size_t(in.slot)] >= 0)  // a result, or forwarded from the slot's last store
      return "v" + std::to_string(in.record >= 0 ? in.record : current[size_t(in.slot)]);
    if (!loaded[size_t(in.slot)]) {
      loaded[size_t(in.slot)] = 1;
      const std::string element = slot_element(p, size_t(in.slot), index[size_t(in.slot)]);
      b << indent << "  const T l" << in.slot << " = " << load(p, size_t(in.slot), element) << ";\n";
    }
    return "l" + std::to_string(in.slot);
  };
  for (size_t r = 0; r < p.records.size(); ++r) {
    const FusedRecord& rec = p.records[r];
    if (rec.row || is_row_reduction(rec.op)) continue;
    std::string operand[kMaxFusedArity];
    for (int j = 0; j < fused_op_arity(rec.op); ++j) operand[j] = value(rec.in[j]);
    record_line(b, indent + "  ", rec, int32_t(r), operand, p.dtype, fast);
    if (rec.out_slot >= 0) current[size_t(rec.out_slot)] = int32_t(r);
  }
  if (fold) *folded = value(*fold);
  for (size_t s = 0; s < slots; ++s)
    if (current[s] >= 0) {
      b << indent << "  " << slot_element(p, s, index[s]) << " = " << store(p, s, "v" + std::to_string(current[s]))
        << ";\n";
      if (read_and_stored && loaded[s]) (*read_and_stored)[s] = 1;
    }
  return b.str();
}

// An elementwise program: every element runs the records, then each written slot stores its last value.
void flat_program(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots(), nd = p.dims.size();
  std::vector<std::string> index(slots);
  std::string indent = "    ";
  const std::string columns = std::to_string(p.dims[nd - 1]);
  for (size_t s = 0; s < slots; ++s) {
    const int64_t st = p.strides[s][nd - 1];
    const std::string base = nd == 1 ? "" : "o" + std::to_string(slot_base(p, s));  // equal strides: equal offsets
    const std::string step = st == 0 ? "" : st == 1 ? "i" : "i * " + std::to_string(st);
    index[s] = nd == 1 ? (st == 0 ? "0" : step) : base + (step.empty() ? "" : " + " + step);
  }
  auto body = [&](bool fast, std::vector<uint8_t>* read_and_stored) {
    return element_body(p, index, indent, fast, read_and_stored);
  };
  std::vector<uint8_t> read_and_stored(slots, 0);
  body(false, &read_and_stored);
  bool guarded = std::ranges::none_of(read_and_stored, [](uint8_t x) { return x != 0; });
  guarded = guarded && std::ranges::any_of(p.records, [&](const FusedRecord& r) { return guarded_op(r, p.dtype); });
  const std::string block = std::to_string(kGuardBlock);
  if (nd == 1 && !guarded) {
    indent = "  ";
    guarded_loop(o, indent, "begin", "end", false, [&](bool fast) { return body(fast, nullptr); });
    return;
  }
  if (nd == 1) {
    o << "  for (int64_t b0 = begin; b0 < end; b0 += " << block << ") {\n";
    o << "    const int64_t b1 = end - b0 < " << block << " ? end : b0 + " << block << ";\n";
    guarded_loop(o, indent, "b0", "b1", true, [&](bool fast) { return body(fast, nullptr); });
    o << "  }\n";
    return;
  }
  o << "  for (int64_t r = begin; r < end; ++r) {\n";
  row_offsets(o, p);
  if (guarded) {
    o << "    for (int64_t b0 = 0; b0 < " << columns << "; b0 += " << block << ") {\n";
    o << "      const int64_t b1 = " << columns << " - b0 < " << block << " ? " << columns << " : b0 + " << block
      << ";\n";
    indent = "      ";
    guarded_loop(o, indent, "b0", "b1", true, [&](bool fast) { return body(fast, nullptr); });
    o << "    }\n";
  } else {
    guarded_loop(o, indent, "0", columns, false, [&](bool fast) { return body(fast, nullptr); });
  }
  o << "  }\n";
}

// A full-reduction program (runtime/fused_program.h): for each chunk c of [begin, end), the vector records over
// the chunk's elements and the eight-lane sum of the summed operand (eager's order for a chunk: sum_kernel's
// eight_lane_sums), into p[slots][c]; over the summed values kept in a buffer where a heavy or guarded record runs (as
// a row program splits its sum). One dim: a chunk is kFullReduceChunk elements. Rows (fusion.cpp's
// full_sum_iteration: rows of a multiple of 8 dividing a chunk): a chunk is whole rows, each folded into the chunk's
// eight lanes (element i of a row to lane i % 8: its index in the chunk mod 8), the lanes merged as eight_lane_sum's.
// The kernel adds the partials and runs the records on the total.
void full_program(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots(), nd = p.dims.size();
  const int64_t columns = p.dims[nd - 1];
  std::vector<std::string> index(slots);
  for (size_t s = 0; s < slots; ++s) {
    const int64_t st = p.strides[s][nd - 1];
    const std::string step = st == 0 ? "" : st == 1 ? "i" : "i * " + std::to_string(st);
    index[s] = nd == 1 ? (st == 0 ? "0" : step) : "o" + std::to_string(s) + (step.empty() ? "" : " + " + step);
  }
  const auto red = std::ranges::find_if(p.records, [](const FusedRecord& r) { return r.op == FusedOpCode::FullSum; });
  DG_CHECK(red != p.records.end() && (nd == 1 || (columns % 8 == 0 && kFullReduceChunk % columns == 0)), Runtime,
           "[jit] ", p.name, ": not a full-reduction program");
  const std::string chunk = std::to_string(kFullReduceChunk), n = std::to_string(columns);
  std::string folded;
  std::vector<uint8_t> read_and_stored(slots, 0);
  element_body(p, index, "", false, &read_and_stored, &red->in[0], &folded);
  auto vector_record = [](const FusedRecord& r) { return !r.row && !is_row_reduction(r.op); };
  const bool guarded = std::ranges::none_of(read_and_stored, [](uint8_t x) { return x != 0; }) &&
                       std::ranges::any_of(p.records, [&](const FusedRecord& r) {
                         return vector_record(r) && guarded_op(r, p.dtype);
                       });
  const bool split = guarded || std::ranges::any_of(p.records, [&](const FusedRecord& r) {
                       return vector_record(r) && heavy_op(r);
                     });
  o << "  T* __restrict partial = reinterpret_cast<T*>(p[" << slots << "]);  // one sum per chunk\n";
  if (split) o << "  std::vector<T> summed(" << (nd == 1 ? chunk : n) << ");\n  T* __restrict sb = summed.data();\n";
  o << "  for (int64_t ch = begin; ch < end; ++ch) {\n";
  if (nd == 1) {
    o << "    const int64_t c0 = ch * " << chunk << ";\n";
    o << "    const int64_t c1 = " << n << " - c0 < " << chunk << " ? " << n << " : c0 + " << chunk << ";\n";
    if (!split) {
      o << "    partial[ch] = dg::cpu::eight_lane_sum<T>(c1 - c0, [&](int64_t j) -> T {\n";
      o << "      const int64_t i = c0 + j;\n" << element_body(p, index, "    ", false, nullptr) << "      return "
        << folded << ";\n    });  // " << red->source << "\n";
    } else {
      guarded_loop(o, "    ", "c0", "c1", guarded, [&](bool fast) {
        return element_body(p, index, "    ", fast, nullptr) + "      sb[i - c0] = " + folded + ";\n";
      });
      o << "    partial[ch] = dg::cpu::eight_lane_sum<T>(c1 - c0, [&](int64_t j) -> T { return sb[j]; });  // "
        << red->source << "\n";
    }
    o << "  }\n  // then (the kernel): the partials added in chunk order, and the records on the total\n";
    return;
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= p.dims[d];
  const std::string per = std::to_string(kFullReduceChunk / columns), all = std::to_string(rows);
  o << "    const int64_t r0 = ch * " << per << ";\n";
  o << "    const int64_t r1 = " << all << " - r0 < " << per << " ? " << all << " : r0 + " << per << ";\n";
  o << "    T lane[8] = {T(0), T(0), T(0), T(0), T(0), T(0), T(0), T(0)};\n";
  o << "    for (int64_t r = r0; r < r1; ++r) {\n";
  row_offsets(o, p);
  if (!split) {
    o << "      for (int64_t i0 = 0; i0 < " << n << "; i0 += 8)\n        for (int k = 0; k < 8; ++k) {\n";
    o << "          const int64_t i = i0 + k;\n" << element_body(p, index, "        ", false, nullptr)
      << "          lane[k] += " << folded << ";\n        }\n";
  } else {
    guarded_loop(o, "      ", "0", n, guarded, [&](bool fast) {
      return element_body(p, index, "      ", fast, nullptr) + "        sb[i] = " + folded + ";\n";
    });
    o << "      for (int64_t i0 = 0; i0 < " << n << "; i0 += 8)\n";
    o << "        for (int k = 0; k < 8; ++k) lane[k] += sb[i0 + k];\n";
  }
  o << "    }\n    partial[ch] = dg::cpu::eight_lane_merge<T>(lane);  // " << red->source << "\n";
  o << "  }\n  // then (the kernel): the partials added in chunk order, and the records on the total\n";
}

// The call that computes a row reduction reading the whole row (fused_program.h's reads_whole_row; the functions of
// backend/cpu/accumulate.h and row_reductions.h that mirror eager's row paths).
std::string whole_row_reduction(const FusedRecord& r, const std::string& row, int64_t columns) {
  const std::string n = std::to_string(columns);
  switch (r.op) {
    case FusedOpCode::RowMax: return "dg::cpu::lane_extremum<true, T>(" + row + ", " + n + ")";
    case FusedOpCode::RowMin: return "dg::cpu::lane_extremum<false, T>(" + row + ", " + n + ")";
    case FusedOpCode::RowMaxValue: return "dg::cpu::first_extremum_value<true, T>(" + row + ", " + n + ")";
    case FusedOpCode::RowMinValue: return "dg::cpu::first_extremum_value<false, T>(" + row + ", " + n + ")";
    case FusedOpCode::RowVar: case FusedOpCode::RowStd:
      return "dg::cpu::row_variance<T>(" + row + ", " + n + ", " + literal(r.k, DType::Float64) + ", " +
             (r.op == FusedOpCode::RowStd ? "true" : "false") + ")";
    case FusedOpCode::RowLogsumexp: return "dg::cpu::row_logsumexp<T>(" + row + ", " + n + ")";
    default: break;
  }
  DG_CHECK(false, Runtime, "[jit] not a whole-row reduction: ", r.source);
  return "";
}

// A row program (runtime/fused_program.h): per row, each pass's row records at the row's scope, then its vector
// records in a loop over the row (RowSum: eight_lane_sum's loop, eager's order; over a row of the summed values
// where the pass holds a heavy record), the other reductions after it (over the row in memory or its row buffer).
void row_program(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots(), nd = p.dims.size();
  const int64_t columns = p.dims[nd - 1];
  const std::string n = std::to_string(columns);
  std::ostringstream w;  // the loop over rows (the buffers it needs are declared before it)
  bool sum_buffer = false;
  auto row_index = [&](int32_t s) { return "o" + std::to_string(s); };
  auto element_index = [&](int32_t s) {
    const int64_t st = p.strides[size_t(s)][nd - 1];
    return "o" + std::to_string(s) + (st == 0 ? "" : st == 1 ? " + i" : " + i * " + std::to_string(st));
  };
  std::vector<uint8_t> row_loaded(slots, 0);
  std::vector<int32_t> current(slots, -1);  // per slot: the last record that stored it (any pass), or -1
  for (int32_t pass = 0; pass < p.passes; ++pass) {
    w << "    // pass " << pass << "\n";
    std::vector<int32_t> vectors;
    int32_t reduction = -1;
    for (size_t r = 0; r < p.records.size(); ++r) {
      const FusedRecord& rec = p.records[r];
      if (rec.pass != pass) continue;
      if (is_row_reduction(rec.op)) {
        reduction = int32_t(r);
      } else if (rec.row) {  // a row record: once per row, before the pass's loop
        std::string operand[kMaxFusedArity];
        for (int j = 0; j < fused_op_arity(rec.op); ++j) {
          const FusedOperand& in = rec.in[j];
          if (in.record >= 0 || current[size_t(in.slot)] >= 0) {  // row slots: only row records store them
            operand[j] = "v" + std::to_string(in.record >= 0 ? in.record : current[size_t(in.slot)]);
            continue;
          }
          if (!row_loaded[size_t(in.slot)]) {
            row_loaded[size_t(in.slot)] = 1;
            w << "    const T w" << in.slot << " = s" << in.slot << "[" << row_index(in.slot) << "];\n";
          }
          operand[j] = "w" + std::to_string(in.slot);
        }
        w << "    const T v" << r << " = " << expression(rec, operand[0], operand[1], p.dtype, operand[2]) << ";  // "
          << rec.source << "\n";
        if (rec.out_slot >= 0) {
          w << "    s" << rec.out_slot << "[" << row_index(rec.out_slot) << "] = v" << r << ";\n";
          current[size_t(rec.out_slot)] = int32_t(r);
        }
      } else {
        vectors.push_back(int32_t(r));
      }
    }
    const FusedRecord* red = reduction >= 0 ? &p.records[size_t(reduction)] : nullptr;
    const bool sum = red && red->op == FusedOpCode::RowSum;
    if (!vectors.empty() || sum) {
      // A pass reading or writing bfloat16 or booleans splits too: their 16- and 8-bit accesses beside the eight float
      // lanes made the compiler vectorise eight_lane_sum's loop at 16 bytes (autocast's RMSNorm pass: 1.9x the time
      // of the split form, the function alone in a harness)
      auto narrow = [&](int32_t s) { return s >= 0 && size_t(s) < p.slot_dtype.size() && p.slot_dtype[size_t(s)] != p.dtype; };
      auto touches_narrow = [&](int32_t r) {
        const FusedRecord& rec = p.records[size_t(r)];
        bool any = narrow(rec.out_slot);
        for (int j = 0; j < fused_op_arity(rec.op); ++j) any = any || narrow(rec.in[j].slot);
        return any;
      };
      const bool split = sum && std::ranges::any_of(vectors, [&](int32_t r) {
                           return heavy_op(p.records[size_t(r)]) || touches_narrow(r);
                         });
      // Where a split sum's values are kept: the summed record's own row buffer, or the sum buffer.
      std::string summed_row;
      if (split) {
        const FusedOperand& in = red->in[0];
        const bool own = in.record >= 0 && !p.records[size_t(in.record)].row &&
                         p.records[size_t(in.record)].pass == pass && p.records[size_t(in.record)].row_buffer >= 0;
        summed_row = own ? "rb" + std::to_string(p.records[size_t(in.record)].row_buffer) : "sb";
        sum_buffer = sum_buffer || !own;
      }
      // The loop's body: each value it needs defined once (loads, a value of an earlier pass, the records). `fast`:
      // exp and log in their guarded fast forms. Sets `folded` (the summed value) and whether a slot is both read
      // from memory and stored by the loop.
      const std::vector<int32_t> current_before = current;
      std::string folded;
      bool read_and_stored = false;
      auto body = [&](bool fast) {
        current = current_before;
        std::ostringstream b;
        std::vector<uint8_t> defined(p.records.size(), 0), loaded(slots, 0);
        // A slot's value: this pass's last store to it, a row record's, or memory (never stored, or stored by an
        // earlier pass: its row is in memory).
        auto value = [&](const FusedOperand& in) -> std::string {
          if (in.slot >= 0) {
            const int32_t writer = current[size_t(in.slot)];
            if (writer >= 0 && (p.records[size_t(writer)].row || p.records[size_t(writer)].pass == pass))
              return "v" + std::to_string(writer);
            if (!loaded[size_t(in.slot)]) {
              loaded[size_t(in.slot)] = 1;
              const std::string element = "s" + std::to_string(in.slot) + "[" + element_index(in.slot) + "]";
              b << "      const T l" << in.slot << " = " << load(p, size_t(in.slot), element) << ";\n";
            }
            return "l" + std::to_string(in.slot);
          }
          const FusedRecord& from = p.records[size_t(in.record)];
          const std::string name = "v" + std::to_string(in.record);
          if (from.row || from.pass == pass || defined[size_t(in.record)]) return name;
          defined[size_t(in.record)] = 1;  // a result of an earlier pass not stored: its row buffer
          b << "      const T " << name << " = rb" << from.row_buffer << "[i];\n";
          return name;
        };
        std::vector<int32_t> stored(slots, -1);  // this pass's last store per slot
        for (int32_t r : vectors) {
          const FusedRecord& rec = p.records[size_t(r)];
          std::string operand[kMaxFusedArity];
          for (int j = 0; j < fused_op_arity(rec.op); ++j) operand[j] = value(rec.in[j]);
          record_line(b, "      ", rec, r, operand, p.dtype, fast);
          if (rec.row_buffer >= 0) b << "      rb" << rec.row_buffer << "[i] = v" << r << ";\n";
          if (rec.out_slot >= 0) stored[size_t(rec.out_slot)] = current[size_t(rec.out_slot)] = r;
        }
        folded = sum ? value(red->in[0]) : "";
        if (split && summed_row == "sb") b << "      sb[i] = " << folded << ";\n";
        for (size_t s = 0; s < slots; ++s)
          if (stored[s] >= 0) {
            b << "      s" << s << "[" << element_index(int32_t(s)) << "] = "
              << store(p, s, "v" + std::to_string(stored[s])) << ";\n";
            read_and_stored = read_and_stored || loaded[s];
          }
        return b.str();
      };
      body(false);
      const bool guarded = !read_and_stored && std::ranges::any_of(vectors, [&](int32_t r) {
        return guarded_op(p.records[size_t(r)], p.dtype);
      });
      if (sum && !split) {
        const std::string text = body(false);
        w << "    const T v" << reduction << " = dg::cpu::eight_lane_sum<T>(" << columns
          << ", [&](int64_t i) -> T {\n" << text << "      return " << folded << ";\n    });  // " << red->source
          << "\n";
      } else {
        guarded_loop(w, "    ", "0", n, guarded, [&](bool fast) {
          std::string text = body(fast);
          return text;
        });
        if (sum)
          w << "    const T v" << reduction << " = dg::cpu::eight_lane_sum<T>(" << columns << ", [&](int64_t i) -> T { "
            << "return " << summed_row << "[i]; });  // " << red->source << "\n";
      }
    }
    if (red && !sum) {
      const FusedOperand& in = red->in[0];
      std::string row;
      if (in.slot >= 0) {
        DG_CHECK(p.strides[size_t(in.slot)][nd - 1] == 1, Runtime, "[jit] ", p.name,
                 ": a row reduction over a strided row");
        row = "s" + std::to_string(in.slot) + " + o" + std::to_string(in.slot);
      } else {
        row = "rb" + std::to_string(p.records[size_t(in.record)].row_buffer);
      }
      w << "    const T v" << reduction << " = " << whole_row_reduction(*red, row, columns) << ";  // " << red->source
        << "\n";
    }
    if (red && red->out_slot >= 0) {
      w << "    s" << red->out_slot << "[" << row_index(red->out_slot) << "] = v" << reduction << ";\n";
      current[size_t(red->out_slot)] = reduction;
    }
  }
  const int64_t buffers = int64_t(p.row_buffers) + (sum_buffer ? 1 : 0);
  if (buffers) {  // the row buffers (and the sum buffer): allocated once per range of rows
    o << "  std::vector<T> row_buffers(" << buffers * columns << ");\n";
    for (int32_t b = 0; b < p.row_buffers; ++b)
      o << "  T* __restrict rb" << b << " = row_buffers.data() + " << int64_t(b) * columns << ";\n";
    if (sum_buffer) o << "  T* __restrict sb = row_buffers.data() + " << int64_t(p.row_buffers) * columns << ";\n";
  }
  o << "  for (int64_t r = begin; r < end; ++r) {\n";
  row_offsets(o, p);
  o << w.str() << "  }\n";
}

}  // namespace

std::string generate_cpp(const std::vector<std::shared_ptr<FusedProgram>>& programs) {
  std::ostringstream o;
  o << "// dygrad.jit: fused elementwise kernels generated from a captured graph (docs/jit-fusion.md).\n"
       "// Each function runs its records for elements [begin, end) (one dim) or rows [begin, end) of the innermost\n"
       "// dim; p[s] is slot s's first element. The per-element math is dygrad's scalar functors (math/), as eager's,\n"
       "// and a row's sum or maximum eager's order (backend/cpu/accumulate.h).\n"
       "#include <cmath>\n#include <cstdint>\n#include <vector>\n\n"
       "#include \"dygrad/math/activations.h\"\n#include \"dygrad/math/arithmetic.h\"\n"
       "#include \"dygrad/math/elementary.h\"\n"
       "#include \"dygrad/backend/cpu/accumulate.h\"\n#include \"dygrad/backend/cpu/row_reductions.h\"\n\n"
       "#define DG_FUSED_EXPORT __attribute__((visibility(\"default\")))\n\n";
  if (std::ranges::any_of(programs, [](const auto& p) {
        return std::ranges::any_of(p->slot_dtype, [](DType d) { return d == DType::BFloat16; });
      }))
    o << "// bfloat16 <-> float as core/dtype.h's BFloat16 (eager's conversions): the top half of a float, rounded to\n"
         "// nearest even; a NaN becomes the quiet NaN 0x7fc0.\n"
         "static inline float dg_bf16_load(uint16_t b) {\n"
         "  const uint32_t u = static_cast<uint32_t>(b) << 16;\n  float f;\n  __builtin_memcpy(&f, &u, 4);\n"
         "  return f;\n}\n"
         "static inline uint16_t dg_bf16_bits(float f) {\n  uint32_t u;\n  __builtin_memcpy(&u, &f, 4);\n"
         "  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;\n  u += 0x7fffu + ((u >> 16) & 1u);\n"
         "  return static_cast<uint16_t>(u >> 16);\n}\n"
         "static inline float dg_bf16_round(float f) { return dg_bf16_load(dg_bf16_bits(f)); }\n\n";
  for (const auto& p : programs) {
    // A row program's row records and reductions read and write the compute type only (bfloat16 and boolean
    // slots are its vector records', loaded and stored with their conversions)
    for (const FusedRecord& r : p->records) {
      if (!p->row_reduction || (!r.row && !is_row_reduction(r.op))) continue;
      auto compute = [&](int32_t s) { return s < 0 || size_t(s) >= p->slot_dtype.size() || p->slot_dtype[size_t(s)] == p->dtype; };
      bool ok = compute(r.out_slot);
      for (int j = 0; j < fused_op_arity(r.op); ++j) ok = ok && compute(r.in[j].slot);
      DG_CHECK(ok, Runtime, "[jit] ", p->name, ": a row record over a bfloat16 or boolean slot (", r.source, ")");
    }
    open_function(o, *p);
    if (p->row_reduction) row_program(o, *p);
    else if (p->full_reduction) full_program(o, *p);
    else flat_program(o, *p);
    o << "}\n\n";
  }
  return o.str();
}

}  // namespace dg::jit
