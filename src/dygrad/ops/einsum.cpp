// torch.einsum as a composition of views, sum and bmm (as torch's own, aten/native/Linear.cpp): every operand is
// permuted and unsqueezed to one common label order, then operands are contracted left to right, each pair
// through one bmm, summing a label as soon as no later operand and not the output needs it. Gradients come
// from the composition.
//
// Notation: a label is one subscript letter, or one of the E dims the ellipsis covers (E = the largest ellipsis
// rank over the operands, right-aligned and broadcast); L = the number of labels. An "aligned" operand has
// rank L, size 1 at the labels it lacks.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/linalg.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"

namespace dg {

namespace {
constexpr int kLetters = 52;  // A-Z then a-z
int letter_index(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : c - 'a' + 26; }
bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
char letter_of(int l) { return static_cast<char>(l < 26 ? 'A' + l : 'a' + l - 26); }

// One term of the equation: its letters in order and where the ellipsis stands (-1: none).
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

// Parses a term starting at `position` of the equation (for error messages).
Term parse_term(const std::string& text, size_t position, bool output) {
  Term term;
  for (size_t k = 0; k < text.size(); ++k) {
    const char c = text[k];
    if (c == '.') {
      DG_CHECK(term.ellipsis_at < 0 && text.compare(k, 3, "...") == 0, Runtime,
               "[einsum] found '.' for ", output ? "the output" : "an operand", " at index ", position + k,
               " of the equation that is not part of a single ellipsis ('...')");
      term.ellipsis_at = static_cast<int>(term.letters.size());
      k += 2;
      continue;
    }
    DG_CHECK(is_letter(c), Runtime, "[einsum] invalid subscript given at index ", position + k,
             " in the equation string, subscripts must be in [a-zA-Z]");
    term.letters.push_back(letter_index(c));
  }
  return term;
}

// permute / reshape that return t itself when they would not change it (most einsum calls permute little: each
// skipped view is a TensorImpl less on the host).
Tensor permuted(const Tensor& t, IntSpan order) {
  for (size_t d = 0; d < order.size(); ++d)
    if (order[d] != static_cast<int64_t>(d)) return permute(t, order);
  return t;
}
Tensor reshaped(const Tensor& t, IntSpan shape) { return same_shape(t.shape(), shape) ? t : reshape(t, shape); }

// left and right aligned (rank L); sums the dims in `sum_dims` (kept as size 1): one bmm over
// [batch, left-only, contracted] @ [batch, contracted, right-only]. A dim of size 1 in one operand broadcasts.
Tensor sumproduct_pair(Tensor left, Tensor right, const std::vector<bool>& summed) {
  const int64_t L = left.dim();
  std::vector<int64_t> batch, left_only, right_only, contracted;
  int64_t batch_size = 1, left_size = 1, right_size = 1, contracted_size = 1;
  for (int64_t d = 0; d < L; ++d) {
    const bool in_left = left.size(d) != 1, in_right = right.size(d) != 1;
    if (summed[static_cast<size_t>(d)]) {
      if (in_left && in_right) {
        DG_CHECK(left.size(d) == right.size(d), Runtime, "[einsum] operands do not broadcast: a summed subscript has "
                 "sizes ", left.size(d), " and ", right.size(d));
        contracted.push_back(d);
        contracted_size *= left.size(d);
      } else {
        // In one operand only: summed there first; then, as a dim of size 1 in both, a trivial contraction.
        const int64_t one[1] = {d};
        if (in_left) left = sum(left, one, true);
        if (in_right) right = sum(right, one, true);
        contracted.push_back(d);
      }
    } else if (in_left && in_right) {
      DG_CHECK(left.size(d) == right.size(d), Runtime, "[einsum] operands do not broadcast: a subscript has sizes ",
               left.size(d), " and ", right.size(d));
      batch.push_back(d);
      batch_size *= left.size(d);
    } else if (in_left) {
      left_only.push_back(d);
      left_size *= left.size(d);
    } else {
      right_only.push_back(d);
      right_size *= right.size(d);
    }
  }
  // left as [batch, left_only, contracted, right_only (size 1)], right as [batch, contracted, right_only,
  // left_only (size 1)].
  Dims left_order, right_order;
  for (auto* group : {&batch, &left_only, &contracted, &right_only})
    for (int64_t d : *group) left_order.push_back(d);
  for (auto* group : {&batch, &contracted, &right_only, &left_only})
    for (int64_t d : *group) right_order.push_back(d);
  const int64_t left_shape[3] = {batch_size, left_size, contracted_size};
  const int64_t right_shape[3] = {batch_size, contracted_size, right_size};
  Tensor product = bmm(reshaped(permuted(left, left_order), left_shape),
                       reshaped(permuted(right, right_order), right_shape));
  // [batch, left_only, right_only] back to rank L in label order (the summed dims as size 1).
  Dims result_shape, result_order(static_cast<size_t>(L), 0);
  Dims sizes_by_dim(static_cast<size_t>(L), 1);
  for (int64_t d : batch) sizes_by_dim[static_cast<size_t>(d)] = left.size(d);
  for (int64_t d : left_only) sizes_by_dim[static_cast<size_t>(d)] = left.size(d);
  for (int64_t d : right_only) sizes_by_dim[static_cast<size_t>(d)] = right.size(d);
  int64_t position = 0;
  for (auto* group : {&batch, &left_only, &right_only, &contracted})
    for (int64_t d : *group) {
      result_shape.push_back(sizes_by_dim[static_cast<size_t>(d)]);
      result_order[static_cast<size_t>(d)] = position++;
    }
  return permuted(reshaped(product, result_shape), result_order);
}
// The equation without its spaces, once the operands are checked: at least one, all defined, one dtype.
std::string checked_equation(std::string_view equation_in, std::span<const Tensor> operands) {
  std::string equation;
  for (char c : equation_in)
    if (c != ' ') equation.push_back(c);
  DG_CHECK(!operands.empty(), Runtime, "[einsum] must provide at least one operand");
  for (size_t k = 0; k < operands.size(); ++k) {
    check_defined("einsum", operands[k], "operand");
    DG_CHECK(operands[k].dtype() == operands[0].dtype(), Runtime, "[einsum] expected all operands to have the same "
             "dtype, got ", dtype_name(operands[0].dtype()), " (operand 0) and ", dtype_name(operands[k].dtype()),
             " (operand ", k, ")");
  }
  return equation;
}

// The operands' terms: the equation left of "->" (`arrow`, npos when implicit), split at the commas, one term
// per operand.
std::vector<Term> parse_operand_terms(const std::string& equation, size_t arrow, size_t num_operands) {
  const std::string lhs = equation.substr(0, arrow);
  std::vector<Term> terms;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    const size_t length = comma == std::string::npos ? std::string::npos : comma - start;
    terms.push_back(parse_term(lhs.substr(start, length), start, false));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  DG_CHECK(terms.size() <= num_operands, Runtime, "[einsum] fewer operands were provided (", num_operands,
           ") than specified in the equation '", equation, "' (", terms.size(), ")");
  DG_CHECK(terms.size() >= num_operands, Runtime, "[einsum] more operands were provided (", num_operands,
           ") than specified in the equation '", equation, "' (", terms.size(), ")");
  return terms;
}

// A letter repeated within one operand takes its diagonal: x * I over the two dims, summed over the second
// (a differentiable composition, as sums and products are; torch takes a strided view), until none repeats.
void take_diagonals(std::vector<Term>& terms, std::vector<Tensor>& ops) {
  for (size_t k = 0; k < terms.size(); ++k) {
    Term& term = terms[k];
    const int64_t written = static_cast<int64_t>(term.letters.size());
    const int64_t covered = term.ellipsis_at < 0 ? 0 : ops[k].dim() - written;
    if (covered < 0 || (term.ellipsis_at < 0 && written != ops[k].dim())) continue;  // reported by collect_labels
    auto dim_of = [&](size_t i) {
      const bool after_ellipsis = term.ellipsis_at >= 0 && static_cast<int>(i) >= term.ellipsis_at;
      return static_cast<int64_t>(i) + (after_ellipsis ? covered : 0);
    };
    for (size_t q = 1; q < term.letters.size(); ++q) {
      size_t p = 0;
      while (p < q && term.letters[p] != term.letters[q]) ++p;
      if (p == q) continue;
      const int64_t dp = dim_of(p), dq = dim_of(q), n = ops[k].size(dp);
      DG_CHECK(ops[k].size(dq) == n, Runtime, "[einsum] subscript ", letter_of(term.letters[q]),
               " is repeated for operand ", k, " but the sizes don't match, ", ops[k].size(dq), " != ", n);
      Dims row(static_cast<size_t>(ops[k].dim()), 1), column(static_cast<size_t>(ops[k].dim()), 1);
      row[static_cast<size_t>(dp)] = n;
      column[static_cast<size_t>(dq)] = n;
      const Tensor index = arange(n, ops[k].device());
      const Tensor identity = to(eq(reshape(index, row), reshape(index, column)), ops[k].dtype());
      const int64_t reduce[1] = {dq};
      ops[k] = sum(mul(ops[k], identity), reduce);
      term.letters.erase(term.letters.begin() + static_cast<std::ptrdiff_t>(q));
      if (term.ellipsis_at > static_cast<int>(q)) --term.ellipsis_at;
      --q;
    }
  }
}

// The labels over all operands, in their aligned order: the E ellipsis dims, then the letters that occur,
// A-Z a-z.
struct Labels {
  int64_t ellipsis_rank = 0;              // E
  std::array<int, kLetters> count{};      // occurrences of each letter over all operands
  std::array<int64_t, kLetters> slot{};   // slot[letter] = its dim in the aligned operands (-1: absent)
  int64_t L = 0;
  // An output label (ellipsis dim e as -1 - e, or a letter) -> its dim in the aligned operands.
  int64_t dim_of(int label) const {
    return label < 0 ? static_cast<int64_t>(-1 - label) : slot[static_cast<size_t>(label)];
  }
};

// Checks each operand's rank against its term (no letter repeats within a term now) and lays out the labels.
Labels collect_labels(const std::vector<Term>& terms, std::span<const Tensor> operands) {
  Labels labels;
  for (size_t k = 0; k < terms.size(); ++k) {
    const Term& term = terms[k];
    const int64_t letters = static_cast<int64_t>(term.letters.size()), ndim = operands[k].dim();
    if (term.ellipsis_at < 0)
      DG_CHECK(letters == ndim, Runtime, "[einsum] the number of subscripts in the equation (", letters, ") does not "
               "match the number of dimensions (", ndim, ") for operand ", k, " and no ellipsis was given");
    else
      DG_CHECK(letters <= ndim, Runtime, "[einsum] the number of subscripts in the equation (", letters, ") is more "
               "than the number of dimensions (", ndim, ") for operand ", k);
    if (term.ellipsis_at >= 0) labels.ellipsis_rank = std::max(labels.ellipsis_rank, ndim - letters);
    for (int l : term.letters) ++labels.count[static_cast<size_t>(l)];
  }
  labels.L = labels.ellipsis_rank;
  for (int l = 0; l < kLetters; ++l)
    labels.slot[static_cast<size_t>(l)] = labels.count[static_cast<size_t>(l)] > 0 ? labels.L++ : -1;
  return labels;
}

// The output labels in output order: ellipsis dims (as label -1 - e) and letters. Explicit (the term right of
// "->") or implicit: the ellipsis dims, then the letters written once in the equation (`written`), A-Z a-z.
std::vector<int> output_labels(const std::string& equation, size_t arrow, const Labels& labels,
                               const std::array<int, kLetters>& written) {
  std::vector<int> output;
  auto push_ellipsis = [&] {
    for (int64_t e = 0; e < labels.ellipsis_rank; ++e) output.push_back(static_cast<int>(-1 - e));
  };
  if (arrow == std::string::npos) {
    push_ellipsis();
    for (int l = 0; l < kLetters; ++l)
      if (written[static_cast<size_t>(l)] == 1) output.push_back(l);
    return output;
  }
  const Term out = parse_term(equation.substr(arrow + 2), arrow + 2, true);
  std::array<bool, kLetters> seen{};
  for (size_t k = 0; k < out.letters.size(); ++k) {
    if (static_cast<int>(k) == out.ellipsis_at) push_ellipsis();
    const int l = out.letters[k];
    DG_CHECK(labels.count[static_cast<size_t>(l)] > 0, Runtime, "[einsum] output subscript ", letter_of(l),
             " does not appear in the equation for any input operand");
    DG_CHECK(!seen[static_cast<size_t>(l)], Runtime, "[einsum] output subscript ", letter_of(l),
             " appears more than once in the output");
    seen[static_cast<size_t>(l)] = true;
    output.push_back(l);
  }
  if (out.ellipsis_at == static_cast<int>(out.letters.size())) push_ellipsis();
  return output;
}

// The operands aligned to rank L, and for each label the last operand that holds it (-1: none).
struct Aligned {
  std::vector<Tensor> operands;
  std::vector<int64_t> last_use;
};

// Permutes each operand's dims into increasing label order, then views it with size 1 at the labels it lacks.
Aligned align_operands(const std::vector<Term>& terms, std::span<const Tensor> operands, const Labels& labels) {
  const int64_t E = labels.ellipsis_rank;
  Aligned aligned;
  aligned.last_use.assign(static_cast<size_t>(labels.L), -1);
  for (size_t k = 0; k < terms.size(); ++k) {
    const Term& term = terms[k];
    const Tensor& x = operands[k];
    const int64_t covered = term.ellipsis_at < 0 ? 0 : x.dim() - static_cast<int64_t>(term.letters.size());
    // x's dim i -> its aligned dim
    Dims target;
    for (size_t i = 0; i < term.letters.size(); ++i) {
      if (static_cast<int>(i) == term.ellipsis_at)
        for (int64_t e = 0; e < covered; ++e) target.push_back(E - covered + e);
      target.push_back(labels.slot[static_cast<size_t>(term.letters[i])]);
    }
    if (term.ellipsis_at == static_cast<int>(term.letters.size()))
      for (int64_t e = 0; e < covered; ++e) target.push_back(E - covered + e);
    Dims order(target.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return target[static_cast<size_t>(a)] < target[static_cast<size_t>(b)]; });
    Dims shape(static_cast<size_t>(labels.L), 1);
    for (size_t i = 0; i < target.size(); ++i) {
      shape[static_cast<size_t>(target[i])] = x.size(static_cast<int64_t>(i));
      if (x.size(static_cast<int64_t>(i)) != 1 || target[i] >= E)
        aligned.last_use[static_cast<size_t>(target[i])] = static_cast<int64_t>(k);
    }
    aligned.operands.push_back(reshaped(permuted(x, order), shape));
  }
  return aligned;
}

// Contracts the aligned operands left to right, summing a label once no later operand holds it and the output
// lacks it, then sums the labels still left (one operand, or only in the first); the result has rank L.
Tensor contract(const Aligned& aligned, const std::vector<bool>& in_output) {
  const int64_t L = static_cast<int64_t>(in_output.size());
  Tensor result = aligned.operands[0];
  for (size_t k = 1; k < aligned.operands.size(); ++k) {
    std::vector<bool> summed(static_cast<size_t>(L), false);
    for (size_t d = 0; d < summed.size(); ++d)
      summed[d] = !in_output[d] && aligned.last_use[d] <= static_cast<int64_t>(k);
    result = sumproduct_pair(result, aligned.operands[k], summed);
  }
  Dims rest;
  for (int64_t d = 0; d < L; ++d)
    if (!in_output[static_cast<size_t>(d)] && result.size(d) != 1) rest.push_back(d);
  if (!rest.empty()) result = sum(result, rest, true);
  return result;
}

// The output from the contracted result: drops the summed (size-1) dims, orders the rest as the output lists
// them.
Tensor arrange_output(const Tensor& result, const std::vector<int>& output, const Labels& labels) {
  Dims out_shape, out_order;
  for (int label : output) out_order.push_back(labels.dim_of(label));
  Dims sorted_dims(out_order);
  std::sort(sorted_dims.begin(), sorted_dims.end());
  for (int64_t d : sorted_dims) out_shape.push_back(result.size(d));
  Tensor squeezed = reshaped(result, out_shape);  // the output labels in aligned order
  Dims permutation;
  for (int64_t d : out_order)
    permutation.push_back(std::lower_bound(sorted_dims.begin(), sorted_dims.end(), d) - sorted_dims.begin());
  return permuted(squeezed, permutation);
}
}  // namespace

Tensor einsum(std::string_view equation_in, std::span<const Tensor> operands) {
  const std::string equation = checked_equation(equation_in, operands);
  const size_t arrow = equation.find("->");
  std::vector<Term> terms = parse_operand_terms(equation, arrow, operands.size());
  std::array<int, kLetters> written{};  // occurrences in the equation as written (the implicit output's rule)
  for (const Term& term : terms)
    for (int l : term.letters) ++written[static_cast<size_t>(l)];
  std::vector<Tensor> ops(operands.begin(), operands.end());
  take_diagonals(terms, ops);
  const Labels labels = collect_labels(terms, ops);
  const std::vector<int> output = output_labels(equation, arrow, labels, written);
  const Aligned aligned = align_operands(terms, ops, labels);
  std::vector<bool> in_output(static_cast<size_t>(labels.L), false);
  for (int label : output) in_output[static_cast<size_t>(labels.dim_of(label))] = true;
  const Tensor result = contract(aligned, in_output);
  const Tensor out = arrange_output(result, output, labels);
  for (const Tensor& x : ops)  // einsum("ij", x): a new view, never the operand itself
    if (out.impl() == x.impl()) return view(out, out.shape());
  return out;
}

}  // namespace dg
