// The asynchronous test device (docs/devices.md, "The test device"): a second device type built into every
// configuration and off by default, so the runtime's multi-device paths (streams and events per device, memory that
// the host must not touch, copies, errors that surface at a sync) run in CI on machines without a GPU.
// - Memory: each test device has its own caching allocator over its own host arena (separate mappings, filled with
//   0xFF bytes - NaN for floats - when mapped, and a cached block again when it is handed out while no queued Task
//   uses it, so a kernel that reads memory it never wrote shows it). The host touching it outside a kernel raises
//   (Storage::data()).
// - Kernels: the CPU's, run on the device's launcher thread (its stream's worker): a launch returns at once,
//   completion is the stream's events. A kernel's data error is kept as the device's error and raised at the next
//   sync point with the op and the Python line; the device stays usable.
// - Pinned host memory (Tensor.pin_memory(), the staging of copies from pageable memory): the backend provides the
//   pinned pool, host mappings of its own poisoned when mapped, so a copy that reads staging before it was filled
//   shows it.
#pragma once

namespace dg::testdev {

// Makes test devices 0..count-1 (at most kMaxTestDevices; once made they stay for the process; the Python module
// calls it at import when DYGRAD_TEST_DEVICES=<count> is set). Returns the number available.
int enable(int count = 1);
int device_count();

}  // namespace dg::testdev
