// Device backends built as plugins (docs/cuda.md, "The build"): the CUDA backend is libdygrad_cuda.so beside the
// library, loaded at start-up as the CPU kernel plugins are (runtime/cpu_isa.h), so the library never links the CUDA
// runtime. A plugin that is absent, or fails to load, leaves its device unavailable without an error.
#pragma once
#include <string>

namespace dg {

// "loaded", "not built" (this build has no CUDA plugin), "absent (path)" (built but not beside the library), or why
// it could not be loaded (dlerror's message).
std::string cuda_plugin_status();

}  // namespace dg
