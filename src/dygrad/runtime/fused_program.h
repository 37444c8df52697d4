// A fused elementwise program (dygrad.jit's fusion, docs/jit-fusion.md): the ops of one group of consecutive
// elementwise sub-ops of a captured graph, in their order, as one sub-op (`jit_fused`) that runs them in a single
// pass over memory, or, where row reductions join (a row program), in a few passes over each row. Backend-neutral:
// the passes (jit/fusion.cpp) build it from the op table; a backend runs it (backend/cpu/fused_jit.cpp: generated
// code when it is loaded, an interpreter of the same records until then or where no compiler exists) and generates
// code for it (jit/fusion.cpp's C++ generator for the CPU).
//
// Semantics: for every index i of `shape`, the records run in order; a record reads its operands (a slot: the
// value in memory at that slot's element i, or what an earlier record of this program stored there; or an earlier
// record's result), computes one element with the same scalar functor eager's kernel uses (math/), and, where
// `out_slot >= 0`, stores it at that slot's element i. Every access to a slot that the program writes has that
// slot's geometry (the pass refuses groups where a written buffer is read through another view), so a store never
// changes what another element reads: the program equals eager's op-by-op evaluation, bit for bit.
//
// A row program (`row_reduction`): `shape` is [rows..., C] and the iteration is per row. Its records are vector records
// (one value per element of the row, as above) and row records (`row`: one value per row, the shape [rows..., 1] or
// [rows...]): a row reduction (RowSum, RowMax, ... over the row's C values of a vector operand, in eager's order) or an
// elementwise op on row values. A vector record reading a row value reads it broadcast along the row. Records are
// numbered into passes (`pass`): a pass is the row records that open it, then one loop over the row's elements running
// its vector records; a reduction ends its pass (RowSum folds inside the loop, RowMax and the others read the row after
// it), and a row record that follows vector records of a pass opens the next one. Per row, the passes run in order, so
// every record still sees what it saw in eager's order: a slot stored by an earlier pass is read from memory (its pass
// stored the row), and an intermediate the program does not store (an earlier record's result) from a row buffer
// (`row_buffer`: the row's values of that record, kept while the row runs).
//
// A full-reduction program (`full_reduction`, a loss tail: `((x - y) ** 2).mean()`): vector records over `shape`
// (whose coalesced iteration is one dim), then one FullSum of a vector operand over every element, then records on
// the single value that follows (`row`: the mean's divide, a scale). The sum keeps eager's order for a reduction to
// one element of a contiguous input (backend/cpu/reduce.cpp's sum_kernel): chunks of kFullReduceChunk elements in
// order, each summed with eight_lane_sum, the chunks' partial sums added in chunk order into a zero.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dygrad/core/dtype.h"
#include "dygrad/core/shape.h"
#include "dygrad/runtime/attrs.h"

