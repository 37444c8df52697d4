// The op registry and default cost model.
#include "dygrad/ops/op_def.h"

#include <cstring>

namespace dg {

namespace {
std::vector<const OpDef*>& registry() {
  static std::vector<const OpDef*>* ops = new std::vector<const OpDef*>();
  return *ops;
}
thread_local CallSite tls_call_site{};
}  // namespace

OpDef::OpDef(const char* name_, FusionClass fusion_, CpuKernel cpu_, BackwardFn backward_, CostFn cost_,
             uint32_t flags_, ScratchFn scratch_)
    : name(name_), fusion(fusion_), cpu(cpu_), backward(backward_), cost(cost_), flags(flags_),
      scratch(scratch_) {
  registry().push_back(this);
}

const std::vector<const OpDef*>& all_ops() { return registry(); }

const OpDef* find_op(const char* name) {
  for (const OpDef* op : registry())
    if (std::strcmp(op->name, name) == 0) return op;
  return nullptr;
}

CallSite current_call_site() { return tls_call_site; }
CallSiteScope::CallSiteScope(CallSite site) : saved_(tls_call_site) { tls_call_site = site; }
CallSiteScope::~CallSiteScope() { tls_call_site = saved_; }

OpCost Task::cost() const {
  if (op && op->cost) return op->cost(*this);
  OpCost c;
  for (const Tensor& t : inputs) c.bytes += double(t.numel()) * double(t.itemsize());
  for (const Tensor& t : outputs) {
    c.bytes += double(t.numel()) * double(t.itemsize());
    c.flops += double(t.numel());
  }
  return c;
}

}  // namespace dg
