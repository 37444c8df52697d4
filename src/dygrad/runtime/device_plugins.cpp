// Loading the device backend plugins at start-up (runtime/device_plugins.h).
#include "dygrad/runtime/device_plugins.h"

#include <dlfcn.h>
#include <unistd.h>

#include <string>

namespace dg {

namespace {

[[maybe_unused]] std::string library_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cuda_plugin_status), &info) || !info.dli_fname) return ".";
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// The plugin registers its kernels and its device backend (runtime/devices.h) from its static initialisers; whether
// a GPU exists is asked later, when a device is counted or brought up. RTLD_LOCAL: its symbols stay its own.
std::string load_cuda_plugin() {
#if defined(DYGRAD_CUDA_PLUGIN)
  const std::string path = library_directory() + "/" + DYGRAD_CUDA_PLUGIN;
  if (access(path.c_str(), R_OK) != 0) return "absent (" + path + ")";  // built, but not installed beside the library
  if (!dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
    const char* why = dlerror();
    return std::string("could not load ") + path + ": " + (why ? why : "unknown error");
  }
  return "loaded";
#else
  return "not built";
#endif
}

const std::string& status() {
  static const std::string s = load_cuda_plugin();
  return s;
}

// At load time, before any op runs (as runtime/cpu_isa.cpp loads the CPU kernel plugins).
[[maybe_unused]] const bool loaded = (status(), true);

}  // namespace

std::string cuda_plugin_status() { return status(); }

}  // namespace dg
