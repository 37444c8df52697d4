// F.pad (constant, reflect, replicate, circular) and F.one_hot, composed of existing ops as torch composes
// them in C++: constant padding is a cat with filled blocks (a negative pad narrows), the other modes an
// index_select per padded dim with indices computed on the host; gradients come from cat / index_select.
#include "dygrad/runtime/op_sink.h"
#include "dygrad/ops/nn.h"

#include "dygrad/ops/device.h"
#include "dygrad/ops/dispatch.h"
#include "dygrad/ops/elementwise.h"
#include "dygrad/ops/factory.h"
#include "dygrad/ops/index.h"
#include "dygrad/ops/math.h"
#include "dygrad/ops/reduce.h"
#include "dygrad/ops/shape.h"
#include "dygrad/core/small_vector.h"

namespace dg {

namespace {
// pad = (left of the last dim, right of the last dim, left of the one before, ...), as torch.
void check_pad_length(const Tensor& input, IntSpan pad) {
  DG_CHECK(pad.size() % 2 == 0, Runtime, "[pad] Padding length must be divisible by 2");
  DG_CHECK(static_cast<int64_t>(pad.size()) / 2 <= input.dim(), Runtime, "[pad] Padding length should be less than "
           "or equal to two times the input dimension but got padding length ", pad.size(), " and input of dimension ",
           input.dim());
}

Tensor constant_pad(const Tensor& input, IntSpan pad, Scalar value) {
  Tensor out = input;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t dim = input.dim() - 1 - static_cast<int64_t>(i), left = pad[2 * i], right = pad[2 * i + 1];
    const int64_t size = out.shape()[dim];
    DG_CHECK(size + left + right >= 0, Runtime, "[pad] The input size ", size, ", plus negative padding ", left,
             " and ", right, " resulted in a negative output size, which is invalid. Check dimension ", dim,
             " of your input.");
    if (left < 0) out = narrow(out, dim, -left, out.shape()[dim] + left);
    if (right < 0) out = narrow(out, dim, 0, out.shape()[dim] + right);
    if (left <= 0 && right <= 0) continue;
    SmallVector<Tensor, 3> pieces;
    Dims block(out.shape().begin(), out.shape().end());
    if (left > 0) {
      block[static_cast<size_t>(dim)] = left;
      pieces.push_back(full(block, value, {.dtype = input.dtype(), .device = input.device()}));
    }
    pieces.push_back(out);
    if (right > 0) {
      block[static_cast<size_t>(dim)] = right;
      pieces.push_back(full(block, value, {.dtype = input.dtype(), .device = input.device()}));
    }
    out = cat(std::span<const Tensor>(pieces.data(), pieces.size()), dim);
  }
  return out.same(input) ? clone(input) : contiguous(out);  // a new tensor, as torch, also for zero pads
}

int64_t reflect_index(int64_t j, int64_t size) {  // size > 1 and -size < j < 2 size - 1
  if (j < 0) return -j;
  if (j >= size) return 2 * (size - 1) - j;
  return j;
}

// reflect / replicate / circular over the last pad.size() / 2 dims of a 2-D to 5-D input (torch's rule).
Tensor index_pad(const Tensor& input, IntSpan pad, std::string_view mode) {
  const int64_t padded = static_cast<int64_t>(pad.size()) / 2;
  DG_CHECK(padded >= 1 && padded <= 3 && (input.dim() == padded + 1 || input.dim() == padded + 2), NotImplemented,
           "[pad] Padding size ", pad.size(), " is not supported for ", input.dim(), "D input tensor.\nSupported "
           "combinations for non-constant padding:\n  - 2D or 3D input: padding size = 2 (pads last dimension)\n  - 3D "
           "or 4D input: padding size = 4 (pads last 2 dimensions)\n  - 4D or 5D input: padding size = 6 (pads last 3 "
           "dimensions)");
  Tensor out = input;
  for (int64_t i = 0; i < padded; ++i) {
    const int64_t dim = input.dim() - 1 - i;
    int64_t left = pad[static_cast<size_t>(2 * i)], right = pad[static_cast<size_t>(2 * i + 1)];
    int64_t size = out.shape()[dim];
    DG_CHECK(size + left + right >= 0, Runtime, "[pad] The input size ", size, ", plus negative padding ", left,
             " and ", right, " resulted in a negative output size, which is invalid. Check dimension ", dim,
             " of your input.");
    if (mode == "reflect") {
      DG_CHECK(left < size && right < size, Runtime, "[pad] Argument #4: Padding size should be less than the "
               "corresponding input dimension, but got: padding (", left, ", ", right, ") at dimension ", dim,
               " of input ", input.shape());
    } else if (mode == "circular") {
      DG_CHECK(left <= size && right <= size, Runtime, "[pad] Padding value causes wrapping around more than once.");
      // torch crops first, then wraps around what is left
      if (left < 0) out = narrow(out, dim, -left, out.shape()[dim] + left), left = 0;
      if (right < 0) out = narrow(out, dim, 0, out.shape()[dim] + right), right = 0;
      size = out.shape()[dim];
    } else {
      DG_CHECK(size > 0 || (left <= 0 && right <= 0), Runtime, "[pad] replicate padding of an empty dimension ", dim,
               " of input ", input.shape());
    }
    if (left == 0 && right == 0) continue;
    std::vector<int64_t> indices;
    indices.reserve(static_cast<size_t>(size + left + right));
    for (int64_t j = -left; j < size + right; ++j) {
      if (mode == "reflect") indices.push_back(reflect_index(j, size));
      else if (mode == "circular") indices.push_back(((j % size) + size) % size);
      else indices.push_back(j < 0 ? 0 : (j >= size ? size - 1 : j));
    }
    const int64_t count = static_cast<int64_t>(indices.size());
    out = index_select(out, dim, to_device(from_vector(indices, IntSpan(&count, 1)), input.device()));
  }
  return out.same(input) ? clone(input) : out;
}
}  // namespace

