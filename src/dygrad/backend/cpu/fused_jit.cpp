// CPU kernel of dygrad.jit's fused elementwise sub-op (`jit_fused`, runtime/fused_program.h, docs/jit-fusion.md):
// runs the program's generated function once it is loaded, and an interpreter of its records until then (or where no
// compiler exists, or when a poisoned input makes some records skip). Both use the scalar functors of math/ that
// eager's kernels use, compiled at this file's kernel level (this file is part of each level's plugin), so either
// gives eager's bits.
//
//   inputs: the slots the program reads; outputs: the slots it stores; FusedAttrs: the program (and a skip mask)
//   void fused_kernel(Task& task);
#include "dygrad/runtime/fused_program.h"
#include "dygrad/runtime/op_def.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <numeric>
#include <type_traits>

#include "dygrad/backend/cpu/accumulate.h"
#include "dygrad/backend/cpu/loops.h"
#include "dygrad/backend/cpu/row_reductions.h"
#include "dygrad/math/activations.h"
#include "dygrad/math/arithmetic.h"
#include "dygrad/math/elementary.h"
#include "dygrad/runtime/scratch.h"

namespace dg::cpu {

namespace {

#define DG_FUSED_MAP1(expr)                                 \
  for (int64_t i = 0; i < n; ++i) {                          \
    [[maybe_unused]] const V x = a[i];                       \
    out[i] = (expr);                                         \
  }                                                          \
  return
#define DG_FUSED_MAP2(expr)                                 \
  for (int64_t i = 0; i < n; ++i) {                          \
    const V x = a[i], y = b[i];                              \
    out[i] = (expr);                                         \
  }                                                          \
  return
#define DG_FUSED_MAP3(expr)                                 \
  for (int64_t i = 0; i < n; ++i) {                          \
    const V x = a[i], y = b[i], z = c[i];                    \
    out[i] = (expr);                                         \
  }                                                          \
  return

// One record over n elements: out[i] = op(a[i], b[i], c[i]), with eager's functor for the op
// (backend/cpu/arithmetic.cpp, unary.cpp, compare.cpp: the same expressions); k2: a second scalar. A boolean is 0 or 1.
template <typename V>
void eval_record(FusedOpCode op, V k, V* out, const V* a, const V* b, int64_t n, const V* c = nullptr, V k2 = V(0)) {
  auto boolean = [](bool t) { return t ? V(1) : V(0); };
  switch (op) {
    case FusedOpCode::Add:
      if (k == V(1)) { DG_FUSED_MAP2(math::add_scaled(x, y, V(1))); }
      DG_FUSED_MAP2(math::add_scaled(x, y, k));
    case FusedOpCode::Mul: DG_FUSED_MAP2(math::mul(x, y));
    case FusedOpCode::Div: DG_FUSED_MAP2(math::div(x, y));
    case FusedOpCode::AddScalar: DG_FUSED_MAP1(x + k);
    case FusedOpCode::MulScalar: DG_FUSED_MAP1(x * k);
    case FusedOpCode::DivScalar: DG_FUSED_MAP1(x / k);
    case FusedOpCode::RsubScalar: DG_FUSED_MAP1(math::rsub(x, k));
    case FusedOpCode::RdivScalar: DG_FUSED_MAP1(k / x);
    case FusedOpCode::Neg: DG_FUSED_MAP1(math::neg(x));
    case FusedOpCode::Sqrt: DG_FUSED_MAP1(std::sqrt(x));
    case FusedOpCode::Rsqrt: DG_FUSED_MAP1(V(1) / std::sqrt(x));
    case FusedOpCode::Reciprocal: DG_FUSED_MAP1(V(1) / x);
    case FusedOpCode::Abs: DG_FUSED_MAP1(std::fabs(x));
    case FusedOpCode::Relu: DG_FUSED_MAP1(x < V(0) ? V(0) : x);
    case FusedOpCode::Sigmoid: DG_FUSED_MAP1(math::sigmoid(x));
    case FusedOpCode::Silu: DG_FUSED_MAP1(math::silu(x));
    case FusedOpCode::Tanh: DG_FUSED_MAP1(math::tanh(x));
    case FusedOpCode::PowScalar:
      if (k == V(0)) { DG_FUSED_MAP1(V(1)); }
      if (k == V(1)) { DG_FUSED_MAP1(x); }
      if (k == V(2)) { DG_FUSED_MAP1(V(x * x)); }
      if (k == V(3)) { DG_FUSED_MAP1(V(x * x * x)); }
      if (k == V(-1)) { DG_FUSED_MAP1(V(1) / x); }
      if (k == V(-2)) { DG_FUSED_MAP1(V(1) / (x * x)); }
      if (k == V(0.5)) { DG_FUSED_MAP1(std::sqrt(x)); }
      if (k == V(-0.5)) { DG_FUSED_MAP1(V(1) / std::sqrt(x)); }
      DG_FUSED_MAP1(math::pow(x, k));
    case FusedOpCode::Maximum: DG_FUSED_MAP2(math::maximum(x, y));
    case FusedOpCode::Minimum: DG_FUSED_MAP2(math::minimum(x, y));
    case FusedOpCode::SigmoidBackward: DG_FUSED_MAP2(math::sigmoid_backward(x, y));
    case FusedOpCode::TanhBackward: DG_FUSED_MAP2(math::tanh_backward(x, y));
    case FusedOpCode::SiluBackward: DG_FUSED_MAP2(math::silu_backward(x, y));
    case FusedOpCode::ReluBackward: DG_FUSED_MAP2(math::relu_backward(x, y));
    case FusedOpCode::Copy: DG_FUSED_MAP1(x);
    case FusedOpCode::Exp: DG_FUSED_MAP1(math::exp(x));
    case FusedOpCode::Log: DG_FUSED_MAP1(math::log(x));
    case FusedOpCode::Expm1: DG_FUSED_MAP1(math::expm1(x));
    case FusedOpCode::Log1p: DG_FUSED_MAP1(math::log1p(x));
    case FusedOpCode::Gelu:
      if (k == V(0)) { DG_FUSED_MAP1(math::gelu_erf(x)); }
      DG_FUSED_MAP1(math::gelu_tanh(x));
    case FusedOpCode::GeluBackward:
      if (k == V(0)) { DG_FUSED_MAP2(math::gelu_erf_backward(x, y)); }
      DG_FUSED_MAP2(math::gelu_tanh_backward(x, y));
    case FusedOpCode::Sign: DG_FUSED_MAP1(V(int(V(0) < x) - int(x < V(0))));
    case FusedOpCode::LerpScalar: DG_FUSED_MAP2(math::lerp(x, y, k));
    case FusedOpCode::MaskedFill: DG_FUSED_MAP2(y != V(0) ? k : x);
    case FusedOpCode::Eq: DG_FUSED_MAP2(boolean(x == y));
    case FusedOpCode::Ne: DG_FUSED_MAP2(boolean(x != y));
    case FusedOpCode::Lt: DG_FUSED_MAP2(boolean(x < y));
    case FusedOpCode::Le: DG_FUSED_MAP2(boolean(x <= y));
    case FusedOpCode::Gt: DG_FUSED_MAP2(boolean(x > y));
    case FusedOpCode::Ge: DG_FUSED_MAP2(boolean(x >= y));
    case FusedOpCode::EqScalar: DG_FUSED_MAP1(boolean(x == k));
    case FusedOpCode::NeScalar: DG_FUSED_MAP1(boolean(x != k));
    case FusedOpCode::LtScalar: DG_FUSED_MAP1(boolean(x < k));
    case FusedOpCode::LeScalar: DG_FUSED_MAP1(boolean(x <= k));
    case FusedOpCode::GtScalar: DG_FUSED_MAP1(boolean(x > k));
    case FusedOpCode::GeScalar: DG_FUSED_MAP1(boolean(x >= k));
    case FusedOpCode::LogicalNot: DG_FUSED_MAP1(boolean(!(x != V(0))));
    case FusedOpCode::LogicalAnd: DG_FUSED_MAP2(boolean(x != V(0) && y != V(0)));
    case FusedOpCode::LogicalOr: DG_FUSED_MAP2(boolean(x != V(0) || y != V(0)));
    case FusedOpCode::LogicalXor: DG_FUSED_MAP2(boolean((x != V(0)) != (y != V(0))));
    case FusedOpCode::Where: DG_FUSED_MAP3(x != V(0) ? y : z);
    case FusedOpCode::WhereScalar: DG_FUSED_MAP2(x != V(0) ? y : k);
    case FusedOpCode::WhereScalarTrue: DG_FUSED_MAP2(x != V(0) ? k : y);
    case FusedOpCode::ClampScalar: DG_FUSED_MAP1(math::clamp_above(math::clamp_below(x, k), k2));
    case FusedOpCode::ClampTensor:
      DG_FUSED_MAP3(math::clamp_above_propagating(math::clamp_below_propagating(x, y), z));
    case FusedOpCode::ClampMinTensor: DG_FUSED_MAP2(math::clamp_below_propagating(x, y));
    case FusedOpCode::ClampMaxTensor: DG_FUSED_MAP2(math::clamp_above_propagating(x, y));
    case FusedOpCode::Sin:  // eager's guarded kernel (unary.cpp): the bounded form in its range, libm's outside
      if constexpr (std::is_same_v<V, float>) {
        DG_FUSED_MAP1(math::sin_cos_in_range(x) ? math::sin_bounded(x) : std::sin(x));
      } else {
        DG_FUSED_MAP1(std::sin(x));
      }
    case FusedOpCode::Cos:
      if constexpr (std::is_same_v<V, float>) {
        DG_FUSED_MAP1(math::sin_cos_in_range(x) ? math::cos_bounded(x) : std::cos(x));
      } else {
        DG_FUSED_MAP1(std::cos(x));
      }
    case FusedOpCode::RowSum: case FusedOpCode::RowMax: case FusedOpCode::RowMin: case FusedOpCode::RowMaxValue:
    case FusedOpCode::RowMinValue: case FusedOpCode::RowVar: case FusedOpCode::RowStd: case FusedOpCode::RowLogsumexp:
    case FusedOpCode::FullSum:
      return;  // RowInterpreter (over whole rows), full_reduction (over chunks)
  }
}
#undef DG_FUSED_MAP1
#undef DG_FUSED_MAP2
#undef DG_FUSED_MAP3

// A row reduction that reads the whole row (fused_program.h's reads_whole_row), as the generated code calls it.
template <typename V>
V whole_row_reduction(const FusedRecord& rec, const V* row, int64_t n) {
  switch (rec.op) {
    case FusedOpCode::RowMax: return lane_extremum<true, V>(row, n);
    case FusedOpCode::RowMin: return lane_extremum<false, V>(row, n);
    case FusedOpCode::RowMaxValue: return first_extremum_value<true, V>(row, n);
    case FusedOpCode::RowMinValue: return first_extremum_value<false, V>(row, n);
    case FusedOpCode::RowVar: return row_variance<V>(row, n, rec.k, false);
    case FusedOpCode::RowStd: return row_variance<V>(row, n, rec.k, true);
    case FusedOpCode::RowLogsumexp: return row_logsumexp<V>(row, n);
    default: return V(0);  // not reached: RowSum folds in the loop, and no other record is a reduction
  }
}

constexpr int64_t kChunk = 256;
constexpr int kMaxSlots = 64;

// Eager's op wrote bfloat16: its results as it stored them (and the next op read them).
template <typename V>
void round_to_bf16(V* x, int64_t m) {
  for (int64_t i = 0; i < m; ++i) x[i] = static_cast<V>(static_cast<float>(BFloat16(static_cast<float>(x[i]))));
}

// m values of slot s as the compute type, from its element `at` stepping `step` (its dtype in memory: the compute
// type, a float32 program's bfloat16 read as its float, a boolean read as 0 or 1), and back (a bfloat16 rounded as
// eager stores it, a boolean result as eager's bool byte).
template <typename V>
void slot_load(const FusedProgram& prog, size_t s, char* const* p, int64_t at, int64_t step, int64_t m, V* dst) {
  const DType d = s < prog.slot_dtype.size() ? prog.slot_dtype[s] : prog.dtype;
  if (d == DType::Bool) {
    const uint8_t* src = reinterpret_cast<const uint8_t*>(p[s]) + at;
    for (int64_t i = 0; i < m; ++i) dst[i] = src[i * step] ? V(1) : V(0);
  } else if (d == DType::BFloat16) {
    const BFloat16* src = reinterpret_cast<const BFloat16*>(p[s]) + at;
    for (int64_t i = 0; i < m; ++i) dst[i] = static_cast<V>(static_cast<float>(src[i * step]));
  } else {
    const V* src = reinterpret_cast<const V*>(p[s]) + at;
    for (int64_t i = 0; i < m; ++i) dst[i] = src[i * step];
  }
}
template <typename V>
void slot_store(const FusedProgram& prog, size_t s, char* const* p, int64_t at, int64_t step, int64_t m, const V* src) {
  const DType d = s < prog.slot_dtype.size() ? prog.slot_dtype[s] : prog.dtype;
  if (d == DType::Bool) {
    uint8_t* dst = reinterpret_cast<uint8_t*>(p[s]) + at;
    for (int64_t i = 0; i < m; ++i) dst[i * step] = src[i] != V(0) ? 1 : 0;
  } else if (d == DType::BFloat16) {
    BFloat16* dst = reinterpret_cast<BFloat16*>(p[s]) + at;
    for (int64_t i = 0; i < m; ++i) dst[i * step] = BFloat16(static_cast<float>(src[i]));
  } else {
    V* dst = reinterpret_cast<V*>(p[s]) + at;
    for (int64_t i = 0; i < m; ++i) dst[i * step] = src[i];
  }
}

// The interpreter over one run of n elements of an elementwise program: slot s's first element at p[s] + offset[s]
// elements, stepping inner[s]. Loads every slot the program reads, runs the records chunk by chunk, stores each
// slot's last value. A full-reduction program's vector records: its sum and the records after it are not run here;
// `summed` receives the values of `fold` (the sum's operand) for the n elements.
template <typename V>
void interpret_run(const FusedProgram& prog, const uint8_t* skip, char* const* p, const int64_t* offset,
                   const int64_t* inner, int64_t n, std::vector<V>& work, const FusedOperand* fold = nullptr,
                   V* summed = nullptr) {
  const size_t slots = prog.num_slots(), records = prog.records.size();
  // work: a chunk per slot (loaded values) then per record (results)
  V* slot_buf = work.data();
  V* rec_buf = work.data() + slots * kChunk;
  int32_t current[kMaxSlots];  // per slot: the record whose result it holds now, or -1 (memory)
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t m = std::min(kChunk, n - c0);
    for (size_t s = 0; s < slots; ++s) {
      current[s] = -1;
      if (prog.slot_input[s] < 0) continue;
      slot_load<V>(prog, s, p, offset[s] + c0 * inner[s], inner[s], m, slot_buf + s * kChunk);
    }
    for (size_t r = 0; r < records; ++r) {
      if (skip && skip[r]) continue;
      const FusedRecord& rec = prog.records[r];
      if (rec.row || is_row_reduction(rec.op)) continue;
      const V* operand[kMaxFusedArity] = {nullptr, nullptr, nullptr};
      for (int j = 0; j < fused_op_arity(rec.op); ++j) {
        const FusedOperand& o = rec.in[j];
        if (o.record >= 0) operand[j] = rec_buf + size_t(o.record) * kChunk;
        else if (current[o.slot] >= 0) operand[j] = rec_buf + size_t(current[o.slot]) * kChunk;  // forwarded
        else operand[j] = slot_buf + size_t(o.slot) * kChunk;
      }
      V* result = rec_buf + r * kChunk;
      eval_record<V>(rec.op, static_cast<V>(rec.k), result, operand[0], operand[1], m, operand[2],
                     static_cast<V>(rec.k2));
      if (rec.round_bf16) round_to_bf16<V>(result, m);
      if (rec.out_slot >= 0) current[rec.out_slot] = static_cast<int32_t>(r);
    }
    if (summed) {
      const V* from = fold->record >= 0          ? rec_buf + size_t(fold->record) * kChunk
                      : current[fold->slot] >= 0 ? rec_buf + size_t(current[fold->slot]) * kChunk
                                                 : slot_buf + size_t(fold->slot) * kChunk;
      std::copy_n(from, m, summed + c0);
    }
    for (size_t s = 0; s < slots; ++s) {
      if (prog.slot_output[s] < 0 || current[s] < 0) continue;
      slot_store<V>(prog, s, p, offset[s] + c0 * inner[s], inner[s], m, rec_buf + size_t(current[s]) * kChunk);
    }
  }
}

// The row of the coalesced iteration `row` (dims but the innermost), as each slot's element offset.
void row_offsets(const FusedProgram& prog, int64_t row, int64_t* offset) {
  const size_t nd = prog.dims.size();
  for (size_t s = 0; s < prog.num_slots(); ++s) offset[s] = 0;
  for (size_t d = nd - 1; d-- > 0;) {
    const int64_t i = row % prog.dims[d];
    row /= prog.dims[d];
    for (size_t s = 0; s < prog.num_slots(); ++s) offset[s] += i * prog.strides[s][d];
  }
}

// A row program's records by pass (runtime/fused_program.h), skipped records left out.
struct PassPlan {
  std::vector<int32_t> row_records, vectors;  // in order
  int32_t reduction = -1;
};
std::vector<PassPlan> plan_passes(const FusedProgram& prog, const uint8_t* skip) {
  std::vector<PassPlan> plan(size_t(prog.passes));
  for (size_t r = 0; r < prog.records.size(); ++r) {
    if (skip && skip[r]) continue;
    const FusedRecord& rec = prog.records[r];
    PassPlan& pass = plan[size_t(rec.pass)];
    if (is_row_reduction(rec.op)) pass.reduction = int32_t(r);
    else if (rec.row) pass.row_records.push_back(int32_t(r));
    else pass.vectors.push_back(int32_t(r));
  }
  return plan;
}

// One row of a row program: per pass, its row records once, its vector records chunk by chunk over the row, then
// its reduction in eager's order (eight_lane_sum over the summed values, lane_extremum and row_reductions.h over the
// row).
template <typename V>
struct RowInterpreter {
  const FusedProgram& prog;
  const std::vector<PassPlan>& plan;
  char* const* p;
  int64_t columns;
  // per record: a chunk of values (vector records; a row value broadcast, for the vector records reading it)
  std::vector<V> chunks;
  std::vector<V> slot_chunks;  // per slot: a chunk loaded from memory
  std::vector<V> row_value;    // per record: its value (row records)
  std::vector<V> row_buffers;  // prog.row_buffers rows
  std::vector<V> summed;       // the values a RowSum folds, a row

