// Tensor printing in PyTorch's format: tensor([[1., 2.], [3., 4.]], dtype=torch.float64, requires_grad=True).
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "dygrad/runtime/op_sink.h"
#include "dygrad/autograd/node.h"
#include "dygrad/core/tensor.h"
#include "dygrad/core/error.h"
#include "dygrad/ops/complex.h"
#include "dygrad/ops/shape.h"

namespace dg {

namespace {
constexpr int64_t kSummariseAbove = 1000;  // torch's threshold
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating = false, integral_valued = true, scientific = false;
  int precision = 4;
  size_t width = 1;

  std::string format(double v) const {
    char buf[64];
    if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      std::snprintf(buf, sizeof buf, "nan");
    } else if (std::isinf(v)) {
      std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    } else if (scientific) {
      std::snprintf(buf, sizeof buf, "%.*e", precision, v);
    } else if (integral_valued) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.*f", precision, v);
    }
    return buf;
  }
};
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  HostReadScope read("print");
  // A complex tensor prints its real parts with one formatter and its imaginary parts with another, as torch: each
  // element is "re+imj", the real part padded to its column's width, the imaginary part not.
  const bool complex_values = is_complex(dtype());
  std::vector<double> values = complex_values ? real(detach(*this)).to_vector<double>() : to_vector<double>();
  std::vector<double> imaginary = complex_values ? imag(detach(*this)).to_vector<double>() : std::vector<double>();
  const bool is_bool = dtype() == DType::Bool;
  auto make_formatter = [&](const std::vector<double>& column, bool floating) {
    Formatter f;
    f.floating = floating;
    double max_abs = 0, min_abs = INFINITY;
    for (double v : column) {
      if (!std::isfinite(v)) continue;
      if (v != std::floor(v)) f.integral_valued = false;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
    }
    if (f.floating && !column.empty() && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                                          (min_abs != INFINITY && max_abs / min_abs > 1000 && !f.integral_valued)))
      f.scientific = true;
    for (double v : column) f.width = std::max(f.width, is_bool ? (v ? 4 : 5) : f.format(v).size());
    return f;
  };
  const bool floating = is_floating(dtype()) || complex_values;
  // Integers print their exact digits (a double holds 53 bits: int64 and uint64 beyond 2**53 would round).
  std::vector<std::string> digits;
  if (!floating && !is_bool) {
    auto write = [&](const auto& exact) {
      digits.reserve(exact.size());
      for (auto v : exact) digits.push_back(std::to_string(v));
    };
    if (dtype() == DType::UInt64) write(to_vector<uint64_t>());
    else write(to_vector<int64_t>());
  }
  Formatter f = make_formatter(values, floating);
  if (!digits.empty()) {
    f.width = 0;
    for (const std::string& d : digits) f.width = std::max(f.width, d.size());
  }
  const Formatter fi = complex_values ? make_formatter(imaginary, true) : Formatter();
  auto text_of = [&](size_t i) {
    if (is_bool) return std::string(values[i] ? "True" : "False");
    return digits.empty() ? f.format(values[i]) : digits[i];
  };

  const bool summarise = numel() > kSummariseAbove;
  std::ostringstream os;
  os << "tensor(";
  const std::string indent = "       ";
  Dims sizes(shape());
  Dims strides = contiguous_strides(sizes);
  // Recursive printer over the row-major values.
  auto print = [&](auto& self, size_t d, int64_t base) -> void {
    if (d == sizes.size()) {
      const std::string s = text_of(static_cast<size_t>(base));
      os << std::string(f.width - s.size(), ' ') << s;
      if (complex_values) {
        const std::string im = fi.format(imaginary[static_cast<size_t>(base)]);
        os << (im[0] == '-' ? "" : "+") << im << "j";
      }
      return;
    }
    os << "[";
    int64_t n = sizes[d];
    for (int64_t i = 0; i < n; ++i) {
      if (summarise && n > 2 * kEdgeItems && i == kEdgeItems) {
        os << "...";
        i = n - kEdgeItems - 1;
        if (d + 1 == sizes.size()) os << ", ";
        else os << ",\n" << indent << std::string(d + 1, ' ');
        continue;
      }
      self(self, d + 1, base + i * strides[d]);
      if (i + 1 < n) {
        if (d + 1 == sizes.size()) os << ", ";
        else os << "," << std::string(sizes.size() - d - 1, '\n') << indent << std::string(d + 1, ' ');
      }
    }
    os << "]";
  };
  if (sizes.empty()) print(print, 0, 0);
  else if (numel() == 0) os << "[]";
  else print(print, 0, 0);
  // complex64 is the default complex dtype, left out as torch does, except in an empty tensor (torch names it there).
  bool default_dtype = dtype() == DType::Float32 || dtype() == DType::Int64 || dtype() == DType::Bool ||
                       (dtype() == DType::Complex64 && numel() != 0);
  // The suffixes in torch's order: a device other than the CPU first, then size, dtype and the autograd one.
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back("device='" + device().str() + "'");
  if (numel() == 0 && sizes.size() > 1) suffixes.push_back("size=" + shape_str(sizes));
  if (!default_dtype) suffixes.push_back(std::string("dtype=torch.") + dtype_name(dtype()));
  if (requires_grad())
    suffixes.push_back(grad_fn() ? "grad_fn=<" + grad_fn()->display_name() + ">" : "requires_grad=True");
  // torch's rule for the suffixes (torch/_tensor_str.py, _add_suffixes, line width 80): one that would take the last
  // line past the width starts a line of its own, under the first element. Its count of the last line (one more
  // than the characters after the last newline, two more without one) is kept as torch has it.
  std::string text = os.str();
  const size_t newline = text.rfind('\n');
  size_t last_line = newline == std::string::npos ? text.size() + 2 : text.size() - newline + 1;
  for (const std::string& suffix : suffixes) {
    if (last_line + suffix.size() + 2 > 80) {
      text += ",\n" + indent + suffix;
      last_line = indent.size() + suffix.size();
    } else {
      text += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return text + ")";
}

}  // namespace dg