Tensor pad(const Tensor& input, IntSpan pad, std::string_view mode, std::optional<double> value) {
  check_defined("pad", input);
  check_pad_length(input, pad);
  if (mode == "constant") {
    if (!value) return constant_pad(input, pad, Scalar(int64_t(0)));
    return constant_pad(input, pad, is_floating(input.dtype()) ? Scalar(*value) : Scalar(static_cast<int64_t>(*value)));
  }
  DG_CHECK(mode == "reflect" || mode == "replicate" || mode == "circular", NotImplemented,
           "[pad] Unrecognised padding mode ", mode);
  DG_CHECK(!value || *value == 0.0, Runtime, "[pad] Padding mode \"", mode, "\" doesn't take in value argument");
  return index_pad(input, pad, mode);
}

// out[..., c] = (tensor[...] == c), int64; num_classes = -1 infers max + 1 (a sync, as torch, which also reads
// the minimum and maximum to check the values on the CPU).
Tensor one_hot(const Tensor& tensor, int64_t num_classes) {
  check_defined("one_hot", tensor);
  DG_CHECK(tensor.dtype() == DType::Int64, Runtime, "[one_hot] one_hot is only applicable to index tensor of type "
           "LongTensor (int64), got ", dtype_name(tensor.dtype()));
  DG_CHECK(num_classes >= -1, Runtime, "[one_hot] num_classes should be -1 or non-negative, got ", num_classes);
  if (tensor.numel() == 0) {
    DG_CHECK(num_classes > 0, Runtime, "[one_hot] Can not infer total number of classes from empty tensor.");
  } else {
    HostReadScope read("one_hot");  // without num_classes too: the class values are checked on the host
    DG_CHECK(min(tensor).item<int64_t>() >= 0, Runtime, "[one_hot] Class values must be non-negative.");
    const int64_t largest = max(tensor).item<int64_t>();
    if (num_classes == -1) num_classes = largest + 1;
    DG_CHECK(largest < num_classes, Runtime, "[one_hot] Class values must be smaller than num_classes.");
  }
  const Tensor classes = arange(Scalar(int64_t(0)), Scalar(num_classes), 1, std::nullopt, tensor.device());
  return to(eq(unsqueeze(tensor, -1), classes), DType::Int64);
}

}  // namespace dg