  RowInterpreter(const FusedProgram& prog, const std::vector<PassPlan>& plan, char* const* p)
      : prog(prog), plan(plan), p(p), columns(prog.dims.back()),
        chunks(prog.records.size() * kChunk), slot_chunks(prog.num_slots() * kChunk), row_value(prog.records.size()),
        row_buffers(size_t(prog.row_buffers) * size_t(columns)), summed(size_t(columns)) {}

  V* chunk(size_t r) { return chunks.data() + r * kChunk; }
  V* slot_chunk(size_t s) { return slot_chunks.data() + s * kChunk; }
  V* row_buffer(int32_t b) { return row_buffers.data() + size_t(b) * size_t(columns); }

  V* element(int32_t s, const int64_t* offset) { return reinterpret_cast<V*>(p[s]) + offset[s]; }

  void run(const int64_t* offset) {
    const size_t nd = prog.dims.size();
    for (size_t pass = 0; pass < plan.size(); ++pass) {
      const PassPlan& pp = plan[pass];
      for (int32_t r : pp.row_records) {
        const FusedRecord& rec = prog.records[size_t(r)];
        V operand[kMaxFusedArity] = {V(0), V(0), V(0)};
        for (int j = 0; j < fused_op_arity(rec.op); ++j)
          operand[j] = rec.in[j].record >= 0 ? row_value[size_t(rec.in[j].record)] : *element(rec.in[j].slot, offset);
        eval_record<V>(rec.op, static_cast<V>(rec.k), &row_value[size_t(r)], &operand[0], &operand[1], 1, &operand[2],
                       static_cast<V>(rec.k2));
        if (rec.out_slot >= 0) *element(rec.out_slot, offset) = row_value[size_t(r)];
      }
      const FusedRecord* red = pp.reduction >= 0 ? &prog.records[size_t(pp.reduction)] : nullptr;
      const bool sum = red && red->op == FusedOpCode::RowSum;
      if (!pp.vectors.empty() || sum) {
        // Row values the vector records read, as chunks.
        for (int32_t r : pp.vectors)
          for (int j = 0; j < fused_op_arity(prog.records[size_t(r)].op); ++j) {
            const int32_t from = prog.records[size_t(r)].in[j].record;
            if (from >= 0 && prog.records[size_t(from)].row) std::fill_n(chunk(size_t(from)), kChunk, row_value[size_t(from)]);
          }
        for (int64_t c0 = 0; c0 < columns; c0 += kChunk) {
          const int64_t m = std::min(kChunk, columns - c0);
          int32_t current[kMaxSlots];  // per slot: this pass's last record that stored it (this chunk), or -1
          std::fill_n(current, prog.num_slots(), -1);
          // An operand's values for this chunk: this pass's result or last store, a row value, a row buffer (an
          // earlier pass's result), or memory (a slot no record of this pass stored yet).
          auto values = [&](const FusedOperand& in) -> const V* {
            if (in.record >= 0) {
              const FusedRecord& from = prog.records[size_t(in.record)];
              if (from.row || size_t(from.pass) == pass) return chunk(size_t(in.record));
              return row_buffer(from.row_buffer) + c0;
            }
            if (current[in.slot] >= 0) return chunk(size_t(current[in.slot]));
            const int64_t step = prog.strides[size_t(in.slot)][nd - 1];
            V* dst = slot_chunk(size_t(in.slot));
            slot_load<V>(prog, size_t(in.slot), p, offset[in.slot] + c0 * step, step, m, dst);
            return dst;
          };
          for (int32_t r : pp.vectors) {
            const FusedRecord& rec = prog.records[size_t(r)];
            const V* operand[kMaxFusedArity] = {nullptr, nullptr, nullptr};
            for (int j = 0; j < fused_op_arity(rec.op); ++j) operand[j] = values(rec.in[j]);
            eval_record<V>(rec.op, static_cast<V>(rec.k), chunk(size_t(r)), operand[0], operand[1], m, operand[2],
                           static_cast<V>(rec.k2));
            if (rec.round_bf16) round_to_bf16<V>(chunk(size_t(r)), m);
            if (rec.row_buffer >= 0) std::copy_n(chunk(size_t(r)), m, row_buffer(rec.row_buffer) + c0);
            if (rec.out_slot >= 0) current[rec.out_slot] = r;
          }
          if (sum) std::copy_n(values(red->in[0]), m, summed.data() + c0);
          for (size_t s = 0; s < prog.num_slots(); ++s) {
            if (current[s] < 0) continue;
            const int64_t step = prog.strides[s][nd - 1];
            slot_store<V>(prog, s, p, offset[s] + c0 * step, step, m, chunk(size_t(current[s])));
          }
        }
      }
      if (!red) continue;
      V& result = row_value[size_t(pp.reduction)];
      if (sum) {  // eager's order (reduce.cpp's row path: eight_lane_sum)
        result = eight_lane_sum<V>(columns, [&](int64_t i) { return summed[size_t(i)]; });
      } else {  // eager's row path of amax, amin, max(dim), var, std, logsumexp (row_reductions.h)
        const FusedOperand& in = red->in[0];
        const V* row = in.slot >= 0 ? element(in.slot, offset) : row_buffer(prog.records[size_t(in.record)].row_buffer);
        result = whole_row_reduction<V>(*red, row, columns);
      }
      if (red->out_slot >= 0) *element(red->out_slot, offset) = result;
    }
  }
};

template <typename V>
void interpret(const FusedProgram& prog, const uint8_t* skip, char* const* p) {
  const size_t nd = prog.dims.size(), slots = prog.num_slots();
  int64_t inner[kMaxSlots];
  for (size_t s = 0; s < slots; ++s) inner[s] = prog.strides[s][nd - 1];
  const int64_t columns = prog.dims[nd - 1];
  const size_t work_size = (slots + prog.records.size()) * kChunk;
  if (nd == 1) {
    parallel_for(0, columns, kElementwiseGrain, [&](int64_t begin, int64_t end) {
      std::vector<V> work(work_size);
      int64_t offset[kMaxSlots] = {};
      for (size_t s = 0; s < slots; ++s) offset[s] = begin * inner[s];
      interpret_run<V>(prog, skip, p, offset, inner, end - begin, work);
    });
    return;
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d) rows *= prog.dims[d];
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(columns, 1));
  if (prog.row_reduction) {
    const std::vector<PassPlan> plan = plan_passes(prog, skip);
    parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      RowInterpreter<V> row(prog, plan, p);
      int64_t offset[kMaxSlots] = {};
      for (int64_t r = begin; r < end; ++r) {
        row_offsets(prog, r, offset);
        row.run(offset);
      }
    });
    return;
  }
  parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<V> work(work_size);
    int64_t offset[kMaxSlots] = {};
    for (int64_t r = begin; r < end; ++r) {
      row_offsets(prog, r, offset);
      interpret_run<V>(prog, skip, p, offset, inner, columns, work);
    }
  });
}

