// Per-op statistics (see op_stats.h).
#include "dygrad/profiler/op_stats.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "dygrad/profiler/format.h"

namespace dg::profiler {

std::vector<OpStat> op_stats(const ProfileData& data, bool group_by_input_shape) {
  std::map<std::pair<std::string, std::string>, OpStat> rows;
  int64_t device_total = 0;
  for (const OpRecord& r : data.ops) {
    std::string shapes = group_by_input_shape ? shapes_to_string(r.input_shapes) : std::string();
    OpStat& s = rows[{r.name, shapes}];
    if (s.count == 0) {
      s.name = r.name;
      s.input_shapes = shapes;
    }
    ++s.count;
    if (r.host_thread >= 0) s.host_total_ns += r.host_ns();
    if (!r.ran()) continue;
    const int64_t d = r.device_ns();
    s.device_min_ns = s.ran ? std::min(s.device_min_ns, d) : d;
    s.device_max_ns = s.ran ? std::max(s.device_max_ns, d) : d;
    ++s.ran;
    s.device_total_ns += d;
    s.flops += r.flops;
    s.bytes += r.bytes;
    device_total += d;
  }
  std::vector<OpStat> out;
  for (auto& [key, s] : rows) {
    s.device_percent = device_total > 0 ? 100.0 * double(s.device_total_ns) / double(device_total) : 0;
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) {
    return a.device_total_ns != b.device_total_ns ? a.device_total_ns > b.device_total_ns : a.count > b.count;
  });
  return out;
}

void sort_op_stats(std::vector<OpStat>& stats, OpStatsOrder order) {
  auto key = [order](const OpStat& s) -> double {
    switch (order) {
      case OpStatsOrder::HostTotal: return double(s.host_total_ns);
      case OpStatsOrder::Count: return double(s.count);
      case OpStatsOrder::Flops: return s.flops;
      default: return double(s.device_total_ns);
    }
  };
  if (order == OpStatsOrder::Name) {
    std::stable_sort(stats.begin(), stats.end(), [](const OpStat& a, const OpStat& b) {
      return a.name != b.name ? a.name < b.name : a.input_shapes < b.input_shapes;
    });
  } else {
    std::stable_sort(stats.begin(), stats.end(), [&](const OpStat& a, const OpStat& b) { return key(a) > key(b); });
  }
}

std::string op_stats_table(const std::vector<OpStat>& stats, size_t row_limit) {
  const bool shapes = std::any_of(stats.begin(), stats.end(), [](const OpStat& s) { return !s.input_shapes.empty(); });
  std::string out;
  char line[512];
  const char* header = "%-24s %8s %14s %8s %14s %14s %14s %12s %10s %12s %10s";
  std::snprintf(line, sizeof line, header, "Name", "Calls", "Device total", "Device %", "Device mean", "Host total",
                "Host mean", "GFLOP", "GFLOP/s", "MB", "GB/s");
  out += line;
  if (shapes) out += "  Input shapes";
  out += '\n';
  out += std::string(out.size() - 1, '-') + '\n';
  auto ms = [](double ns) {
    char c[32];
    if (ns >= 1e6) std::snprintf(c, sizeof c, "%.3fms", ns * 1e-6);
    else std::snprintf(c, sizeof c, "%.3fus", ns * 1e-3);
    return std::string(c);
  };
  OpStat total;
  size_t rows = 0;
  for (const OpStat& s : stats) {
    total.count += s.count;
    total.ran += s.ran;
    total.device_total_ns += s.device_total_ns;
    total.host_total_ns += s.host_total_ns;
    total.flops += s.flops;
    total.bytes += s.bytes;
    if (row_limit && rows >= row_limit) continue;
    ++rows;
    std::string name = s.name.size() > 24 ? s.name.substr(0, 21) + "..." : s.name;
    std::snprintf(line, sizeof line, "%-24s %8lld %14s %7.2f%% %14s %14s %14s %12.4f %10.2f %12.3f %10.2f",
                  name.c_str(), static_cast<long long>(s.count), ms(double(s.device_total_ns)).c_str(),
                  s.device_percent, ms(s.device_mean_ns()).c_str(), ms(double(s.host_total_ns)).c_str(),
                  ms(s.host_mean_ns()).c_str(), s.flops * 1e-9, s.gflops_per_second(), s.bytes * 1e-6,
                  s.gbytes_per_second());
    out += line;
    if (shapes) out += "  " + s.input_shapes;
    out += '\n';
  }
  std::snprintf(line, sizeof line, "Total: %lld calls, device %s, host %s, %.4f GFLOP, %.3f MB\n",
                static_cast<long long>(total.count), ms(double(total.device_total_ns)).c_str(),
                ms(double(total.host_total_ns)).c_str(), total.flops * 1e-9, total.bytes * 1e-6);
  return out + line;
}

std::string op_stats_csv(const std::vector<OpStat>& stats) {
  auto field = [](const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string q = "\"";
    for (char c : text) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out =
      "name,input_shapes,count,ran,device_total_ns,device_mean_ns,device_min_ns,device_max_ns,device_percent,"
      "host_total_ns,host_mean_ns,flops,gflops_per_second,bytes,gbytes_per_second\n";
  for (const OpStat& s : stats) {
    out += field(s.name) + "," + field(s.input_shapes) + "," + std::to_string(s.count) + "," + std::to_string(s.ran) +
           "," + std::to_string(s.device_total_ns) + "," + json_number(s.device_mean_ns()) + "," +
           std::to_string(s.device_min_ns) + "," + std::to_string(s.device_max_ns) + "," +
           json_number(s.device_percent) + "," + std::to_string(s.host_total_ns) + "," + json_number(s.host_mean_ns()) +
           "," + json_number(s.flops) + "," + json_number(s.gflops_per_second()) + "," + json_number(s.bytes) + "," +
           json_number(s.gbytes_per_second()) + "\n";
  }
  return out;
}

}  // namespace dg::profiler
