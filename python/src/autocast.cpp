// The autocast state, its cast cache and the Python functions that drive them (python/dygrad/amp.py):
// _autocast_set(enabled, dtype, cache_enabled), _autocast_state(), _autocast_increment_nesting(),
// _autocast_decrement_nesting(), clear_autocast_cache(), _autocast_cast(t, policy) (for Python compositions
// that torch autocasts at an aten op dygrad composes in Python). See autocast.h.
#include "autocast.h"

#include <unordered_map>

#include "common.h"

namespace dg::py::autocast {

thread_local State state;

namespace {
bool eligible(const Tensor& t) {
  if (!t.defined()) return false;
  const DType d = t.dtype();
  return d == DType::Float32 || d == DType::Float16 || d == DType::BFloat16;
}

// A parameter's cast, keyed by its TensorImpl and the grad mode of the call (a cast made under no_grad has no
// graph and must not serve a call that records one). The source is held so its address is not reused while the
// entry lives; its version is checked so an in-place update inside the region (an optimizer step) recasts.
struct CacheEntry {
  Tensor source;
  Tensor cast;
  uint32_t version;
};
struct CacheKey {
  const void* impl;
  bool grad;
  bool operator==(const CacheKey&) const = default;
};
struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const { return std::hash<const void*>()(k.impl) ^ (k.grad ? 1 : 0); }
};
thread_local std::unordered_map<CacheKey, CacheEntry, CacheKeyHash> cache;
struct LastCast {
  Tensor source, cast;
  uint32_t version = 0;
  bool grad = false;
};
thread_local LastCast last_cast;
}  // namespace

Tensor lower(const Tensor& t) {
  if (!eligible(t) || t.dtype() == state.dtype) return t;
  const bool cacheable = state.cache_enabled && t.dtype() == DType::Float32 && t.requires_grad() && t.is_leaf() &&
                         !t.is_view();
  if (!cacheable) {
    // Any other operand: the last such cast is kept, so an activation feeding two lower-precision ops in a row
    // (the MLP's w1(h) and w3(h)) is cast once, not twice (torch casts it for each op). One entry only: it keeps
    // at most one source alive past its last use.
    LastCast& last = last_cast;
    if (last.source.defined() && last.source.impl() == t.impl() && last.version == t.version() &&
        last.grad == grad_enabled() && last.cast.dtype() == state.dtype)
      return last.cast;
    Tensor cast = to(t, state.dtype);
    if (state.cache_enabled) last = LastCast{t, cast, t.version(), grad_enabled()};
    return cast;
  }
  const CacheKey key{t.impl(), grad_enabled()};
  auto it = cache.find(key);
  if (it != cache.end() && it->second.version == t.version() && it->second.cast.dtype() == state.dtype)
    return it->second.cast;
  Tensor cast = to(t, state.dtype);
  // A parameter's copy for the region, not an activation: the allocator's breakdown counts it with the
  // parameters (docs/memory.md categories; docs/mixed-precision.md).
  if (cast.impl() != t.impl()) cast.storage().set_category(MemoryCategory::Parameter);
  cache[key] = CacheEntry{t, cast, t.version()};
  return cast;
}

Tensor fp32(const Tensor& t) {
  if (!eligible(t) || t.dtype() == DType::Float32) return t;
  return to(t, DType::Float32);
}

std::vector<Tensor> promote(std::span<const Tensor> tensors) {
  DType widest = state.dtype;
  for (const Tensor& t : tensors)
    if (eligible(t)) widest = promote_types(widest, t.dtype());
  std::vector<Tensor> out(tensors.begin(), tensors.end());
  for (Tensor& t : out)
    if (eligible(t) && t.dtype() != widest) t = to(t, widest);
  return out;
}

void clear_cache() {
  cache.clear();
  last_cast = LastCast{};
}
size_t cache_size() { return cache.size(); }

}  // namespace dg::py::autocast

namespace dg::py {

void init_autocast(nb::module_& m) {
  using namespace autocast;
  m.def("_autocast_set", [](bool enabled, nb::handle dtype, bool cache_enabled) {
    DType d = state.dtype;
    if (!dtype.is_none() && !to_dtype("autocast", dtype.ptr(), d)) throw nb::python_error();
    state.enabled = enabled;
    state.dtype = d;
    state.cache_enabled = cache_enabled;
  });
  m.def("_autocast_state", [] {
    return nb::make_tuple(state.enabled, nb::handle(dtype_object(state.dtype)), state.cache_enabled);
  });
  m.def("_autocast_increment_nesting", [] { return ++state.nesting; });
  m.def("_autocast_decrement_nesting", [] {
    if (state.nesting > 0 && --state.nesting == 0) clear_cache();
    return state.nesting;
  });
  m.def("clear_autocast_cache", [] { clear_cache(); });
  m.def("_autocast_cache_size", [] { return cache_size(); });
  m.def("_autocast_cast", [](const Tensor& t, const std::string& policy) -> Tensor {
    if (!state.enabled) return t;
    if (policy == "lower") return lower(t);
    if (policy == "fp32") return fp32(t);
    throw nb::value_error("_autocast_cast: policy must be 'lower' or 'fp32'");
  });
}

}  // namespace dg::py