// A full-reduction program (runtime/fused_program.h): each chunk's partial sum (the generated function `fn`, or the
// interpreter over the chunk's elements and eight_lane_sum over its summed values), the partials added in chunk order
// into a zero (sum_kernel's order), then the records on the total, once, with the functors eager's kernels use.
template <typename V>
void full_reduction(const FusedProgram& prog, const uint8_t* skip, char* const* p, FusedProgram::Fn fn) {
  const size_t slots = prog.num_slots(), nd = prog.dims.size();
  // One dim: chunks of kFullReduceChunk elements; rows (fused_program.h): chunks of whole rows.
  const int64_t columns = prog.dims[nd - 1], per = nd == 1 ? 0 : kFullReduceChunk / columns;
  const int64_t n = nd == 1 ? columns : std::reduce(prog.dims.begin(), prog.dims.end() - 1, int64_t(1),
                                                    std::multiplies<>());  // elements, or rows
  const int64_t chunks = nd == 1 ? (n + kFullReduceChunk - 1) / kFullReduceChunk : (n + per - 1) / per;
  size_t sum_at = 0;
  while (prog.records[sum_at].op != FusedOpCode::FullSum) ++sum_at;
  const FusedRecord& red = prog.records[sum_at];
  std::vector<V> partial(static_cast<size_t>(chunks));
  if (fn) {
    char* q[kMaxSlots + 1];
    std::copy_n(p, slots, q);
    q[slots] = reinterpret_cast<char*>(partial.data());
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) { fn(q, b, e); });
  } else {
    int64_t inner[kMaxSlots];
    for (size_t s = 0; s < slots; ++s) inner[s] = prog.strides[s][nd - 1];
    parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
      std::vector<V> work((slots + prog.records.size()) * kChunk), summed(static_cast<size_t>(kFullReduceChunk));
      int64_t offset[kMaxSlots];
      for (int64_t c = b; c < e; ++c) {
        int64_t m = 0;  // the chunk's elements, their summed values in order in `summed`
        if (nd == 1) {
          const int64_t c0 = c * kFullReduceChunk;
          m = std::min(kFullReduceChunk, n - c0);
          for (size_t s = 0; s < slots; ++s) offset[s] = c0 * inner[s];
          interpret_run<V>(prog, skip, p, offset, inner, m, work, &red.in[0], summed.data());
        } else {
          for (int64_t r = c * per; r < std::min(n, (c + 1) * per); ++r, m += columns) {
            row_offsets(prog, r, offset);
            interpret_run<V>(prog, skip, p, offset, inner, columns, work, &red.in[0], summed.data() + m);
          }
        }
        partial[size_t(c)] = eight_lane_sum<V>(m, [&](int64_t i) { return summed[size_t(i)]; });
      }
    });
  }
  auto element = [&](int32_t s) { return reinterpret_cast<V*>(p[s]); };  // a slot of one element
  std::vector<V> value(prog.records.size());
  if (!skip || !skip[sum_at]) {
    V total = V(0);
    for (V part : partial) total += part;
    value[sum_at] = total;
    if (red.out_slot >= 0) *element(red.out_slot) = total;
  }
  for (size_t r = sum_at + 1; r < prog.records.size(); ++r) {
    if (skip && skip[r]) continue;
    const FusedRecord& rec = prog.records[r];
    V operand[kMaxFusedArity] = {V(0), V(0), V(0)};
    for (int j = 0; j < fused_op_arity(rec.op); ++j)
      operand[j] = rec.in[j].record >= 0 ? value[size_t(rec.in[j].record)] : *element(rec.in[j].slot);
    eval_record<V>(rec.op, static_cast<V>(rec.k), &value[r], &operand[0], &operand[1], 1, &operand[2],
                   static_cast<V>(rec.k2));
    if (rec.out_slot >= 0) *element(rec.out_slot) = value[r];
  }
}

}  // namespace

