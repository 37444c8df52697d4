// Text helpers for the profiler's exporters (see format.h).
#include "dygrad/profiler/format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "dygrad/core/error.h"

namespace dg::profiler {

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string ns_to_us(int64_t ns) {
  const bool negative = ns < 0;
  const uint64_t magnitude = negative ? uint64_t(0) - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", negative ? "-" : "", static_cast<unsigned long long>(magnitude / 1000),
                static_cast<unsigned long long>(magnitude % 1000));
  return buf;
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "0";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, result.ptr);
}

std::string shapes_to_string(const std::vector<Dims>& shapes) {
  std::string out = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += ", ";
    out += '[';
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      if (d) out += ", ";
      out += std::to_string(shapes[i][d]);
    }
    out += ']';
  }
  return out + "]";
}

void write_text_file(const std::string& path, std::string_view text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  DG_CHECK(file.good(), Runtime, "[profiler] cannot open '", path, "' for writing");
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  file.close();
  DG_CHECK(!file.fail(), Runtime, "[profiler] could not write '", path, "'");
}

}  // namespace dg::profiler
