// dygrad.jit's C++ generator (jit/fusion.h, docs/jit-fusion.md): a fused program (runtime/fused_program.h) as one
// extern "C" function of a translation unit per graph, the records written as eager's scalar functors (math/).
#include <cstdio>
#include <sstream>

#include "dygrad/core/error.h"
#include "dygrad/jit/fusion.h"

namespace dg::jit {

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

std::string expression(const FusedRecord& r, const std::string& x, const std::string& y, DType dtype) {
  const std::string k = literal(r.k, dtype);
  const std::string one = "T(1)";
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
    case FusedOpCode::RowSum: case FusedOpCode::RowMax: return x;  // row_program() folds them
  }
  return x;
}

// The function's opening: the slots as typed pointers (`__restrict`: distinct slots never overlap).
void open_function(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots();
  const char* type = p.dtype == DType::Float64 ? "double" : "float";
  o << "// kernel " << p.index << ": " << p.name << ", shape " << shape_str(p.shape) << ", " << dtype_name(p.dtype);
  if (p.row_reduction) o << ", " << p.passes << " pass(es) per row";
  o << "\n";
  for (const FusedRecord& r : p.records)
    o << "//   " << (p.row_reduction ? (r.row ? "row  p" : "elem p") + std::to_string(r.pass) + "  " : "") << r.source
      << "\n";
  o << "// iteration " << shape_str(p.dims) << "; slot strides:";
  for (size_t s = 0; s < slots; ++s) o << " s" << s << shape_str(p.strides[s]);
  o << "\n";
  o << "extern \"C\" DG_FUSED_EXPORT void dg_fused_" << p.index << "(char* const* p, int64_t begin, int64_t end) {\n";
  o << "  using T = " << type << ";\n";
  for (size_t s = 0; s < slots; ++s)
    o << "  " << (p.slot_output[s] >= 0 ? "T" : "const T") << "* __restrict s" << s << " = reinterpret_cast<"
      << (p.slot_output[s] >= 0 ? "T" : "const T") << "*>(p[" << s << "]);\n";
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

// An elementwise program: every element runs the records, then each written slot stores its last value.
void flat_program(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots(), nd = p.dims.size();
  std::vector<std::string> index(slots);
  std::string indent = "  ";
  if (nd == 1) {
    o << "  for (int64_t i = begin; i < end; ++i) {\n";
    for (size_t s = 0; s < slots; ++s)
      index[s] = p.strides[s][0] == 0 ? "0" : p.strides[s][0] == 1 ? "i" : "i * " + std::to_string(p.strides[s][0]);
  } else {
    o << "  for (int64_t r = begin; r < end; ++r) {\n";
    row_offsets(o, p);
    o << "    for (int64_t i = 0; i < " << p.dims[nd - 1] << "; ++i) {\n";
    indent = "    ";
    for (size_t s = 0; s < slots; ++s) {
      const int64_t st = p.strides[s][nd - 1];
      index[s] = "o" + std::to_string(s) + (st == 0 ? "" : st == 1 ? " + i" : " + i * " + std::to_string(st));
    }
  }
  std::vector<int32_t> current(slots, -1);
  std::vector<uint8_t> loaded(slots, 0);
  for (size_t r = 0; r < p.records.size(); ++r) {
    const FusedRecord& rec = p.records[r];
    std::string operand[2];
    for (int j = 0; j < fused_op_arity(rec.op); ++j) {
      const FusedOperand& in = rec.in[j];
      if (in.record >= 0 || current[size_t(in.slot)] >= 0) {  // a result, or forwarded from the slot's last store
        operand[j] = "v" + std::to_string(in.record >= 0 ? in.record : current[size_t(in.slot)]);
        continue;
      }
      if (!loaded[size_t(in.slot)]) {
        loaded[size_t(in.slot)] = 1;
        o << indent << "  const T l" << in.slot << " = s" << in.slot << "[" << index[size_t(in.slot)] << "];\n";
      }
      operand[j] = "l" + std::to_string(in.slot);
    }
    o << indent << "  const T v" << r << " = " << expression(rec, operand[0], operand[1], p.dtype) << ";  // "
      << rec.source << "\n";
    if (rec.out_slot >= 0) current[size_t(rec.out_slot)] = int32_t(r);
  }
  for (size_t s = 0; s < slots; ++s)
    if (current[s] >= 0) o << indent << "  s" << s << "[" << index[s] << "] = v" << current[s] << ";\n";
  o << (nd == 1 ? "  }\n" : "    }\n  }\n");
}

// A row program (runtime/fused_program.h): per row, each pass's row records at the row's scope, then its vector
// records in a loop over the row (RowSum: eight_lane_sum's loop, eager's order), a RowMax after it (lane_extremum
// over the row in memory or its row buffer).
void row_program(std::ostringstream& o, const FusedProgram& p) {
  const size_t slots = p.num_slots(), nd = p.dims.size();
  const int64_t columns = p.dims[nd - 1];
  if (p.row_buffers) {  // the row buffers: allocated once per range of rows
    o << "  std::vector<T> row_buffers(" << int64_t(p.row_buffers) * columns << ");\n";
    for (int32_t b = 0; b < p.row_buffers; ++b)
      o << "  T* __restrict rb" << b << " = row_buffers.data() + " << int64_t(b) * columns << ";\n";
  }
  o << "  for (int64_t r = begin; r < end; ++r) {\n";
  row_offsets(o, p);
  auto row_index = [&](int32_t s) { return "o" + std::to_string(s); };
  auto element_index = [&](int32_t s) {
    const int64_t st = p.strides[size_t(s)][nd - 1];
    return "o" + std::to_string(s) + (st == 0 ? "" : st == 1 ? " + i" : " + i * " + std::to_string(st));
  };
  std::vector<uint8_t> row_loaded(slots, 0);
  std::vector<int32_t> current(slots, -1);  // per slot: the last record that stored it (any pass), or -1
  for (int32_t pass = 0; pass < p.passes; ++pass) {
    o << "    // pass " << pass << "\n";
    std::vector<int32_t> vectors;
    int32_t reduction = -1;
    for (size_t r = 0; r < p.records.size(); ++r) {
      const FusedRecord& rec = p.records[r];
      if (rec.pass != pass) continue;
      if (is_row_reduction(rec.op)) {
        reduction = int32_t(r);
      } else if (rec.row) {  // a row record: once per row, before the pass's loop
        std::string operand[2];
        for (int j = 0; j < fused_op_arity(rec.op); ++j) {
          const FusedOperand& in = rec.in[j];
          if (in.record >= 0 || current[size_t(in.slot)] >= 0) {  // row slots: only row records store them
            operand[j] = "v" + std::to_string(in.record >= 0 ? in.record : current[size_t(in.slot)]);
            continue;
          }
          if (!row_loaded[size_t(in.slot)]) {
            row_loaded[size_t(in.slot)] = 1;
            o << "    const T w" << in.slot << " = s" << in.slot << "[" << row_index(in.slot) << "];\n";
          }
          operand[j] = "w" + std::to_string(in.slot);
        }
        o << "    const T v" << r << " = " << expression(rec, operand[0], operand[1], p.dtype) << ";  // "
          << rec.source << "\n";
        if (rec.out_slot >= 0) {
          o << "    s" << rec.out_slot << "[" << row_index(rec.out_slot) << "] = v" << r << ";\n";
          current[size_t(rec.out_slot)] = int32_t(r);
        }
      } else {
        vectors.push_back(int32_t(r));
      }
    }
    const FusedRecord* red = reduction >= 0 ? &p.records[size_t(reduction)] : nullptr;
    const bool sum = red && red->op == FusedOpCode::RowSum;
    if (!vectors.empty() || sum) {
      // The loop's body: each value it needs defined once (loads, a value of an earlier pass, the records).
      std::ostringstream body;
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
            body << "      const T l" << in.slot << " = s" << in.slot << "[" << element_index(in.slot) << "];\n";
          }
          return "l" + std::to_string(in.slot);
        }
        const FusedRecord& from = p.records[size_t(in.record)];
        const std::string name = "v" + std::to_string(in.record);
        if (from.row || from.pass == pass || defined[size_t(in.record)]) return name;
        defined[size_t(in.record)] = 1;  // a result of an earlier pass not stored: its row buffer
        body << "      const T " << name << " = rb" << from.row_buffer << "[i];\n";
        return name;
      };
      std::vector<int32_t> stored(slots, -1);  // this pass's last store per slot
      for (int32_t r : vectors) {
        const FusedRecord& rec = p.records[size_t(r)];
        std::string operand[2];
        for (int j = 0; j < fused_op_arity(rec.op); ++j) operand[j] = value(rec.in[j]);
        body << "      const T v" << r << " = " << expression(rec, operand[0], operand[1], p.dtype) << ";  // "
             << rec.source << "\n";
        if (rec.row_buffer >= 0) body << "      rb" << rec.row_buffer << "[i] = v" << r << ";\n";
        if (rec.out_slot >= 0) stored[size_t(rec.out_slot)] = current[size_t(rec.out_slot)] = r;
      }
      const std::string folded = sum ? value(red->in[0]) : "";
      for (size_t s = 0; s < slots; ++s)
        if (stored[s] >= 0) body << "      s" << s << "[" << element_index(int32_t(s)) << "] = v" << stored[s] << ";\n";
      if (sum) {
        o << "    const T v" << reduction << " = dg::cpu::eight_lane_sum<T>(" << columns
          << ", [&](int64_t i) -> T {\n" << body.str() << "      return " << folded << ";\n    });  // "
          << red->source << "\n";
      } else {
        o << "    for (int64_t i = 0; i < " << columns << "; ++i) {\n" << body.str() << "    }\n";
      }
    }
    if (red && !sum) {
      const FusedOperand& in = red->in[0];
      std::string row;
      if (in.slot >= 0) {
        DG_CHECK(p.strides[size_t(in.slot)][nd - 1] == 1, Runtime, "[jit] ", p.name, ": a row maximum over a strided row");
        row = "s" + std::to_string(in.slot) + " + o" + std::to_string(in.slot);
      } else {
        row = "rb" + std::to_string(p.records[size_t(in.record)].row_buffer);
      }
      o << "    const T v" << reduction << " = dg::cpu::lane_extremum<true, T>(" << row << ", " << columns << ");  // "
        << red->source << "\n";
    }
    if (red && red->out_slot >= 0) {
      o << "    s" << red->out_slot << "[" << row_index(red->out_slot) << "] = v" << reduction << ";\n";
      current[size_t(red->out_slot)] = reduction;
    }
  }
  o << "  }\n";
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
       "#include \"dygrad/backend/cpu/accumulate.h\"\n\n"
       "#define DG_FUSED_EXPORT __attribute__((visibility(\"default\")))\n\n";
  for (const auto& p : programs) {
    open_function(o, *p);
    if (p->row_reduction) row_program(o, *p);
    else flat_program(o, *p);
    o << "}\n\n";
  }
  return o.str();
}

}  // namespace dg::jit