void fused_kernel(Task& task) {
  const FusedAttrs& attrs = task.attrs.get<FusedAttrs>();
  const FusedProgram& prog = *attrs.program;
  char* p[kMaxSlots];
  for (size_t s = 0; s < prog.num_slots(); ++s) {
    const Tensor& t = prog.slot_output[s] >= 0 ? task.outputs[size_t(prog.slot_output[s])]
                                               : task.inputs[size_t(prog.slot_input[s])];
    p[s] = static_cast<char*>(t.raw_data());
  }
  int64_t numel = 1;
  for (int64_t d : prog.dims) numel *= d;
  if (numel == 0) return;
  const uint8_t* skip = attrs.skip ? attrs.skip->record.data() : nullptr;
  auto interpreted = [&] {
    if (prog.full_reduction && prog.dtype == DType::Float64) return full_reduction<double>(prog, skip, p, nullptr);
    if (prog.full_reduction) return full_reduction<float>(prog, skip, p, nullptr);
    if (prog.dtype == DType::Float64) interpret<double>(prog, skip, p);
    else interpret<float>(prog, skip, p);
  };
  const FusedProgram::Fn fn = prog.compiled.load(std::memory_order_acquire);
  if (!fn || skip) return interpreted();
  // The generated code reaches a slot through another's pointer at the distance the capture saw (slot_base): where
  // this launch's operands lie otherwise, the interpreter runs (it addresses every slot by its own pointer).
  for (size_t s = 0; s < prog.slot_base.size(); ++s) {
    const size_t b = size_t(prog.slot_base[s]);
    if (b != s && p[s] != p[b] + prog.slot_delta[s] * static_cast<int64_t>(itemsize(prog.slot_dtype[s])))
      return interpreted();
  }
  auto generated = [&] {
    if (prog.full_reduction && prog.dtype == DType::Float64) return full_reduction<double>(prog, nullptr, p, fn);
    if (prog.full_reduction) return full_reduction<float>(prog, nullptr, p, fn);
    const size_t nd = prog.dims.size();
    const int64_t columns = prog.dims[nd - 1];
    if (nd == 1) return parallel_for(0, columns, kElementwiseGrain, [&](int64_t b, int64_t e) { fn(p, b, e); });
    parallel_for(0, numel / columns, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(columns, 1)),
                 [&](int64_t b, int64_t e) { fn(p, b, e); });
  };
  using Choice = FusedProgram::Choice;
  const Choice choice = prog.choice.load(std::memory_order_relaxed);
  if (choice == Choice::Generated) return generated();
  if (choice == Choice::Interpreted) return interpreted();
  // Measuring: this launch runs one of the two, timed (the launches of one graph run in order; the atomics keep
  // two graphs sharing nothing anyway).
  constexpr int32_t runs = FusedProgram::kChoiceRuns;
  const int32_t trial = prog.trials.fetch_add(1, std::memory_order_relaxed);
  if (trial >= 2 * runs) return generated();  // the deciding launch has not stored its choice yet
  const int which = trial % 2;
  const auto start = std::chrono::steady_clock::now();
  if (which == 0) generated();
  else interpreted();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  std::atomic<int64_t>& best = prog.best_ns[which];
  for (int64_t seen = best.load(std::memory_order_relaxed);
       ns < seen && !best.compare_exchange_weak(seen, ns, std::memory_order_relaxed);) {
  }
  if (trial == 2 * runs - 1) {
    const int64_t g = prog.best_ns[0].load(std::memory_order_relaxed);
    const int64_t i = prog.best_ns[1].load(std::memory_order_relaxed);
    prog.choice.store(i < g - g / 20 ? Choice::Interpreted : Choice::Generated, std::memory_order_relaxed);
  }
}

DG_REGISTER_KERNEL(jit_fused, Device::Type::CPU, fused_kernel);

}  // namespace dg::cpu
