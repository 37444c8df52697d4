// The module scope of the calling thread, for the profiler's per-module costs (docs/profiler.md, "Module
// scopes"): an id the Python layer gives each nn.Module call while a profile(with_modules=True) session records
// (0: none), with kBackward set while the autograd engine runs a node's backward. Autograd tags each node it
// records with the scope its forward op ran in, and runs the node under NodeScope. In runtime/ so that autograd
// and the profiler both reach it; the profiler turns tagging on for its sessions. Off: a relaxed load and a
// branch per node.
#pragma once
#include <cstdint>

namespace dg::module_scope {

constexpr uint32_t kBackward = 0x80000000u;
uint32_t current();
uint32_t set(uint32_t scope);  // returns the previous one

// While on, record_node tags nodes (a map node -> scope) and NodeScope looks them up. Turning it on or off
// clears the tags (an address may hold another node by the next session).
void set_tagging(bool on);
bool tagging();
void tag_node(const void* node);

// The engine, around one node: the node's forward scope with kBackward, or none.
class NodeScope {
 public:
  explicit NodeScope(const void* node);
  ~NodeScope();
  NodeScope(const NodeScope&) = delete;
  NodeScope& operator=(const NodeScope&) = delete;

 private:
  bool engaged_;
  uint32_t saved_ = 0;
};

}  // namespace dg::module_scope