namespace dg {

enum class FusedOpCode : uint8_t {
  Add,  // a + k * b (torch.add's alpha, k == 1: a + b)
  Mul,
  Div,
  AddScalar,   // a + k
  MulScalar,   // a * k
  DivScalar,   // a / k
  RsubScalar,  // k - a
  RdivScalar,  // k / a
  Neg,
  Sqrt,
  Rsqrt,
  Reciprocal,
  Abs,
  Relu,
  Sigmoid,
  Silu,
  Tanh,
  PowScalar,  // a ** k (eager's special cases: k in 0, 1, 2, 3, -1, -2, 0.5, -0.5)
  Maximum,
  Minimum,
  SigmoidBackward,  // (grad, y)
  TanhBackward,     // (grad, y)
  SiluBackward,     // (grad, x)
  ReluBackward,     // (grad, y)
  Copy,             // a (a same-dtype copy_ / clone)
  Exp,              // math::exp: eager's guarded kernel gives its bits for every x (the fast path is bitwise it
  Log,              // in range, the rest is recomputed with it); math::log likewise
  Expm1,
  Log1p,
  Gelu,             // k == 0: x * Phi(x) (math::gelu_erf); k == 1: the tanh approximation (math::gelu_tanh)
  GeluBackward,     // (grad, x), k as Gelu's (math::gelu_erf_backward, math::gelu_tanh_backward)
  Sign,             // (0 < a) - (a < 0): 0 for +-0 and NaN, as eager's sign
  LerpScalar,       // math::lerp(a, b, k): eager's lerp with a scalar weight (torch's two formulas)
  MaskedFill,       // (a, mask): mask ? k : a, eager's masked_fill (a boolean slot read as 0 or 1; float32/float64)
  // Boolean results are 0 or 1 in the compute type (NaN compares false but for ne), stored into a boolean slot as
  // the byte eager stores for a bool; a boolean operand is such a value or a boolean slot read as 0 or 1.
  Eq, Ne, Lt, Le, Gt, Ge,  // (a, b): a <op> b, eager's comparison of the two values
  EqScalar, NeScalar, LtScalar, LeScalar, GtScalar, GeScalar,  // a <op> k
  LogicalNot,       // a == 0: logical_not of a value or a boolean (NaN is true, so false), and ~ on a boolean
  LogicalAnd,       // (a, b) booleans: logical_and, and & on booleans
  LogicalOr,        // (a, b) booleans: logical_or, and | on booleans
  LogicalXor,       // (a, b) booleans: ^ on booleans
  Where,            // (cond, a, b): cond ? a : b, the chosen value's bits (float32/float64 programs only)
  WhereScalar,      // (cond, a): cond ? a : k
  WhereScalarTrue,  // (cond, a): cond ? k : a (where(cond, number, tensor))
  ClampScalar,      // clamp with number bounds: math::clamp_above(math::clamp_below(a, k), k2) (k = -inf: no min,
                    // k2 = +inf: no max; either is then the identity, bit for bit)
  ClampTensor,      // (a, lo, hi): math::clamp_above_propagating(math::clamp_below_propagating(a, lo), hi)
  ClampMinTensor,   // (a, lo): math::clamp_below_propagating(a, lo)
  ClampMaxTensor,   // (a, hi): math::clamp_above_propagating(a, hi)
  Sin,              // float32: math::sin_bounded where math::sin_cos_in_range, libm's sinf elsewhere (eager's guarded
  Cos,              // kernel, backend/cpu/unary.cpp); float64: std::sin. Cos likewise.
  RowSum,           // a row record: the sum of a vector operand over the row, eager's `sum` over a contiguous last
                    // dim in its order (backend/cpu/accumulate.h, eight_lane_sum, folded while the pass's loop runs)
  RowMax,           // a row record: the maximum over the row, eager's `amax` over a contiguous last dim in its
                    // order (accumulate.h, lane_extremum, over the row in memory or in its row buffer after the loop)
  // The other row reductions also read the whole row after the pass's loop (in memory or in its row buffer), each
  // with the function of backend/cpu/row_reductions.h that mirrors eager's row path:
  RowMin,           // `amin` (lane_extremum)
  RowMaxValue,      // `max(dim=-1).values` (first_extremum_value: the first element equal to the maximum); the
  RowMinValue,      // indices output, which nothing reads, is not computed
  RowVar,           // `var` (row_variance: float64 accumulation), k: the correction
  RowStd,           // `std`, k: the correction
  RowLogsumexp,     // `logsumexp` (row_logsumexp)
  FullSum,          // a full-reduction program's sum over every element (above): the only reduction of its program
};
// A reduction record (a row program's, or a full-reduction program's FullSum).
inline bool is_row_reduction(FusedOpCode op) { return op >= FusedOpCode::RowSum; }
// A row reduction that reads the whole row after its pass's loop (every one but RowSum, folded inside the loop).
inline bool reads_whole_row(FusedOpCode op) { return op > FusedOpCode::RowSum && op != FusedOpCode::FullSum; }
inline int fused_op_arity(FusedOpCode op) {
  switch (op) {
    case FusedOpCode::Add: case FusedOpCode::Mul: case FusedOpCode::Div: case FusedOpCode::Maximum:
    case FusedOpCode::Minimum: case FusedOpCode::SigmoidBackward: case FusedOpCode::TanhBackward:
    case FusedOpCode::SiluBackward: case FusedOpCode::ReluBackward: case FusedOpCode::LerpScalar:
    case FusedOpCode::GeluBackward:
    case FusedOpCode::MaskedFill: case FusedOpCode::Eq: case FusedOpCode::Ne: case FusedOpCode::Lt:
    case FusedOpCode::Le: case FusedOpCode::Gt: case FusedOpCode::Ge: case FusedOpCode::LogicalAnd:
    case FusedOpCode::LogicalOr: case FusedOpCode::LogicalXor: case FusedOpCode::WhereScalar:
    case FusedOpCode::WhereScalarTrue: case FusedOpCode::ClampMinTensor: case FusedOpCode::ClampMaxTensor:
      return 2;
    case FusedOpCode::Where: case FusedOpCode::ClampTensor:
      return 3;
    default:
      return 1;
  }
}

constexpr int kMaxFusedArity = 3;

// One operand of a record: a slot (memory) or an earlier record's result.
struct FusedOperand {
  int32_t slot = -1;    // >= 0: the slot's element (or what an earlier record stored there)
  int32_t record = -1;  // >= 0: that record's result
};

struct FusedRecord {
  FusedOpCode op = FusedOpCode::Copy;
  FusedOperand in[kMaxFusedArity];
  double k = 0;           // the scalar in the compute type's value (float32 programs: a float's value)
  double k2 = 0;          // a second scalar (ClampScalar's max)
  int32_t out_slot = -1;  // >= 0: stored there; -1: kept in registers only (an intermediate fusion eliminated)
  bool row = false;       // a row record (row programs): one value per row; else one per element
  int32_t pass = 0;       // row programs: the pass over the row that runs it (see above)
  int32_t row_buffer = -1;  // >= 0: a vector record not stored whose row a later pass (or a RowMax ...) reads
  // Eager's op wrote bfloat16: its float result is rounded to bfloat16 (what eager stored and the next op read).
  bool round_bf16 = false;
  std::string source;     // "mul_scalar (model.py:12)": what eager ran, for source(), graph() and the profiler
};

struct FusedProgram {
  std::string name;  // "mul_scalar+add+rsqrt"
  // The compute type: float64 (every operand float64), or float32 (operands float32 or bfloat16: a bfloat16 value
  // is read as its float, and each record whose eager op wrote bfloat16 rounds to it: `round_bf16`).
  DType dtype = DType::Float32;
  // Per slot: its dtype in memory: `dtype`, bfloat16 in a float32 program, or bool (read as 0 or 1; a boolean
  // result stored as eager's bool byte).
  std::vector<DType> slot_dtype;
  Dims shape;                    // the iteration shape: every record's output shape
  std::vector<FusedRecord> records;
  // Per slot: its index among the fused sub-op's inputs (read before any record of this program stores it) and
  // among its outputs (stored), or -1.
  std::vector<int32_t> slot_input, slot_output;
  // The coalesced iteration the generated code is specialised for: sizes (outermost first) and each slot's strides
  // in elements over them (0: broadcast).
  Dims dims;
  std::vector<Dims> strides;
  // A row program (see above): its rows are the dims of `dims` but the innermost (never merged with the others), the
  // innermost is the row; `passes` passes per row, `row_buffers` rows of values kept while a row runs.
  bool row_reduction = false;
  // A full-reduction program (see above): `dims` is one dim; the generated function computes the partial sums of
  // chunks [begin, end) into p[num_slots()] (one per chunk, the compute type); the kernel adds them in order and
  // runs the records on the total.
  bool full_reduction = false;
  int32_t passes = 1;
  int32_t row_buffers = 0;
  // Per slot of a one-pass elementwise program: the slot whose pointer addresses it (itself, or an earlier slot of the
  // same buffer, dtype and iteration strides) and its element distance from that slot's element 0. The generated
  // code reaches such a slot through the other's pointer, so the compiler sees one interleaved group where a program
  // reads x[..., 0::2] and x[..., 1::2] or writes the two halves of a `stack` (the composed rotary embedding: its loop
  // vectorised only so); the kernel checks the distances at each launch and runs the interpreter where one does not
  // hold. Empty: no slot is addressed through another.
  std::vector<int32_t> slot_base;
  std::vector<int64_t> slot_delta;
  int32_t index = 0;  // its function in the graph's translation unit: dg_fused_<index>
  // The generated function, once loaded: elements [begin, end) of the coalesced iteration when it is one dim, rows
  // [begin, end) of its innermost dim otherwise; p[slot] is the slot's element 0.
  using Fn = void (*)(char* const* p, int64_t begin, int64_t end);
  std::atomic<Fn> compiled{nullptr};
  // Which runs once the function is loaded (docs/jit-fusion.md, "Generated or interpreted: measured"): the first
  // 2 * kChoiceRuns launches alternate the generated function and the interpreter, each timed; from then on the one
  // with the better best time runs (the interpreter only when at least 5% faster). Both give eager's bits.
  enum class Choice : int8_t { Measuring, Generated, Interpreted };
  static constexpr int32_t kChoiceRuns = 3;
  mutable std::atomic<Choice> choice{Choice::Generated};
  mutable std::atomic<int32_t> trials{0};
  mutable std::atomic<int64_t> best_ns[2] = {INT64_MAX, INT64_MAX};  // the generated function's, the interpreter's
  size_t num_slots() const { return slot_input.size(); }
};

// A poisoned input of a fused sub-op (docs/jit.md, the poisoned-input rule per sub-op): which records eager would
// have skipped; the kernel stores what the others compute (an interpreter run).
struct FusedSkip {
  std::vector<uint8_t> record;
};

struct FusedAttrs {
  static constexpr const char* kName = "FusedAttrs";
  std::shared_ptr<FusedProgram> program;
  std::shared_ptr<FusedSkip> skip;  // set only while a sub-op with a poisoned input runs
  DG_ATTRS_FIELDS(program, skip);
};

}  // namespace dg
