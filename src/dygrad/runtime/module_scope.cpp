// Module scopes (runtime/module_scope.h).
#include "dygrad/runtime/module_scope.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace dg::module_scope {

namespace {
thread_local uint32_t tls_scope = 0;  // 4 bytes of initial-exec TLS
std::atomic<bool> g_tagging{false};
std::mutex g_tags_mutex;
std::unordered_map<const void*, uint32_t> g_tags;
}  // namespace

uint32_t current() { return tls_scope; }
uint32_t set(uint32_t scope) {
  const uint32_t previous = tls_scope;
  tls_scope = scope;
  return previous;
}

void set_tagging(bool on) {
  std::lock_guard<std::mutex> lock(g_tags_mutex);
  g_tags.clear();
  g_tagging.store(on, std::memory_order_relaxed);
}
bool tagging() { return g_tagging.load(std::memory_order_relaxed); }

void tag_node(const void* node) {
  if (!tagging()) return;
  const uint32_t scope = tls_scope & ~kBackward;
  std::lock_guard<std::mutex> lock(g_tags_mutex);
  if (scope) g_tags[node] = scope;
  else g_tags.erase(node);  // an address reused by a node made outside any module
}

NodeScope::NodeScope(const void* node) : engaged_(tagging()) {
  if (!engaged_) return;
  uint32_t tag = 0;
  {
    std::lock_guard<std::mutex> lock(g_tags_mutex);
    if (auto it = g_tags.find(node); it != g_tags.end()) tag = it->second;
  }
  saved_ = set(tag ? tag | kBackward : 0);
}
NodeScope::~NodeScope() {
  if (engaged_) set(saved_);
}

}  // namespace dg::module_scope
