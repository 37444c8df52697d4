// Per-op statistics over a session (torch.profiler's key_averages): counts, device and host time, flops,
// achieved GFLOP/s and bandwidth, share of device time; as a text table or CSV.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "dygrad/profiler/events.h"

namespace dg::profiler {

struct OpStat {
  std::string name;          // the op
  std::string input_shapes;  // "[[2, 3], [3]]" when grouped by input shape, else empty
  int64_t count = 0;         // Tasks enqueued (or run, for Tasks enqueued before the session)
  int64_t ran = 0;           // of which ran on the device
  int64_t device_total_ns = 0;
  int64_t device_min_ns = 0;
  int64_t device_max_ns = 0;
  int64_t host_total_ns = 0;  // host spans (op entry to enqueue)
  double flops = 0;           // over the Tasks that ran
  double bytes = 0;
  double device_percent = 0;  // of all ops' device time

  double device_mean_ns() const { return ran ? double(device_total_ns) / double(ran) : 0; }
  double host_mean_ns() const { return count ? double(host_total_ns) / double(count) : 0; }
  double gflops_per_second() const { return device_total_ns > 0 ? flops / double(device_total_ns) : 0; }
  double gbytes_per_second() const { return device_total_ns > 0 ? bytes / double(device_total_ns) : 0; }
};

enum class OpStatsOrder { DeviceTotal, HostTotal, Count, Flops, Name };

// One row per op name (per name and input shapes when group_by_input_shape and shapes were recorded),
// sorted by device time, largest first.
std::vector<OpStat> op_stats(const ProfileData& data, bool group_by_input_shape = false);
// Re-sorts rows: largest first (by name: alphabetical).
void sort_op_stats(std::vector<OpStat>& stats, OpStatsOrder order);
// A fixed-width table, at most row_limit rows (0: all), with a totals line.
std::string op_stats_table(const std::vector<OpStat>& stats, size_t row_limit = 0);
// name,input_shapes,count,ran,device_total_ns,...: one header line and one line per row.
std::string op_stats_csv(const std::vector<OpStat>& stats);

}  // namespace dg::profiler
