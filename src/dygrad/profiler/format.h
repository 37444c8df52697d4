// Text helpers the profiler's exporters share: JSON string escaping, fixed-point numbers, shape lists,
// and writing a file.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dygrad/core/small_vector.h"

namespace dg::profiler {

// The JSON string literal for `text`, quotes included.
std::string json_quote(std::string_view text);
// ns as microseconds with three decimals ("1234.567"), exact for integers.
std::string ns_to_us(int64_t ns);
// A finite double for JSON (NaN and infinities become 0), shortest round-trip form.
std::string json_number(double value);
// "[[2, 3], [3]]"
std::string shapes_to_string(const std::vector<Dims>& shapes);
// Writes `text` to `path`; raises RuntimeError naming the path when it cannot.
void write_text_file(const std::string& path, std::string_view text);

}  // namespace dg::profiler
